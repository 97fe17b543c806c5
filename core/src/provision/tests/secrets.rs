//! B2.9–B2.11 and B5.4: the Secrets a provisioned volume's calls use —
//! resolved from the class, read for CreateVolume and DeleteVolume, shown
//! nowhere else — and hostile annotations refused before any read.

use super::*;

#[test]
fn b2_10_b2_11_the_class_secret_references_are_written_on_the_pv() {
    let mut r = rig();
    class(
        &mut r,
        &[
            ("csi.storage.k8s.io/secret-name", "${pvc.name}-creds"),
            ("csi.storage.k8s.io/secret-namespace", "${pvc.namespace}"),
            ("csi.storage.k8s.io/provisioner-secret-name", "provisioner"),
            ("csi.storage.k8s.io/provisioner-secret-namespace", "storage"),
            ("csiNodePublishSecretName", "${pv.name}"),
            ("csiNodePublishSecretNamespace", "storage"),
        ],
    );
    r.create(Object::Secret(Secret::new("storage", "provisioner", &[])));
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let name = format!("pvc-{}", c.metadata.uid);
    let pv = pv(&r, &name).expect("provisioned");
    let csi = pv.spec.csi.as_ref().unwrap();
    let secret = |name: &str, namespace: &str| {
        Some(SecretReference {
            name: name.into(),
            namespace: namespace.into(),
        })
    };
    let default = secret("data-creds", "default");
    assert_eq!(csi.controller_publish_secret_ref, default);
    assert_eq!(csi.node_stage_secret_ref, default);
    assert_eq!(csi.controller_expand_secret_ref, default);
    assert_eq!(csi.node_expand_secret_ref, default);
    assert_eq!(csi.node_publish_secret_ref, secret(&name, "storage"));
    let ann = &pv.metadata.annotations;
    assert_eq!(&ann[names::ANN_DELETION_SECRET_NAME], "provisioner");
    assert_eq!(&ann[names::ANN_DELETION_SECRET_NAMESPACE], "storage");
    // The deprecated keys are passed on to the driver; the prefixed are not.
    let params = &creates(&r)[0].parameters;
    assert_eq!(params.len(), 2, "{params:?}");
    assert!(params.contains_key("csiNodePublishSecretName"));
}

const PROVISIONER_SECRET: [(&str, &str); 2] = [
    ("csi.storage.k8s.io/provisioner-secret-name", "provisioner"),
    ("csi.storage.k8s.io/provisioner-secret-namespace", "storage"),
];

#[test]
fn b2_10_create_volume_gets_the_provisioner_secret_and_nothing_else_shows_it() {
    let mut r = rig();
    class(&mut r, &PROVISIONER_SECRET);
    r.create(Object::Secret(Secret::new(
        "storage",
        "provisioner",
        &[("password", "s3cr3t-value")],
    )));
    r.create(Object::Pvc(claim("data")));
    let calls = creates(&r);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].secrets.0["password"], "s3cr3t-value");
    // Read with a get, as upstream's sidecar does (it may not list or watch).
    assert!(
        r.writes
            .iter()
            .chain(r.reads.iter())
            .any(|c| matches!(c, ApiCall::Get(k) if k.kind == Kind::Secret))
    );
    let shown = format!("{:?} {:?} {:?}", r.machine, r.events, r.csi_calls);
    assert!(
        !shown.contains("s3cr3t-value"),
        "the secret leaked: {shown}"
    );
    assert!(shown.contains("redacted"));
}

#[test]
fn b2_10_a_missing_provisioner_secret_fails_with_upstreams_message_then_recovers() {
    let mut r = rig();
    class(&mut r, &PROVISIONER_SECRET);
    r.create(Object::Pvc(claim("data")));
    assert!(creates(&r).is_empty());
    assert_eq!(r.reasons(), vec![reason::PROVISIONING_FAILED]);
    assert_eq!(
        r.events[0].message,
        "error getting secret provisioner in namespace storage: secrets \"provisioner\" not found"
    );
    r.create(Object::Secret(Secret::new(
        "storage",
        "provisioner",
        &[("k", "v")],
    )));
    r.advance(10_000);
    let calls = creates(&r);
    assert_eq!(calls.len(), 1, "provisioned once the Secret exists");
    assert_eq!(calls[0].secrets.0["k"], "v");
}

