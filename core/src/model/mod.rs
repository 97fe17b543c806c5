//! The domain model: the Kubernetes objects of the volume lifecycle, with
//! Kubernetes' field names, so that real manifests (YAML or JSON) load and
//! round-trip. Unknown fields are ignored; unknown enum values are kept.
//!
//! Field documentation is Kubernetes' own (the API reference of the same
//! names); what volplane relies on is stated in SEMANTICS.md.

pub mod attributes;
pub mod class;
pub mod deployment;
pub mod enums;
pub mod group;
pub mod key;
pub mod map;
pub mod meta;
pub mod names;
pub mod patch;
pub mod quantity;
pub mod secret;
pub mod shared;
pub mod snapshot;
pub mod storage;
pub mod workload;

pub use attributes::Attributes;
pub use class::*;
pub use deployment::Deployment;
pub use enums::*;
pub use group::*;
pub use key::{Name, ObjectKey};
pub use map::Map;
/// Labels, annotations, parameters, attributes: text by text, packed.
pub type Labels = Attributes;
pub use meta::*;
pub use quantity::{Quantity, QuantityError};
pub use secret::{CredentialsError, Secret};
pub use shared::{Shared, Variant};
pub use snapshot::*;
pub use storage::*;
pub use workload::*;

use serde::{Deserialize, Serialize};

/// Object kinds the machines watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// `PersistentVolume`.
    PersistentVolume,
    /// `PersistentVolumeClaim`.
    PersistentVolumeClaim,
    /// `StorageClass`.
    StorageClass,
    /// `VolumeAttachment`.
    VolumeAttachment,
    /// `CsiNode`.
    CsiNode,
    /// `CsiDriver`.
    CsiDriver,
    /// `Node`.
    Node,
    /// `Pod`.
    Pod,
    /// `VolumeSnapshot`.
    VolumeSnapshot,
    /// `VolumeSnapshotContent`.
    VolumeSnapshotContent,
    /// `VolumeSnapshotClass`.
    VolumeSnapshotClass,
    /// `VolumeGroupSnapshot`.
    VolumeGroupSnapshot,
    /// `VolumeGroupSnapshotContent`.
    VolumeGroupSnapshotContent,
    /// `VolumeGroupSnapshotClass`.
    VolumeGroupSnapshotClass,
    /// `Secret` (read when a call needs it, never watched).
    Secret,
    /// `VolumeAttributesClass`.
    VolumeAttributesClass,
    /// `CSIStorageCapacity`.
    CsiStorageCapacity,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 17] = [
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
        Kind::StorageClass,
        Kind::VolumeAttachment,
        Kind::CsiNode,
        Kind::CsiDriver,
        Kind::Node,
        Kind::Pod,
        Kind::VolumeSnapshot,
        Kind::VolumeSnapshotContent,
        Kind::VolumeSnapshotClass,
        Kind::VolumeGroupSnapshot,
        Kind::VolumeGroupSnapshotContent,
        Kind::VolumeGroupSnapshotClass,
        Kind::Secret,
        Kind::VolumeAttributesClass,
        Kind::CsiStorageCapacity,
    ];

    /// The kind a manifest's `kind` string names, if the model knows it.
    pub fn parse(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The `kind` string of manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PersistentVolume => "PersistentVolume",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::StorageClass => "StorageClass",
            Kind::VolumeAttachment => "VolumeAttachment",
            Kind::CsiNode => "CSINode",
            Kind::CsiDriver => "CSIDriver",
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::VolumeSnapshot => "VolumeSnapshot",
            Kind::VolumeSnapshotContent => "VolumeSnapshotContent",
            Kind::VolumeSnapshotClass => "VolumeSnapshotClass",
            Kind::VolumeGroupSnapshot => "VolumeGroupSnapshot",
            Kind::VolumeGroupSnapshotContent => "VolumeGroupSnapshotContent",
            Kind::VolumeGroupSnapshotClass => "VolumeGroupSnapshotClass",
            Kind::Secret => "Secret",
            Kind::VolumeAttributesClass => "VolumeAttributesClass",
            Kind::CsiStorageCapacity => "CSIStorageCapacity",
        }
    }
}

