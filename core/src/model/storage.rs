//! Storage objects: PersistentVolume, PersistentVolumeClaim, StorageClass,
//! VolumeAttachment, CSINode, CSIDriver — with Kubernetes' field names so
//! real manifests load into them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::enums::*;
use super::meta::*;
use super::quantity::Quantity;

/// Resource lists (`capacity`, `requests`): resource name → quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// The annotation that names a claim's or volume's class before
/// `storageClassName` existed (A1.9); it wins over the field.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn storage(list: &ResourceList) -> Option<Quantity> {
    list.get("storage").copied()
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiSource {
    pub driver: String,
    pub volume_handle: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_attributes: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_publish_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_stage_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_publish_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_expand_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_expand_secret_ref: Option<SecretReference>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    #[serde(default)]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeNodeAffinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<NodeSelector>,
}

impl VolumeNodeAffinity {
    /// True when a node with `labels` satisfies the required terms (OR of
    /// terms, AND of expressions inside a term).
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        let Some(req) = &self.required else {
            return true;
        };
        req.node_selector_terms.iter().any(|t| {
            t.match_expressions.iter().all(|e| {
                let v = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => v.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => v.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    _ => false,
                }
            })
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PvSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<AccessMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_reclaim_policy: Option<ReclaimPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<VolumeMode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<VolumeNodeAffinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi: Option<CsiSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PvStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PvPhase>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A PersistentVolume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolume {
    #[serde(default = "v1")]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PvSpec,
    #[serde(default)]
    pub status: PvStatus,
}

fn v1() -> String {
    "v1".into()
}

impl PersistentVolume {
    pub fn new(name: &str) -> PersistentVolume {
        PersistentVolume {
            api_version: "v1".into(),
            kind: "PersistentVolume".into(),
            metadata: ObjectMeta::named(name),
            ..Default::default()
        }
    }

    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    pub fn capacity(&self) -> Option<Quantity> {
        storage(&self.spec.capacity)
    }

    /// The class (A1.9): the beta annotation, else `storageClassName`, else "".
    pub fn class(&self) -> &str {
        self.metadata
            .annotation(BETA_STORAGE_CLASS)
            .or(self.spec.storage_class_name.as_deref())
            .unwrap_or("")
    }

    /// `volumeAttributesClassName`, "" when unset.
    pub fn attributes_class(&self) -> &str {
        self.spec
            .volume_attributes_class_name
            .as_deref()
            .unwrap_or("")
    }

    /// `Filesystem` when unset (A1.10).
    pub fn volume_mode(&self) -> VolumeMode {
        self.spec
            .volume_mode
            .clone()
            .unwrap_or(VolumeMode::Filesystem)
    }

    /// `Retain` when unset (A1.10).
    pub fn reclaim_policy(&self) -> ReclaimPolicy {
        self.spec
            .persistent_volume_reclaim_policy
            .clone()
            .unwrap_or(ReclaimPolicy::Retain)
    }

    pub fn phase(&self) -> PvPhase {
        self.status.phase.clone().unwrap_or(PvPhase::Pending)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: ResourceList,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct TypedLocalObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

/// A claim's `dataSourceRef`: like `dataSource`, and may name another
/// namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct TypedObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PvcSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<AccessMode>,
    #[serde(default)]
    pub resources: ResourceRequirements,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<VolumeMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<TypedLocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source_ref: Option<TypedObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class_name: Option<String>,
}

/// A claim condition (`Resizing`, `FileSystemResizePending`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PvcCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PvcStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PvcPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<AccessMode>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PvcCondition>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_resources: ResourceList,
    /// The VolumeAttributesClass the bound volume has now (set by the PV
    /// controller when the claim binds, by the resizer after a modify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_volume_attributes_class_name: Option<String>,
}

/// A PersistentVolumeClaim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaim {
    #[serde(default = "v1")]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PvcSpec,
    #[serde(default)]
    pub status: PvcStatus,
}

impl PersistentVolumeClaim {
    pub fn new(namespace: &str, name: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            api_version: "v1".into(),
            kind: "PersistentVolumeClaim".into(),
            metadata: ObjectMeta::namespaced(namespace, name),
            ..Default::default()
        }
    }

    /// The requested storage.
    pub fn request(&self) -> Option<Quantity> {
        storage(&self.spec.resources.requests)
    }

    /// The capacity in status (what the claim was last bound or resized to).
    pub fn status_capacity(&self) -> Option<Quantity> {
        storage(&self.status.capacity)
    }

    /// The class (A1.9): the beta annotation, else `storageClassName`, else "".
    pub fn class(&self) -> &str {
        self.metadata
            .annotation(BETA_STORAGE_CLASS)
            .or(self.spec.storage_class_name.as_deref())
            .unwrap_or("")
    }

    /// True when neither the field nor the beta annotation names a class.
    pub fn has_no_class(&self) -> bool {
        self.spec.storage_class_name.is_none() && !self.metadata.has_annotation(BETA_STORAGE_CLASS)
    }

    /// `volumeAttributesClassName`, "" when unset.
    pub fn attributes_class(&self) -> &str {
        self.spec
            .volume_attributes_class_name
            .as_deref()
            .unwrap_or("")
    }

    pub fn volume_mode(&self) -> VolumeMode {
        self.spec
            .volume_mode
            .clone()
            .unwrap_or(VolumeMode::Filesystem)
    }

