//! The node calls' Secrets: the PV's nodeStageSecretRef,
//! nodePublishSecretRef and nodeExpandSecretRef, read before each call.

use super::*;

const TOKEN: &str = "n0de-t0ken";

/// The PV naming `kube-system/<call>-creds` for each node call.
fn with_node_secrets(r: &mut Rig<Kubelet>) {
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    let csi = pv.spec.csi.as_mut().unwrap();
    let named = |name: &str| {
        Some(SecretReference {
            name: format!("{name}-creds"),
            namespace: "kube-system".into(),
        })
    };
    csi.node_stage_secret_ref = named("stage");
    csi.node_publish_secret_ref = named("publish");
    csi.node_expand_secret_ref = named("expand");
    r.user(ApiCall::Update(Object::Pv(pv)));
}

fn secret(r: &mut Rig<Kubelet>, name: &str) {
    let value = format!("{TOKEN}-{name}");
    let s = Secret::new(
        "kube-system",
        &format!("{name}-creds"),
        &[("token", &value)],
    );
    r.create(Object::Secret(s));
}

/// What each node call carried, by call.
fn carried(r: &Rig<Kubelet>) -> Vec<(&'static str, Option<String>)> {
    r.csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::NodeStage(s) => Some(("stage", s.secrets.0.get("token").cloned())),
            Request::NodePublish(p) => Some(("publish", p.secrets.0.get("token").cloned())),
            Request::NodeExpand(e) => Some(("expand", e.secrets.0.get("token").cloned())),
            _ => None,
        })
        .collect()
}

#[test]
fn each_node_call_gets_the_secret_its_pv_names_and_nothing_shows_it() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    with_node_secrets(&mut r);
    for name in ["stage", "publish", "expand"] {
        secret(&mut r, name);
    }
    pod(&mut r, "web-0");
    grow_pv(&mut r);
    let Some(Object::Pvc(mut c)) = r
        .get(Kind::PersistentVolumeClaim, "default", "data")
        .cloned()
    else {
        panic!()
    };
    c.set_resize_status(Some(crate::model::names::expansion::NODE_PENDING));
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    let want = |n: &str| Some(format!("{TOKEN}-{n}"));
    assert_eq!(
        carried(&r),
        [
            ("stage", want("stage")),
            ("publish", want("publish")),
            ("expand", want("expand"))
        ]
    );
    let shown = format!("{:?}{:?}", r.machine, r.events);
    assert!(!shown.contains(TOKEN), "the Secret data shows nowhere");
}

/// A Secret that cannot be read fails the mount with a FailedMount warning
/// naming it, nothing is staged, and it is retried until the Secret exists.
#[test]
fn a_missing_node_stage_secret_fails_the_mount_until_it_exists() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    with_node_secrets(&mut r);
    pod(&mut r, "web-0");
    assert!(carried(&r).is_empty(), "{:?}", calls(&r));
    assert!(
        r.machine.actual().devices.is_empty(),
        "nothing recorded staged"
    );
    let warned = r.events.iter().any(|e| {
        e.reason == crate::model::names::reason::FAILED_MOUNT
            && e.message.contains(
                "MountVolume.MountDevice failed for volume \"pv-1\" : fetching NodeStageSecretRef kube-system/stage-creds failed: error getting secret stage-creds in namespace kube-system",
            )
    });
    assert!(warned, "{:?}", r.events);
    secret(&mut r, "stage");
    secret(&mut r, "publish");
    r.advance(60_000);
    assert_eq!(carried(&r).len(), 2, "{:?}", calls(&r));
}

/// A PV naming something no Secret can be called (a path, say) is refused
/// before any read, with a warning saying which field to correct.
#[test]
fn a_hostile_secret_name_on_the_pv_is_refused_before_any_read() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    pv.spec.csi.as_mut().unwrap().node_stage_secret_ref = Some(SecretReference {
        name: "../../namespaces/kube-system/secrets/admin".into(),
        namespace: "default".into(),
    });
    r.user(ApiCall::Update(Object::Pv(pv)));
    pod(&mut r, "web-0");
    r.advance(10_000);
    assert!(
        !r.reads
            .iter()
            .any(|c| matches!(c, ApiCall::Get(k) if k.kind == Kind::Secret)),
        "no read of the named Secret"
    );
    assert!(carried(&r).is_empty(), "{:?}", calls(&r));
    let warned = r.events.iter().any(|e| {
        e.reason == crate::model::names::reason::FAILED_MOUNT
            && e.message.contains("persistentvolume pv-1 names Secret")
            && e.message.contains("in its nodeStageSecretRef")
            && e.message.contains("correct the PV")
    });
    assert!(warned, "{:?}", r.events);
}
