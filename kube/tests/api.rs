//! The machines' API calls against a played API server: updates are patches
//! of only what the machine changed, preconditioned on its resourceVersion;
//! the status subresource; 409 and 404; delete with and without finalizers.

use serde_json::json;
use volplane_core::control::{ApiCall, ApiResult};
use volplane_core::model::{Kind, Object, ObjectKey};
use volplane_kube::api::{ApiCaller, Seen};
use volplane_kube::fake::FakeApi;

const PV: &str = "/api/v1/persistentvolumes/pv-1";

/// A PV with fields, labels, annotations and finalizers the model does not
/// know or does not touch.
fn pv_with_unknown_fields() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {
            "name": "pv-1",
            "labels": {"team": "storage"},
            "annotations": {"pv.kubernetes.io/provisioned-by": "csi.example.com",
                            "example.com/owner": "someone"},
            "finalizers": ["kubernetes.io/pv-protection", "example.com/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
        },
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "fast",
            "csi": {"driver": "csi.example.com", "volumeHandle": "vol-1",
                    "fsType": "ext4", "futureCsiField": {"x": 1}},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]}]}]}},
            "someFutureSpecField": true
        },
        "status": {"phase": "Available", "lastPhaseTransitionTime": "2026-11-23T11:00:00Z"}
    })
}

fn setup() -> (FakeApi, ApiCaller, Seen) {
    let api = FakeApi::default();
    let seen = Seen::default();
    (
        api.clone(),
        ApiCaller::new(api.client(), seen.clone()),
        seen,
    )
}

fn key(kind: Kind, ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(kind, ns, name)
}

async fn read(caller: &ApiCaller, k: ObjectKey) -> Object {
    match caller.call(ApiCall::Get(k)).await {
        ApiResult::Ok(Some(o)) => std::sync::Arc::unwrap_or_clone(o),
        other => panic!("get: {other:?}"),
    }
}