/// Any object the machines know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum Object {
    /// `Pv`.
    Pv(PersistentVolume),
    /// `Pvc`.
    Pvc(PersistentVolumeClaim),
    /// `Class`.
    Class(StorageClass),
    /// `Va`.
    Va(VolumeAttachment),
    /// `CsiNode`.
    CsiNode(CsiNode),
    /// `CsiDriver`.
    CsiDriver(CsiDriver),
    /// `Node`.
    Node(Node),
    /// `Pod`.
    Pod(Pod),
    /// `Snapshot`.
    Snapshot(VolumeSnapshot),
    /// `Content`.
    Content(VolumeSnapshotContent),
    /// `SnapshotClass`.
    SnapshotClass(VolumeSnapshotClass),
    /// `GroupSnapshot`.
    GroupSnapshot(VolumeGroupSnapshot),
    /// `GroupContent`.
    GroupContent(VolumeGroupSnapshotContent),
    /// `GroupSnapshotClass`.
    GroupSnapshotClass(VolumeGroupSnapshotClass),
    /// `Secret`.
    Secret(Secret),
    /// `AttributesClass`.
    AttributesClass(VolumeAttributesClass),
    /// `Capacity`.
    Capacity(CsiStorageCapacity),
}

impl Object {
    /// Which kind it is.
    pub fn kind(&self) -> Kind {
        match self {
            Object::Pv(_) => Kind::PersistentVolume,
            Object::Pvc(_) => Kind::PersistentVolumeClaim,
            Object::Class(_) => Kind::StorageClass,
            Object::Va(_) => Kind::VolumeAttachment,
            Object::CsiNode(_) => Kind::CsiNode,
            Object::CsiDriver(_) => Kind::CsiDriver,
            Object::Node(_) => Kind::Node,
            Object::Pod(_) => Kind::Pod,
            Object::Snapshot(_) => Kind::VolumeSnapshot,
            Object::Content(_) => Kind::VolumeSnapshotContent,
            Object::SnapshotClass(_) => Kind::VolumeSnapshotClass,
            Object::GroupSnapshot(_) => Kind::VolumeGroupSnapshot,
            Object::GroupContent(_) => Kind::VolumeGroupSnapshotContent,
            Object::GroupSnapshotClass(_) => Kind::VolumeGroupSnapshotClass,
            Object::Secret(_) => Kind::Secret,
            Object::AttributesClass(_) => Kind::VolumeAttributesClass,
            Object::Capacity(_) => Kind::CsiStorageCapacity,
        }
    }

