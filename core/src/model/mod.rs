//! The domain model: the Kubernetes objects of the volume lifecycle, with
//! Kubernetes' field names, so that real manifests (YAML or JSON) load and
//! round-trip. Unknown fields are ignored; unknown enum values are kept.
//!
//! Field documentation is Kubernetes' own (the API reference of the same
//! names); what volplane relies on is stated in SEMANTICS.md.

pub mod class;
pub mod deployment;
pub mod enums;
pub mod group;
pub mod meta;
pub mod names;
pub mod patch;
pub mod quantity;
pub mod secret;
pub mod shared;
pub mod snapshot;
pub mod storage;
pub mod workload;

pub use class::*;
pub use deployment::Deployment;
pub use enums::*;
pub use group::*;
pub use meta::*;
pub use quantity::{Quantity, QuantityError};
pub use secret::Secret;
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
        ObjectKey {
            kind: self.kind(),
            namespace: self.meta().namespace.as_str().into(),
            name: self.meta().name.as_str().into(),
        }
    }

    /// The object a JSON document with Kubernetes' field names describes
    /// (its `kind` says which); fields the model does not know are ignored.
    ///
    /// A `null` member means the member is absent (Go's API server writes
    /// empty lists as `null`, e.g. a CSINode driver's `topologyKeys`).
    pub fn from_json(mut doc: serde_json::Value) -> Result<Object, String> {
        drop_nulls(&mut doc);
        fn load<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| e.to_string())
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
            None => return Err(format!("kind {kind:?} is not one the machines know")),
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

/// Identifies an object: kind, namespace ("" for cluster-scoped), name.
/// Ordered by those three, the strings bytewise (as a derived `Ord` would).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// `kind`.
    pub kind: Kind,
    /// `namespace`.
    pub namespace: std::sync::Arc<str>,
    /// `name`.
    pub name: std::sync::Arc<str>,
}

/// Bytewise order of two short strings, eight bytes at a time, inlined:
/// keys are compared many times per lookup in the B-trees every machine
/// keeps, and most of that time went to calling `memcmp` for names of a
/// dozen bytes.
#[inline]
fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut a8, mut b8) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut a8).zip(&mut b8) {
        let (x, y) = (
            u64::from_be_bytes(x.try_into().unwrap()),
            u64::from_be_bytes(y.try_into().unwrap()),
        );
        if x != y {
            return x.cmp(&y);
        }
    }
    // The shorter has fewer than eight bytes left: compare them, padded
    // with zeros, with as many of the other's; then the shorter is less.
    let done = a.len().min(b.len()) / 8 * 8;
    let word = |s: &[u8]| {
        let rest = &s[done..s.len().min(done + 8)];
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        u64::from_be_bytes(w)
    };
    word(a).cmp(&word(b)).then(a.len().cmp(&b.len()))
}

impl Ord for ObjectKey {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.kind
            .cmp(&other.kind)
            .then_with(|| cmp_bytes(self.namespace.as_bytes(), other.namespace.as_bytes()))
            .then_with(|| cmp_bytes(self.name.as_bytes(), other.name.as_bytes()))
    }
}

impl PartialOrd for ObjectKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl ObjectKey {
    /// The key of `kind` `namespace`/`name` (`namespace` empty when cluster-scoped).
    pub fn new(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind.as_str(), self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
        }
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
        reason: String,
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
        let err = |reason: String| ManifestError::Object {
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
            "" => return Err(err("it has no kind".into())),
            k if Kind::parse(k).is_none() => unknown.push(Unknown { kind, value: doc }),
            _ => objects.push(Object::from_json(doc).map_err(err)?),
        }
    }
    Ok((objects, unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inlined comparison orders strings exactly as bytewise `Ord`
    /// does: prefixes, bytes past the first eight, zero bytes, any length.
    #[test]
    fn keys_order_bytewise() {
        fn agrees(a: Vec<u8>, b: Vec<u8>) -> bool {
            cmp_bytes(&a, &b) == a.cmp(&b) && cmp_bytes(&b, &a) == b.cmp(&a)
        }
        quickcheck::QuickCheck::new()
            .tests(5000)
            .quickcheck(agrees as fn(Vec<u8>, Vec<u8>) -> bool);
        let cases: [&[u8]; 9] = [
            b"",
            b"a",
            b"a\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgg\xff",
            b"claim-000001",
            b"claim-0000010",
        ];
        for a in cases {
            for b in cases {
                assert!(agrees(a.to_vec(), b.to_vec()), "{a:?} {b:?}");
            }
        }
        let k = |ns: &str, n: &str| ObjectKey::new(Kind::PersistentVolumeClaim, ns, n);
        assert!(k("a", "z") < k("b", "a"), "namespace before name");
        assert!(
            ObjectKey::new(Kind::PersistentVolume, "z", "z") < k("", ""),
            "kind first"
        );
    }

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
        let labels = [("topology.volplane.io/zone".to_string(), "local".to_string())].into();
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
