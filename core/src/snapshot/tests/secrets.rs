//! The snapshotter's Secrets: the class's `snapshotter-secret-*` pair,
//! written on the content by the snapshot controller, read by the sidecar
//! for CreateSnapshot and DeleteSnapshot.

use super::*;

const TOKEN: &str = "s3cr3t-t0ken";

/// A world whose class names `default/snap-creds` (the namespace by
/// template) for the snapshotter.
fn with_secret_class() -> World {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    let mut class = VolumeSnapshotClass::new("snaps", DRIVER, DeletionPolicy::Delete);
    class.parameters = [
        ("csi.storage.k8s.io/snapshotter-secret-name", "snap-creds"),
        (
            "csi.storage.k8s.io/snapshotter-secret-namespace",
            "${volumesnapshot.namespace}",
        ),
        ("type", "fast"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    w.user(ApiCall::Update(Object::SnapshotClass(class)));
    w
}

fn secrets_of(calls: &[CsiCall]) -> Vec<(&'static str, Option<String>)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Request::CreateSnapshot(c) => Some(("create", c.secrets.0.get("token").cloned())),
            Request::DeleteSnapshot(d) => Some(("delete", d.secrets.0.get("token").cloned())),
            _ => None,
        })
        .collect()
}

/// [`with_secret_class`], its Secret, and the snapshot `s1` cut with it
/// (and the name of its content).
fn snapshotted_with_secret() -> (World, String) {
    let mut w = with_secret_class();
    w.create(Object::Secret(Secret::new(
        "default",
        "snap-creds",
        &[("token", TOKEN)],
    )));
    let s = w.snap("s1");
    let content_name = names::snapshot_content_name(&s.metadata.uid);
    (w, content_name)
}

#[test]
fn the_class_secret_reaches_create_and_delete_snapshot_and_nothing_else() {
    let (mut w, content_name) = snapshotted_with_secret();
    let content = w.content(&content_name).expect("a content");
    let ann = &content.metadata.annotations;
    assert_eq!(
        ann.get(names::ANN_SNAPSHOT_DELETION_SECRET_NAME),
        Some("snap-creds")
    );
    assert_eq!(
        ann.get(names::ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE),
        Some("default")
    );
    assert!(content.ready(), "cut");
    let Some(Request::CreateSnapshot(c)) = w.csi_calls.first() else {
        panic!("{:?}", w.csi_calls)
    };
    assert_eq!(
        c.parameters.keys().collect::<Vec<_>>(),
        ["type"],
        "the secret parameters stay with the sidecar"
    );
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert_eq!(
        secrets_of(&w.csi_calls),
        [
            ("create", Some(TOKEN.into())),
            ("delete", Some(TOKEN.into()))
        ]
    );
    assert!(w.content(&content_name).is_none(), "gone");
    let shown = format!("{:?}{:?}{:?}", w.sidecar, w.controller, w.events);
    assert!(!shown.contains(TOKEN), "the Secret's data shows nowhere");
}

#[test]
fn a_missing_secret_fails_the_cut_until_it_exists_and_a_delete_goes_on_without_it() {
    let mut w = with_secret_class();
    let s = w.snap("s1");
    let content_name = names::snapshot_content_name(&s.metadata.uid);
    let content = w.content(&content_name).expect("a content");
    let error = content
        .status
        .and_then(|st| st.error)
        .and_then(|e| e.message)
        .unwrap_or_default();
    assert!(
        error.contains(&format!(
            "failed to get input parameters to create snapshot for content {content_name}"
        )) && error.contains("error getting secret snap-creds in namespace default"),
        "{error}"
    );
    assert!(
        secrets_of(&w.csi_calls).is_empty(),
        "no CreateSnapshot without its Secret"
    );
    // The Secret appears: the next attempt (after its backoff) cuts.
    w.create(Object::Secret(Secret::new(
        "default",
        "snap-creds",
        &[("token", TOKEN)],
    )));
    w.advance(2_000);
    assert!(
        w.content(&content_name).is_some_and(|c| c.ready()),
        "cut once the Secret exists"
    );
    // The Secret goes before the snapshot: a restarted sidecar (its memory
    // empty) still deletes the storage snapshot, without credentials.
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::Secret,
        "default",
        "snap-creds",
    )));
    w.sidecar = Snapshotter::new(DRIVER).with_groups(true);
    for o in w.store.objects().cloned().collect::<Vec<_>>() {
        w.inbox[1].push_back(Input::Watch(crate::control::Watch::Applied(o.into())));
    }
    w.run();
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert_eq!(secrets_of(&w.csi_calls).last(), Some(&("delete", None)));
    assert!(w.content(&content_name).is_none(), "gone");
}