    /// Its metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Pv(o) => &o.metadata,
            Object::Pvc(o) => &o.metadata,
            Object::Class(o) => &o.metadata,
            Object::Va(o) => &o.metadata,
            Object::CsiNode(o) => &o.metadata,
            Object::CsiDriver(o) => &o.metadata,
            Object::Node(o) => &o.metadata,
            Object::Pod(o) => &o.metadata,
            Object::Snapshot(o) => &o.metadata,
            Object::Content(o) => &o.metadata,
            Object::SnapshotClass(o) => &o.metadata,
            Object::GroupSnapshot(o) => &o.metadata,
            Object::GroupContent(o) => &o.metadata,
            Object::GroupSnapshotClass(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
            Object::AttributesClass(o) => &o.metadata,
            Object::Capacity(o) => &o.metadata,
        }
    }

    /// Its metadata, to change.
    pub fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Object::Pv(o) => &mut o.metadata,
            Object::Pvc(o) => &mut o.metadata,
            Object::Class(o) => &mut o.metadata,
            Object::Va(o) => &mut o.metadata,
            Object::CsiNode(o) => &mut o.metadata,
            Object::CsiDriver(o) => &mut o.metadata,
            Object::Node(o) => &mut o.metadata,
            Object::Pod(o) => &mut o.metadata,
            Object::Snapshot(o) => &mut o.metadata,
            Object::Content(o) => &mut o.metadata,
            Object::SnapshotClass(o) => &mut o.metadata,
            Object::GroupSnapshot(o) => &mut o.metadata,
            Object::GroupContent(o) => &mut o.metadata,
            Object::GroupSnapshotClass(o) => &mut o.metadata,
            Object::Secret(o) => &mut o.metadata,
            Object::AttributesClass(o) => &mut o.metadata,
            Object::Capacity(o) => &mut o.metadata,
        }
    }

    /// The PersistentVolume, if it is one.
    pub fn as_pv(&self) -> Option<&PersistentVolume> {
        match self {
            Object::Pv(o) => Some(o),
            _ => None,
        }
    }

    /// The PersistentVolumeClaim, if it is one.
    pub fn as_pvc(&self) -> Option<&PersistentVolumeClaim> {
        match self {
            Object::Pvc(o) => Some(o),
            _ => None,
        }
    }

    /// The StorageClass, if it is one.
    pub fn as_class(&self) -> Option<&StorageClass> {
        match self {
            Object::Class(o) => Some(o),
            _ => None,
        }
    }

    /// The Pod, if it is one.
    pub fn as_pod(&self) -> Option<&Pod> {
        match self {
            Object::Pod(o) => Some(o),
            _ => None,
        }
    }

    /// The Node, if it is one.
    pub fn as_node(&self) -> Option<&Node> {
        match self {
            Object::Node(o) => Some(o),
            _ => None,
        }
    }

    /// The VolumeAttachment, if it is one.
    pub fn as_va(&self) -> Option<&VolumeAttachment> {
        match self {
            Object::Va(o) => Some(o),
            _ => None,
        }
    }

    /// `Kind/namespace/name`: unique across kinds.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(self.kind(), &self.meta().namespace, &self.meta().name)
    }

    /// The object a JSON document with Kubernetes' field names describes
    /// (its `kind` says which); fields the model does not know are ignored.
    ///
    /// A `null` member means the member is absent (Go's API server writes
    /// empty lists as `null`, e.g. a CSINode driver's `topologyKeys`).
    pub fn from_json(mut doc: serde_json::Value) -> Result<Object, DecodeError> {
        drop_nulls(&mut doc);
        fn load<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, DecodeError> {
            serde_json::from_value(v).map_err(|e| DecodeError::Fields(e.to_string()))
        }
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        Ok(match Kind::parse(kind) {
            Some(Kind::PersistentVolume) => Object::Pv(load(doc)?),
            Some(Kind::PersistentVolumeClaim) => Object::Pvc(load(doc)?),
            Some(Kind::StorageClass) => Object::Class(load(doc)?),
            Some(Kind::VolumeAttachment) => Object::Va(load(doc)?),
            Some(Kind::CsiNode) => Object::CsiNode(load(doc)?),
            Some(Kind::CsiDriver) => Object::CsiDriver(load(doc)?),
            Some(Kind::Node) => Object::Node(load(doc)?),
            Some(Kind::Pod) => Object::Pod(load(doc)?),
            Some(Kind::VolumeSnapshot) => Object::Snapshot(load(doc)?),
            Some(Kind::VolumeSnapshotContent) => Object::Content(load(doc)?),
            Some(Kind::VolumeSnapshotClass) => Object::SnapshotClass(load(doc)?),
            Some(Kind::VolumeGroupSnapshot) => Object::GroupSnapshot(load(doc)?),
            Some(Kind::VolumeGroupSnapshotContent) => Object::GroupContent(load(doc)?),
            Some(Kind::VolumeGroupSnapshotClass) => Object::GroupSnapshotClass(load(doc)?),
            Some(Kind::Secret) => Object::Secret(load(doc)?),
            Some(Kind::VolumeAttributesClass) => Object::AttributesClass(load(doc)?),
            Some(Kind::CsiStorageCapacity) => Object::Capacity(load(doc)?),
            None if kind.is_empty() => return Err(DecodeError::NoKind),
            None => return Err(DecodeError::UnknownKind(kind.to_string())),
        })
    }

    /// The object as JSON with Kubernetes' field names.
    pub fn to_json(&self) -> serde_json::Value {
        let v = match self {
            Object::Pv(o) => serde_json::to_value(o),
            Object::Pvc(o) => serde_json::to_value(o),
            Object::Class(o) => serde_json::to_value(o),
            Object::Va(o) => serde_json::to_value(o),
            Object::CsiNode(o) => serde_json::to_value(o),
            Object::CsiDriver(o) => serde_json::to_value(o),
            Object::Node(o) => serde_json::to_value(o),
            Object::Pod(o) => serde_json::to_value(o),
            Object::Snapshot(o) => serde_json::to_value(o),
            Object::Content(o) => serde_json::to_value(o),
            Object::SnapshotClass(o) => serde_json::to_value(o),
            Object::GroupSnapshot(o) => serde_json::to_value(o),
            Object::GroupContent(o) => serde_json::to_value(o),
            Object::GroupSnapshotClass(o) => serde_json::to_value(o),
            Object::Secret(o) => serde_json::to_value(o),
            Object::AttributesClass(o) => serde_json::to_value(o),
            Object::Capacity(o) => serde_json::to_value(o),
        };
        v.expect("model objects serialise")
    }
}

/// Removes `null` members, at any depth.
fn drop_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.retain(|_, m| !m.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A manifest document the model does not know (a Deployment, a Service…):
/// kept whole for whoever does.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct Unknown {
    /// `kind`.
    pub kind: String,
    /// `value`.
    pub value: serde_json::Value,
}