    pub fn volume_name(&self) -> &str {
        self.spec.volume_name.as_deref().unwrap_or("")
    }

    pub fn phase(&self) -> PvcPhase {
        self.status.phase.clone().unwrap_or(PvcPhase::Pending)
    }

    /// What the claim is filled from, as external-provisioner reads it:
    /// `dataSource`, else a `dataSourceRef` in the claim's own namespace.
    pub fn data_source(&self) -> Option<TypedLocalObjectReference> {
        if let Some(ds) = &self.spec.data_source {
            return Some(ds.clone());
        }
        let r = self.spec.data_source_ref.as_ref()?;
        if r.namespace
            .as_deref()
            .is_some_and(|ns| !ns.is_empty() && ns != self.metadata.namespace)
        {
            return None;
        }
        Some(TypedLocalObjectReference {
            api_group: r.api_group.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
        })
    }

    /// A `dataSourceRef` naming another namespace (the
    /// CrossNamespaceVolumeDataSource feature, which volplane does not
    /// serve), when no `dataSource` is set.
    pub fn cross_namespace_source(&self) -> Option<&str> {
        if self.spec.data_source.is_some() {
            return None;
        }
        self.spec
            .data_source_ref
            .as_ref()?
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty() && *ns != self.metadata.namespace)
    }

    pub fn condition(&self, type_: &str) -> Option<&PvcCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// A StorageClass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct StorageClass {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub provisioner: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_policy: Option<ReclaimPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_binding_mode: Option<BindingMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_volume_expansion: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
}

/// The annotation that marks the default StorageClass.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

impl StorageClass {
    pub fn new(name: &str, provisioner: &str) -> StorageClass {
        StorageClass {
            api_version: "storage.k8s.io/v1".into(),
            kind: "StorageClass".into(),
            metadata: ObjectMeta::named(name),
            provisioner: provisioner.into(),
            ..Default::default()
        }
    }

    /// `Delete` when unset (A1.10).
    pub fn reclaim_policy(&self) -> ReclaimPolicy {
        self.reclaim_policy.clone().unwrap_or(ReclaimPolicy::Delete)
    }

    /// `Immediate` when unset (A1.10).
    pub fn binding_mode(&self) -> BindingMode {
        self.volume_binding_mode
            .clone()
            .unwrap_or(BindingMode::Immediate)
    }

    pub fn is_default(&self) -> bool {
        self.metadata.annotation(DEFAULT_CLASS_ANNOTATION) == Some("true")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachmentSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachmentSpec {
    pub attacher: String,
    pub node_name: String,
    #[serde(default)]
    pub source: VolumeAttachmentSource,
}

/// `attachError` / `detachError`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeError {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachmentStatus {
    #[serde(default)]
    pub attached: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attachment_metadata: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_error: Option<VolumeError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detach_error: Option<VolumeError>,
}

/// A VolumeAttachment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachment {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VolumeAttachmentSpec,
    #[serde(default)]
    pub status: VolumeAttachmentStatus,
}

impl VolumeAttachment {
    pub fn new(name: &str, attacher: &str, node: &str, pv: &str) -> VolumeAttachment {
        VolumeAttachment {
            api_version: "storage.k8s.io/v1".into(),
            kind: "VolumeAttachment".into(),
            metadata: ObjectMeta::named(name),
            spec: VolumeAttachmentSpec {
                attacher: attacher.into(),
                node_name: node.into(),
                source: VolumeAttachmentSource {
                    persistent_volume_name: Some(pv.into()),
                },
            },
            status: Default::default(),
        }
    }

    pub fn pv_name(&self) -> &str {
        self.spec
            .source
            .persistent_volume_name
            .as_deref()
            .unwrap_or("")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeNodeResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiNodeDriver {
    pub name: String,
    #[serde(rename = "nodeID")]
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<VolumeNodeResources>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiNodeSpec {
    #[serde(default)]
    pub drivers: Vec<CsiNodeDriver>,
}

/// A CSINode: the drivers registered on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiNode {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CsiNodeSpec,
}

impl CsiNode {
    pub fn new(node: &str) -> CsiNode {
        CsiNode {
            api_version: "storage.k8s.io/v1".into(),
            kind: "CSINode".into(),
            metadata: ObjectMeta::named(node),
            spec: Default::default(),
        }
    }

    pub fn driver(&self, name: &str) -> Option<&CsiNodeDriver> {
        self.spec.drivers.iter().find(|d| d.name == name)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiDriverSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_info_on_mount: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group_policy: Option<FsGroupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_republish: Option<bool>,
}

/// A CSIDriver: how Kubernetes should treat a driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiDriver {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CsiDriverSpec,
}

impl CsiDriver {
    /// `attachRequired` defaults to true (C1.8: a missing CSIDriver means attach).
    pub fn attach_required(&self) -> bool {
        self.spec.attach_required.unwrap_or(true)
    }

    pub fn pod_info_on_mount(&self) -> bool {
        self.spec.pod_info_on_mount.unwrap_or(false)
    }

    pub fn fs_group_policy(&self) -> FsGroupPolicy {
        self.spec
            .fs_group_policy
            .clone()
            .unwrap_or(FsGroupPolicy::ReadWriteOnceWithFsType)
    }
}