/// A content whose annotations name no valid Secret (a hand-edited
/// `../` name) is refused before any read: no get is steered elsewhere and
/// no DeleteSnapshot goes out without the credentials it was meant to have.
#[test]
fn a_hostile_secret_annotation_is_refused_before_any_read() {
    let (mut w, content_name) = snapshotted_with_secret();
    let mut c = w.content(&content_name).expect("a content");
    c.metadata.annotations.insert(
        names::ANN_SNAPSHOT_DELETION_SECRET_NAME.into(),
        "../../namespaces/kube-system/secrets/x".into(),
    );
    w.user(ApiCall::Update(Object::Content(c)));
    // A restarted sidecar knows no credentials: it must read them anew.
    w.sidecar = Snapshotter::new(DRIVER).with_groups(true);
    for o in w.store.objects().cloned().collect::<Vec<_>>() {
        w.inbox[1].push_back(Input::Watch(crate::control::Watch::Applied(o.into())));
    }
    w.run();
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert_eq!(
        secrets_of(&w.csi_calls),
        [("create", Some(TOKEN.into()))],
        "no DeleteSnapshot"
    );
    assert!(
        w.reasons().contains(&reason::SNAPSHOT_DELETE_ERROR),
        "{:?}",
        w.reasons()
    );
    assert!(
        w.content(&content_name).is_some(),
        "kept until an admin corrects it"
    );
}

/// A pre-provisioned content `imported` of the class `listed`, whose
/// `snapshotter-list-secret-*` name `kube-system/list-<content name>`.
fn imported_under_list_secret(w: &mut World) {
    let mut class = VolumeSnapshotClass::new("listed", DRIVER, DeletionPolicy::Retain);
    class.parameters = [
        (
            "csi.storage.k8s.io/snapshotter-list-secret-name",
            "list-${volumesnapshotcontent.name}",
        ),
        (
            "csi.storage.k8s.io/snapshotter-list-secret-namespace",
            "kube-system",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    w.create(Object::SnapshotClass(class));
    imported(w, "listed");
}

/// A pre-provisioned content `imported` (snapshot `snap-old`) of `class`.
fn imported(w: &mut World, class: &str) {
    let mut c = VolumeSnapshotContent::new("imported");
    c.spec.driver = DRIVER.into();
    c.spec.deletion_policy = DeletionPolicy::Retain;
    c.spec.source.snapshot_handle = Some("snap-old".into());
    c.spec.volume_snapshot_class_name = Some(class.into());
    c.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: "restored".into(),
        ..Default::default()
    };
    w.create(Object::Content(c));
}

/// The error the content `imported` shows.
fn shown_error(w: &World) -> Option<String> {
    w.content("imported")?.status?.error?.message
}

fn listed_with(w: &World) -> Vec<Option<String>> {
    w.csi_calls
        .iter()
        .filter_map(|c| match c {
            Request::ListSnapshots(l) => Some(l.secrets.0.get("token").cloned()),
            _ => None,
        })
        .collect()
}

/// ListSnapshots of a pre-provisioned snapshot gets its class's
/// `snapshotter-list-secret-*` (upstream's checkandUpdateContentStatus),
/// `${volumesnapshotcontent.name}` resolved; until the Secret exists, the
/// content says why and nothing is listed.
#[test]
fn a_pre_provisioned_snapshot_is_listed_with_the_class_list_secret() {
    let mut w = World::new();
    imported_under_list_secret(&mut w);
    assert!(listed_with(&w).is_empty(), "{:?}", w.csi_calls);
    assert_eq!(
        shown_error(&w).as_deref(),
        Some(
            "Failed to check and update snapshot content: failed to get credentials for snapshot content imported: error getting secret list-imported in namespace kube-system: secrets \"list-imported\" not found"
        )
    );
    w.create(Object::Secret(Secret::new(
        "kube-system",
        "list-imported",
        &[("token", TOKEN)],
    )));
    w.advance(600_000);
    assert_eq!(listed_with(&w), [Some(TOKEN.to_string())]);
    assert!(w.content("imported").unwrap().ready());
    let shown = format!("{:?}{:?}{:?}", w.sidecar, w.csi_calls, w.events);
    assert!(!shown.contains(TOKEN), "the Secret's data shows nowhere");
}

/// A class the content names that does not exist is said so, as upstream
/// says it, and nothing is listed before it appears.
#[test]
fn a_pre_provisioned_snapshot_of_a_missing_class_is_not_listed_until_it_exists() {
    let mut w = World::new();
    imported(&mut w, "later");
    assert!(listed_with(&w).is_empty());
    assert_eq!(
        shown_error(&w).as_deref(),
        Some(
            "Failed to check and update snapshot content: failed to get snapshot class later for snapshot content imported: volumesnapshotclass.snapshot.storage.k8s.io \"later\" not found"
        )
    );
    w.create(Object::SnapshotClass(VolumeSnapshotClass::new(
        "later",
        DRIVER,
        DeletionPolicy::Retain,
    )));
    assert_eq!(listed_with(&w), [None]);
}