#[test]
fn b2_9_a_secret_reference_that_cannot_resolve_fails_before_create_volume() {
    let mut r = rig();
    class(
        &mut r,
        &[
            ("csi.storage.k8s.io/node-stage-secret-name", "creds"),
            (
                "csi.storage.k8s.io/node-stage-secret-namespace",
                "${pvc.name}",
            ),
        ],
    );
    r.create(Object::Pvc(claim("data")));
    assert!(creates(&r).is_empty());
    assert_eq!(r.reasons(), vec![reason::PROVISIONING_FAILED]);
    assert_eq!(
        r.events[0].message,
        "error resolving value \"${pvc.name}\": invalid tokens: [\"pvc.name\"]"
    );
}

/// A Released PV under Delete whose deletion annotations name
/// `storage/deleter`, and whose class names `storage/by-class`.
/// Deletion annotations that name no valid Secret (hand-edited to steer
/// the get elsewhere) are refused before any read, with a message saying
/// which annotations to correct; the volume is not deleted without them.
#[test]
fn b5_4_a_hostile_deletion_secret_annotation_is_refused_before_any_read() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut v = PersistentVolume::new("pvc-1");
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    v.spec.storage_class_name = Some("fast".into());
    v.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    let ann = &mut v.metadata.annotations;
    ann.insert(names::ANN_PROVISIONED_BY.into(), DRIVER.into());
    ann.insert(
        names::ANN_DELETION_SECRET_NAME.into(),
        "../secrets/x".into(),
    );
    ann.insert(
        names::ANN_DELETION_SECRET_NAMESPACE.into(),
        "storage".into(),
    );
    v.status.phase = Some(PvPhase::Released);
    r.create(Object::Pv(v));
    assert!(r.reads.is_empty(), "no get: {:?}", r.reads);
    assert!(
        !r.csi_calls
            .iter()
            .any(|(_, c)| matches!(c, Request::DeleteVolume(_))),
        "not deleted without its Secret"
    );
    assert!(
        r.events
            .iter()
            .any(|e| e.reason == reason::VOLUME_FAILED_DELETE
                && e.message
                    .contains("no valid Secret name and namespace; correct the annotations")),
        "{:?}",
        r.events
    );
}

fn released_with_secret(r: &mut Rig<Provisioner>, annotated: bool) -> Vec<driver::Secrets> {
    class(
        r,
        &[
            ("csi.storage.k8s.io/provisioner-secret-name", "by-class"),
            ("csi.storage.k8s.io/provisioner-secret-namespace", "storage"),
        ],
    );
    let mut v = PersistentVolume::new("pvc-1");
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    v.spec.storage_class_name = Some("fast".into());
    v.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    let ann = &mut v.metadata.annotations;
    ann.insert(names::ANN_PROVISIONED_BY.into(), DRIVER.into());
    if annotated {
        ann.insert(names::ANN_DELETION_SECRET_NAME.into(), "deleter".into());
        ann.insert(
            names::ANN_DELETION_SECRET_NAMESPACE.into(),
            "storage".into(),
        );
    }
    v.status.phase = Some(PvPhase::Released);
    r.create(Object::Pv(v));
    r.csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::DeleteVolume(d) => Some(d.secrets.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn b5_4_delete_volume_gets_the_secret_the_deletion_annotations_name() {
    let mut r = rig();
    r.create(Object::Secret(Secret::new(
        "storage",
        "deleter",
        &[("token", "t1")],
    )));
    r.create(Object::Secret(Secret::new(
        "storage",
        "by-class",
        &[("token", "t2")],
    )));
    let sent = released_with_secret(&mut r, true);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0["token"], "t1");
    assert!(pv(&r, "pvc-1").is_none(), "then the PV goes");
}

#[test]
fn b5_4_without_the_annotations_the_class_names_the_secret() {
    let mut r = rig();
    r.create(Object::Secret(Secret::new(
        "storage",
        "by-class",
        &[("token", "t2")],
    )));
    let sent = released_with_secret(&mut r, false);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0["token"], "t2");
}

#[test]
fn b5_4_a_secret_gone_before_its_volume_does_not_keep_the_volume() {
    let mut r = rig();
    let sent = released_with_secret(&mut r, true);
    assert_eq!(sent, vec![driver::Secrets::default()]);
    assert!(pv(&r, "pvc-1").is_none());
}