#[tokio::test]
async fn an_update_keeps_every_field_it_did_not_change() {
    let (api, caller, _) = setup();
    let before = api.put(PV, pv_with_unknown_fields());
    let Object::Pv(mut pv) = read(&caller, key(Kind::PersistentVolume, "", "pv-1")).await else {
        panic!("a PV");
    };
    pv.spec.claim_ref = Some(volplane_core::model::ObjectReference {
        kind: "PersistentVolumeClaim".into(),
        namespace: "default".into(),
        name: "data".into(),
        uid: "uid-claim".into(),
        ..Default::default()
    });
    pv.metadata
        .annotations
        .insert("pv.kubernetes.io/bound-by-controller".into(), "yes".into());
    let ApiResult::Ok(Some(_)) = caller.call(ApiCall::Update(Object::Pv(pv))).await else {
        panic!("the update succeeds");
    };
    let patch = api
        .log()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a PATCH");
    assert_eq!(patch.path, PV);
    assert_eq!(patch.content_type, "application/merge-patch+json");
    assert!(
        patch.query.contains("fieldManager=volplane"),
        "{}",
        patch.query
    );
    assert_eq!(
        patch.body,
        json!({
            "metadata": {
                "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
                "resourceVersion": before["metadata"]["resourceVersion"]
            },
            "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "namespace": "default",
                                  "name": "data", "uid": "uid-claim"}}
        }),
        "only what changed, and the precondition"
    );
    let mut after = api.get(PV).unwrap();
    let mut expected = before.clone();
    expected["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = json!("yes");
    expected["spec"]["claimRef"] = patch.body["spec"]["claimRef"].clone();
    // Only the resourceVersion moved besides.
    after["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"].clone();
    assert_eq!(after, expected);
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_and_writes_nothing() {
    let (api, caller, _) = setup();
    api.put(PV, pv_with_unknown_fields());
    let Object::Pv(mut pv) = read(&caller, key(Kind::PersistentVolume, "", "pv-1")).await else {
        panic!("a PV");
    };
    // Someone else changes it after the machine read it, before any watch
    // tells this process.
    let mut theirs = api.get(PV).unwrap();
    theirs["metadata"]["labels"]["changed"] = json!("by-someone");
    api.put(PV, theirs);
    pv.metadata.labels.insert("mine".into(), "x".into());
    assert_eq!(
        caller.call(ApiCall::Update(Object::Pv(pv))).await,
        ApiResult::Conflict
    );
    let now = api.get(PV).unwrap();
    assert!(now["metadata"]["labels"].get("mine").is_none());
    assert_eq!(now["metadata"]["labels"]["changed"], json!("by-someone"));
}

#[tokio::test]
async fn a_status_update_goes_to_the_status_subresource_alone() {
    let (api, caller, _) = setup();
    api.put(PV, pv_with_unknown_fields());
    let Object::Pv(mut pv) = read(&caller, key(Kind::PersistentVolume, "", "pv-1")).await else {
        panic!("a PV");
    };
    pv.status.phase = Some(volplane_core::model::PvPhase::Bound);
    let Some(Object::Pv(written)) = caller
        .call(ApiCall::UpdateStatus(Object::Pv(pv)))
        .await
        .into_object()
    else {
        panic!("the status update succeeds");
    };
    assert_eq!(
        written.status.phase,
        Some(volplane_core::model::PvPhase::Bound)
    );
    let patch = api.log().into_iter().find(|r| r.method == "PATCH").unwrap();
    assert_eq!(patch.path, format!("{PV}/status"));
    assert_eq!(patch.body["status"], json!({"phase": "Bound"}));
    assert!(patch.body.get("spec").is_none());
    let now = api.get(PV).unwrap();
    assert_eq!(
        now["status"]["lastPhaseTransitionTime"],
        json!("2026-11-23T11:00:00Z")
    );
    assert_eq!(now["spec"]["someFutureSpecField"], json!(true));
}

#[tokio::test]
async fn create_get_list_and_delete_say_what_the_server_answered() {
    let (api, caller, _) = setup();
    let claim = |name: &str| {
        let mut metadata = volplane_core::model::ObjectMeta::namespaced("default", name);
        metadata
            .finalizers
            .push("kubernetes.io/pvc-protection".into());
        let c = volplane_core::model::PersistentVolumeClaim {
            metadata,
            ..Default::default()
        };
        Object::Pvc(c)
    };
    let ApiResult::Ok(Some(created)) = caller.call(ApiCall::Create(claim("data"))).await else {
        panic!("created");
    };
    assert!(!created.meta().uid.is_empty());
    let post = api.log().into_iter().find(|r| r.method == "POST").unwrap();
    assert_eq!(
        post.path,
        "/api/v1/namespaces/default/persistentvolumeclaims"
    );
    assert_eq!(post.body["kind"], json!("PersistentVolumeClaim"));
    assert_eq!(post.body["apiVersion"], json!("v1"));
    assert_eq!(
        caller.call(ApiCall::Create(claim("data"))).await,
        ApiResult::AlreadyExists
    );
    let k = key(Kind::PersistentVolumeClaim, "default", "data");
    assert_eq!(
        caller
            .call(ApiCall::Get(key(
                Kind::PersistentVolumeClaim,
                "default",
                "none"
            )))
            .await,
        ApiResult::NotFound
    );
    let ApiResult::Listed(all) = caller
        .call(ApiCall::List {
            kind: Kind::PersistentVolumeClaim,
            namespace: "default".into(),
        })
        .await
    else {
        panic!("listed");
    };
    assert_eq!(all.len(), 1);
    // A finalizer holds it: it stays, marked for deletion.
    let ApiResult::Ok(Some(deleting)) = caller.call(ApiCall::Delete(k.clone())).await else {
        panic!("marked for deletion");
    };
    assert!(deleting.meta().deleting());
    let mut released = (*deleting).clone();
    released.meta_mut().finalizers.clear();
    let _ = caller.call(ApiCall::Update(released)).await;
    assert_eq!(
        caller.call(ApiCall::Get(k.clone())).await,
        ApiResult::NotFound
    );
    assert_eq!(caller.call(ApiCall::Delete(k)).await, ApiResult::NotFound);
}

#[tokio::test]
async fn removing_the_last_finalizer_of_a_deleting_object_says_it_is_gone() {
    let (api, caller, seen) = setup();
    api.put(PV, pv_with_unknown_fields());
    let k = key(Kind::PersistentVolume, "", "pv-1");
    let ApiResult::Ok(Some(deleting)) = caller.call(ApiCall::Delete(k.clone())).await else {
        panic!("marked for deletion");
    };
    let mut last = (*deleting).clone();
    last.meta_mut().finalizers.clear();
    assert_eq!(
        caller.call(ApiCall::Update(last)).await,
        ApiResult::Ok(None)
    );
    assert!(api.get(PV).is_none());
    assert!(
        seen.get(&k).is_none(),
        "forgotten, not kept as a deleting object"
    );
}

/// A finalizer is taken off by value, with no resourceVersion: whatever
/// others changed since stays and nothing conflicts; the last one of a
/// deleting object removes it; another incarnation is not touched.
#[tokio::test]
async fn a_finalizer_comes_off_whatever_else_changed_and_only_from_its_incarnation() {
    let (api, caller, _) = setup();
    api.put(PV, pv_with_unknown_fields());
    let k = key(Kind::PersistentVolume, "", "pv-1");
    let uid = read(&caller, k.clone()).await.meta().uid.clone();
    let mut theirs = api.get(PV).unwrap();
    theirs["metadata"]["labels"]["changed"] = json!("by-someone");
    api.put(PV, theirs);
    let remove = |uid: &str, finalizer: &str| ApiCall::RemoveFinalizer {
        key: k.clone(),
        uid: uid.into(),
        finalizer: finalizer.into(),
    };
    assert_eq!(
        caller
            .call(remove("uid-of-another", "example.com/keep"))
            .await,
        ApiResult::NotFound
    );
    let ApiResult::Ok(Some(after)) = caller.call(remove(&uid, "example.com/keep")).await else {
        panic!("taken off");
    };
    assert_eq!(after.meta().finalizers, ["kubernetes.io/pv-protection"]);
    let now = api.get(PV).unwrap();
    assert_eq!(now["metadata"]["labels"]["changed"], json!("by-someone"));
    let sent = api
        .log()
        .into_iter()
        .rfind(|l| l.method == "PATCH")
        .unwrap();
    assert_eq!(sent.content_type, "application/strategic-merge-patch+json");
    assert!(sent.body["metadata"].get("resourceVersion").is_none());
    caller.call(ApiCall::Delete(k.clone())).await;
    assert_eq!(
        caller
            .call(remove(&uid, "kubernetes.io/pv-protection"))
            .await,
        ApiResult::Ok(None)
    );
    assert!(api.get(PV).is_none());
}

/// Issue 28: a write's answer that arrives after the watch brought a newer
/// version never replaces it, so the next update patches against what the
/// machine read and goes through; the adapter answers no conflict itself.
#[tokio::test]
async fn a_late_answer_never_hides_a_newer_version() {
    let (api, caller, seen) = setup();
    api.put(PV, pv_with_unknown_fields());
    let old = read(&caller, key(Kind::PersistentVolume, "", "pv-1")).await;
    // Another writer (pv-protection) changes it; the watch brings it here.
    let mut theirs = api.get(PV).unwrap();
    theirs["metadata"]["labels"]["changed"] = json!("by-someone");
    api.put(PV, theirs);
    let newer = read(&caller, key(Kind::PersistentVolume, "", "pv-1")).await;
    // Then the late answer of an earlier write, older than what was seen.
    seen.intern(std::sync::Arc::new(old.clone()));
    let kept = seen.get(&newer.key()).unwrap();
    assert_eq!(
        kept.meta().resource_version,
        newer.meta().resource_version,
        "an older version replaced a newer one"
    );
    let Object::Pv(mut pv) = newer else {
        panic!("a PV")
    };
    pv.metadata
        .finalizers
        .retain(|f| f != "kubernetes.io/pv-protection");
    let before = api.log().len();
    assert!(
        matches!(
            caller.call(ApiCall::Update(Object::Pv(pv))).await,
            ApiResult::Ok(Some(_))
        ),
        "the update against the newest version goes through"
    );
    assert_eq!(
        api.get(PV).unwrap()["metadata"]["finalizers"],
        json!(["example.com/keep"])
    );
    // An update against the old version is sent, and the server refuses it.
    let Object::Pv(mut stale) = old else {
        panic!("a PV")
    };
    stale.metadata.labels.insert("mine".into(), "x".into());
    assert_eq!(
        caller.call(ApiCall::Update(Object::Pv(stale))).await,
        ApiResult::Conflict
    );
    let patches = api.log()[before..]
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(
        patches, 2,
        "both updates went to the server, which judged them"
    );
}
