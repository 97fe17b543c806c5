//! Conversions between k8s-openapi's types and the core's model on real
//! manifests: what the model knows survives core → Kubernetes → core
//! unchanged, and the typed and untyped ways agree.

use k8s_openapi::api::core::v1 as core_v1;
use k8s_openapi::api::storage::v1 as storage_v1;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use volplane_core::model::{Kind, Object};
use volplane_kube::convert::{from_typed, kind_of, to_typed};

fn round_trip<K: Serialize + DeserializeOwned>(doc: &Value) -> Object {
    let typed: K = serde_json::from_value(doc.clone()).expect("a valid Kubernetes object");
    let object = from_typed(&typed).expect("the model reads it");
    assert_eq!(
        Object::from_json(doc.clone()).unwrap(),
        object,
        "typed and untyped agree"
    );
    let back: K = to_typed(&object).expect("the model writes a valid Kubernetes object");
    assert_eq!(
        from_typed(&back).unwrap(),
        object,
        "core → Kubernetes → core is the identity"
    );
    object
}

fn check(text: &str) -> Vec<Kind> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
    let mut kinds = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let Some(kind) = kind_of(&doc) else { continue };
        let o = match kind {
            Kind::PersistentVolume => round_trip::<core_v1::PersistentVolume>(&doc),
            Kind::PersistentVolumeClaim => round_trip::<core_v1::PersistentVolumeClaim>(&doc),
            Kind::StorageClass => round_trip::<storage_v1::StorageClass>(&doc),
            Kind::VolumeAttachment => round_trip::<storage_v1::VolumeAttachment>(&doc),
            Kind::CsiNode => round_trip::<storage_v1::CSINode>(&doc),
            Kind::CsiDriver => round_trip::<storage_v1::CSIDriver>(&doc),
            Kind::Node => round_trip::<core_v1::Node>(&doc),
            Kind::Pod => round_trip::<core_v1::Pod>(&doc),
            Kind::Secret => round_trip::<core_v1::Secret>(&doc),
            Kind::VolumeAttributesClass => round_trip::<storage_v1::VolumeAttributesClass>(&doc),
            Kind::CsiStorageCapacity => round_trip::<storage_v1::CSIStorageCapacity>(&doc),
            // The snapshot CRDs have no k8s-openapi types: through JSON.
            Kind::VolumeSnapshot
            | Kind::VolumeSnapshotContent
            | Kind::VolumeSnapshotClass
            | Kind::VolumeGroupSnapshot
            | Kind::VolumeGroupSnapshotContent
            | Kind::VolumeGroupSnapshotClass => {
                let object = Object::from_json(doc.clone()).expect("the model reads it");
                let back = Object::from_json(object.to_json()).unwrap();
                assert_eq!(back, object, "core → JSON → core is the identity");
                object
            }
        };
        assert_eq!(o.kind(), kind);
        kinds.push(kind);
    }
    kinds
}

#[test]
fn a_clusters_objects_round_trip() {
    let kinds = check(include_str!("manifests/cluster.yaml"));
    assert_eq!(
        kinds.len(),
        Kind::ALL.len(),
        "every kind the model knows: {kinds:?}"
    );
}

#[test]
fn the_lab_manifests_round_trip() {
    for text in [
        include_str!("../../examples/lab/storage.yaml"),
        include_str!("../../examples/lab/solo.yaml"),
        include_str!("../../examples/lab/web.yaml"),
    ] {
        check(text);
    }
}

#[test]
fn what_the_model_knows_survives_into_the_typed_object() {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(include_str!("manifests/cluster.yaml")).unwrap();
    let pv: core_v1::PersistentVolume = serde_json::from_value(docs[0].clone()).unwrap();
    let back: core_v1::PersistentVolume = to_typed(&from_typed(&pv).unwrap()).unwrap();
    let (a, b) = (pv.spec.unwrap(), back.spec.unwrap());
    assert_eq!(a.capacity, b.capacity);
    assert_eq!(a.claim_ref.map(|r| r.uid), b.claim_ref.map(|r| r.uid));
    assert_eq!(
        a.csi.as_ref().map(|c| &c.volume_handle),
        b.csi.as_ref().map(|c| &c.volume_handle)
    );
    assert_eq!(a.node_affinity, b.node_affinity);
    assert_eq!(pv.metadata.finalizers, back.metadata.finalizers);
    assert_eq!(pv.metadata.annotations, back.metadata.annotations);
}

#[test]
fn nulls_from_the_api_server_read_as_absent() {
    // What a real kube-apiserver sends for a CSINode created with an empty
    // topologyKeys list.
    let doc = serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node-a", "labels": null},
        "spec": {"drivers": [{"name": "d", "nodeID": "n", "topologyKeys": null}]}});
    let Object::CsiNode(n) = volplane_kube::convert::to_core(doc).unwrap() else {
        panic!("a CSINode");
    };
    assert!(n.spec.drivers[0].topology_keys.is_empty());
}