/// Why a document is not an object of the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Hash)]
pub enum DecodeError {
    /// It has no `kind`.
    #[error("it has no kind")]
    NoKind,
    /// Its `kind` is not one the machines know.
    #[error("kind {0:?} is not one the machines know")]
    UnknownKind(String),
    /// It is read as one kind and is another.
    #[error("{kind} is not a {expected}")]
    NotA {
        /// The kind it was read as.
        expected: &'static str,
        /// Its kind.
        kind: String,
    },
    /// Its fields do not fit its kind (the decoder's words).
    #[error("{0}")]
    Fields(String),
    /// A field the object cannot do without is empty.
    #[error("{0} is required")]
    Required(&'static str),
}

/// Why a manifest did not load.
#[derive(Debug, thiserror::Error, Hash)]
pub enum ManifestError {
    #[error("manifest is not valid YAML or JSON: {0}")]
    /// `Syntax`.
    Syntax(String),
    #[error("document {index} ({kind} {name:?}): {reason}")]
    /// `Object`.
    Object {
        /// `index`.
        index: usize,
        /// `kind`.
        kind: String,
        /// `name`.
        name: String,
        /// `reason`.
        reason: DecodeError,
    },
}

/// Loads every document of a YAML (or JSON) manifest. Documents of kinds the
/// model knows become [`Object`]s, the others [`Unknown`]s; `List` kinds are
/// flattened; empty documents are skipped.
pub fn parse_manifests(text: &str) -> Result<(Vec<Object>, Vec<Unknown>), ManifestError> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| ManifestError::Syntax(e.to_string()))?;
    let mut objects = Vec::new();
    let mut unknown = Vec::new();
    let mut queue: std::collections::VecDeque<serde_json::Value> = docs.into();
    let mut index = 0;
    while let Some(doc) = queue.pop_front() {
        if doc.is_null() {
            continue;
        }
        index += 1;
        let kind = doc
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let name = doc
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        let err = |reason: DecodeError| ManifestError::Object {
            index,
            kind: kind.clone(),
            name: name.clone(),
            reason,
        };
        match kind.as_str() {
            "List" | "PersistentVolumeList" | "PersistentVolumeClaimList" => {
                if let Some(items) = doc.get("items").and_then(|i| i.as_array()) {
                    queue.extend(items.iter().cloned());
                }
            }
            "" => return Err(err(DecodeError::NoKind)),
            k if Kind::parse(k).is_none() => unknown.push(Unknown { kind, value: doc }),
            _ => objects.push(Object::from_json(doc).map_err(err)?),
        }
    }
    Ok((objects, unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: volplane.csi.io
parameters:
  kind: block
reclaimPolicy: Retain
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: default
  labels: {app: web}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: fast
  resources:
    requests:
      storage: 1Gi
  somethingNew: ignored
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-1
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  persistentVolumeReclaimPolicy: Delete
  claimRef: {namespace: default, name: data}
  csi:
    driver: volplane.csi.io
    volumeHandle: vol-1
    volumeAttributes: {kind: block}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: topology.volplane.io/zone, operator: In, values: [local]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: default, uid: u-1}
spec:
  nodeName: node-a
  containers: [{name: c, image: busybox}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
  - name: scratch
    emptyDir: {}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {replicas: 2}
"#;

    #[test]
    fn real_manifests_load_with_defaults_and_round_trip() {
        let (objects, unknown) = parse_manifests(MANIFEST).unwrap();
        assert_eq!(objects.len(), 4);
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].kind, "Deployment");
        let Object::Class(sc) = &objects[0] else {
            panic!()
        };
        assert!(sc.is_default());
        assert_eq!(sc.binding_mode(), BindingMode::WaitForFirstConsumer);
        assert_eq!(sc.reclaim_policy(), ReclaimPolicy::Retain);
        let Object::Pvc(pvc) = &objects[1] else {
            panic!()
        };
        assert_eq!(pvc.request().unwrap().to_string(), "1Gi");
        assert_eq!(pvc.class(), "fast");
        assert_eq!(pvc.volume_mode(), VolumeMode::Filesystem);
        assert_eq!(pvc.phase(), PvcPhase::Pending);
        let Object::Pv(pv) = &objects[2] else {
            panic!()
        };
        assert_eq!(pv.capacity().unwrap().bytes(), 10 << 30);
        assert_eq!(pv.spec.csi.as_ref().unwrap().volume_handle, "vol-1");
        let labels = Labels::from([("topology.volplane.io/zone".to_string(), "local".to_string())]);
        assert!(pv.spec.node_affinity.as_ref().unwrap().admits(&labels));
        let Object::Pod(pod) = &objects[3] else {
            panic!()
        };
        assert_eq!(pod.claims().collect::<Vec<_>>(), vec!["data"]);
        assert_eq!(pod.node(), Some("node-a"));

        for o in &objects {
            let json = serde_json::to_string(&o.to_json()).unwrap();
            let (again, _) = parse_manifests(&json).unwrap();
            assert_eq!(&again[0], o, "{} round-trips through JSON", o.key());
        }
    }

    #[test]
    fn a_malformed_quantity_is_a_clear_error() {
        let e = parse_manifests(
            "kind: PersistentVolumeClaim\nmetadata: {name: x}\nspec: {resources: {requests: {storage: 10GB}}}\n",
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("PersistentVolumeClaim") && msg.contains("10GB"),
            "{msg}"
        );
    }
}
