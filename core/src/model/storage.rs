//! Storage objects: PersistentVolume, PersistentVolumeClaim, StorageClass,
//! VolumeAttachment, CSINode, CSIDriver — with Kubernetes' field names so
//! real manifests load into them.

use super::Labels;
use super::map::Map;

use serde::{Deserialize, Serialize};

use super::enums::*;
use super::meta::*;
use super::quantity::Quantity;

/// Resource lists (`capacity`, `requests`): resource name → quantity.
pub type ResourceList = Map<String, Quantity>;

/// The annotation that names a claim's or volume's class before
/// `storageClassName` existed (A1.9); it wins over the field.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn storage(list: &ResourceList) -> Option<Quantity> {
    list.get("storage").copied()
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `SecretReference`, with the API's field names.
pub struct SecretReference {
    #[serde(default)]
    /// `name`.
    pub name: String,
    #[serde(default)]
    /// `namespace`.
    pub namespace: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `CsiSource`, with the API's field names.
pub struct CsiSource {
    /// `driver`.
    pub driver: String,
    /// `volumeHandle`.
    pub volume_handle: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    /// `readOnly`.
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `fsType`.
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `volumeAttributes`.
    pub volume_attributes: Labels,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `controllerPublishSecretRef`.
    pub controller_publish_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `nodeStageSecretRef`.
    pub node_stage_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `nodePublishSecretRef`.
    pub node_publish_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `controllerExpandSecretRef`.
    pub controller_expand_secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `nodeExpandSecretRef`.
    pub node_expand_secret_ref: Option<SecretReference>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `NodeSelectorRequirement`, with the API's field names.
pub struct NodeSelectorRequirement {
    /// `key`.
    pub key: String,
    /// `operator`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `values`.
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `NodeSelectorTerm`, with the API's field names.
pub struct NodeSelectorTerm {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `matchExpressions`.
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `NodeSelector`, with the API's field names.
pub struct NodeSelector {
    #[serde(default)]
    /// `nodeSelectorTerms`.
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeNodeAffinity`, with the API's field names.
pub struct VolumeNodeAffinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `required`.
    pub required: Option<NodeSelector>,
}

impl VolumeNodeAffinity {
    /// True when a node with `labels` satisfies the required terms (OR of
    /// terms, AND of expressions inside a term).
    pub fn admits(&self, labels: &impl super::attributes::LabelLookup) -> bool {
        let Some(req) = &self.required else {
            return true;
        };
        req.node_selector_terms.iter().any(|t| {
            t.match_expressions.iter().all(|e| {
                let v = labels.label(&e.key);
                match e.operator.as_str() {
                    "In" => v.is_some_and(|v| e.values.iter().any(|x| x == v)),
                    "NotIn" => v.is_none_or(|v| !e.values.iter().any(|x| x == v)),
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
/// Kubernetes' `PvSpec`, with the API's field names.
pub struct PvSpec {
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    /// `capacity`.
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `accessModes`.
    pub access_modes: Vec<AccessMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `claimRef`.
    pub claim_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `persistentVolumeReclaimPolicy`.
    pub persistent_volume_reclaim_policy: Option<ReclaimPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `storageClassName`.
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeMode`.
    pub volume_mode: Option<VolumeMode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `mountOptions`.
    pub mount_options: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `nodeAffinity`.
    pub node_affinity: Option<VolumeNodeAffinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `csi`.
    pub csi: Option<CsiSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeAttributesClassName`.
    pub volume_attributes_class_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PvStatus`, with the API's field names.
pub struct PvStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `phase`.
    pub phase: Option<PvPhase>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `message`.
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `reason`.
    pub reason: String,
}

/// A PersistentVolume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolume {
    #[serde(default = "v1")]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: PvSpec,
    #[serde(default)]
    /// `status`.
    pub status: PvStatus,
}

fn v1() -> String {
    "v1".into()
}

impl PersistentVolume {
    /// An empty volume named `name`.
    pub fn new(name: &str) -> PersistentVolume {
        PersistentVolume {
            api_version: "v1".into(),
            kind: "PersistentVolume".into(),
            metadata: ObjectMeta::named(name),
            ..Default::default()
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// `spec.capacity.storage`, if given.
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

    /// `status.phase`; Pending when unset.
    pub fn phase(&self) -> PvPhase {
        self.status.phase.clone().unwrap_or(PvPhase::Pending)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `ResourceRequirements`, with the API's field names.
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    /// `requests`.
    pub requests: ResourceList,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    /// `limits`.
    pub limits: ResourceList,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `TypedLocalObjectReference`, with the API's field names.
pub struct TypedLocalObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `apiGroup`.
    pub api_group: Option<String>,
    /// `kind`.
    pub kind: String,
    /// `name`.
    pub name: String,
}

/// A claim's `dataSourceRef`: like `dataSource`, and may name another
/// namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct TypedObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `apiGroup`.
    pub api_group: Option<String>,
    /// `kind`.
    pub kind: String,
    /// `name`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `namespace`.
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PvcSpec`, with the API's field names.
pub struct PvcSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `accessModes`.
    pub access_modes: Vec<AccessMode>,
    #[serde(default)]
    /// `resources`.
    pub resources: ResourceRequirements,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeName`.
    pub volume_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `storageClassName`.
    pub storage_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeMode`.
    pub volume_mode: Option<VolumeMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `selector`.
    pub selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `dataSource`.
    pub data_source: Option<TypedLocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `dataSourceRef`.
    pub data_source_ref: Option<TypedObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeAttributesClassName`.
    pub volume_attributes_class_name: Option<String>,
}

/// A claim condition (`Resizing`, `FileSystemResizePending`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PvcCondition {
    #[serde(rename = "type")]
    /// `type`.
    pub type_: String,
    /// `status`.
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `reason`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `message`.
    pub message: String,
}

impl PvcCondition {
    /// A condition of `type_` that holds (`status: "True"`), saying `message`.
    pub fn holds(type_: &str, message: impl Into<String>) -> PvcCondition {
        PvcCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: String::new(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PvcStatus`, with the API's field names.
pub struct PvcStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `phase`.
    pub phase: Option<PvcPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `accessModes`.
    pub access_modes: Vec<AccessMode>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    /// `capacity`.
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `conditions`.
    pub conditions: Vec<PvcCondition>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    /// `allocatedResources`: what the resizer last set out to expand to
    /// (RecoverVolumeExpansionFailure).
    pub allocated_resources: ResourceList,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `allocatedResourceStatuses`: where an expansion stands, by resource
    /// (`ControllerResizeInProgress`, `NodeResizePending`, …).
    pub allocated_resource_statuses: Labels,
    /// The VolumeAttributesClass the bound volume has now (set by the PV
    /// controller when the claim binds, by the resizer after a modify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_volume_attributes_class_name: Option<String>,
    /// Where a change of VolumeAttributesClass stands (the resizer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modify_volume_status: Option<ModifyVolumeStatus>,
}

/// `status.modifyVolumeStatus` of a claim: the class its volume is being
/// modified to, and how that goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ModifyVolumeStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `targetVolumeAttributesClassName`.
    pub target_volume_attributes_class_name: String,
    /// `status`: `Pending`, `InProgress` or `Infeasible`.
    pub status: String,
}

/// A PersistentVolumeClaim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaim {
    #[serde(default = "v1")]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: PvcSpec,
    #[serde(default)]
    /// `status`.
    pub status: PvcStatus,
}

impl PersistentVolumeClaim {
    /// An empty claim `namespace`/`name`.
    pub fn new(namespace: &str, name: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            api_version: "v1".into(),
            kind: "PersistentVolumeClaim".into(),
            metadata: ObjectMeta::namespaced(namespace, name),
            ..Default::default()
        }
    }

    /// The VolumeAttributesClass the claim names, if it names one (an
    /// empty name names none).
    pub fn volume_attributes_class(&self) -> Option<&str> {
        self.spec
            .volume_attributes_class_name
            .as_deref()
            .filter(|n| !n.is_empty())
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

    /// `spec.volumeMode`; Filesystem when unset, as Kubernetes defaults it.
    pub fn volume_mode(&self) -> VolumeMode {
        self.spec
            .volume_mode
            .clone()
            .unwrap_or(VolumeMode::Filesystem)
    }

    /// `spec.volumeName`: the volume it is bound to, or "".
    pub fn volume_name(&self) -> &str {
        self.spec.volume_name.as_deref().unwrap_or("")
    }

    /// `status.phase`; Pending when unset.
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

    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&PvcCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `status.allocatedResourceStatuses["storage"]`: where the claim's
    /// expansion stands, if one is recorded.
    pub fn resize_status(&self) -> Option<&str> {
        self.status.allocated_resource_statuses.get("storage")
    }

    /// `status.allocatedResources["storage"]`: the size the last expansion
    /// set out to reach.
    pub fn allocated(&self) -> Option<Quantity> {
        storage(&self.status.allocated_resources)
    }

    /// Writes `status.allocatedResourceStatuses["storage"]` (`None`
    /// removes it, and the map with it when it empties).
    pub fn set_resize_status(&mut self, status: Option<&str>) {
        let statuses = &mut self.status.allocated_resource_statuses;
        match status {
            Some(s) => statuses.insert("storage".into(), s.into()),
            None => statuses.remove("storage"),
        };
    }

    /// An expansion that failed for good, marked as upstream marks it: a
    /// condition of `type_` saying `failed to expand pvc with <error>`
    /// beside the other expansion conditions, and `status` (an
    /// `…Infeasible` one) when given.
    pub fn mark_expansion_failed(&mut self, type_: &str, error: &str, status: Option<&str>) {
        let why = format!("failed to expand pvc with {error}");
        self.merge_resize_conditions(vec![PvcCondition::holds(type_, why)], true);
        if status.is_some() {
            self.set_resize_status(status);
        }
    }

    /// Sets the expansion conditions as upstream's MergeResizeConditionsOfPVC:
    /// conditions of other kinds stay; an expansion condition of a type in
    /// `new` is replaced in place; the other expansion conditions stay only
    /// with `keep_old`; the rest of `new` is appended.
    pub fn merge_resize_conditions(&mut self, new: Vec<PvcCondition>, keep_old: bool) {
        use super::names::expansion::CONDITIONS;
        let mut new = new;
        let mut merged = Vec::with_capacity(self.status.conditions.len() + new.len());
        for old in std::mem::take(&mut self.status.conditions) {
            if !CONDITIONS.contains(&old.type_.as_str()) {
                merged.push(old);
            } else if let Some(i) = new.iter().position(|c| c.type_ == old.type_) {
                merged.push(new.remove(i));
            } else if keep_old {
                merged.push(old);
            }
        }
        merged.extend(new);
        self.status.conditions = merged;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeAttachmentSource`, with the API's field names.
pub struct VolumeAttachmentSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `persistentVolumeName`.
    pub persistent_volume_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeAttachmentSpec`, with the API's field names.
pub struct VolumeAttachmentSpec {
    /// `attacher`.
    pub attacher: String,
    /// `nodeName`.
    pub node_name: String,
    #[serde(default)]
    /// `source`.
    pub source: VolumeAttachmentSource,
}

/// `attachError` / `detachError`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeError {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `time`.
    pub time: String,
    #[serde(default)]
    /// `message`.
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeAttachmentStatus`, with the API's field names.
pub struct VolumeAttachmentStatus {
    #[serde(default)]
    /// `attached`.
    pub attached: bool,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `attachmentMetadata`.
    pub attachment_metadata: Labels,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `attachError`.
    pub attach_error: Option<VolumeError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `detachError`.
    pub detach_error: Option<VolumeError>,
}

/// A VolumeAttachment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachment {
    #[serde(default)]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: VolumeAttachmentSpec,
    #[serde(default)]
    /// `status`.
    pub status: VolumeAttachmentStatus,
}

impl VolumeAttachment {
    /// An attachment named `name` of volume `pv` to `node` by `attacher`.
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

    /// The PersistentVolume it attaches, or "" for an inline volume.
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
/// Kubernetes' `VolumeNodeResources`, with the API's field names.
pub struct VolumeNodeResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `count`.
    pub count: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `CsiNodeDriver`, with the API's field names.
pub struct CsiNodeDriver {
    /// `name`.
    pub name: String,
    #[serde(rename = "nodeID")]
    /// `nodeId`.
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `topologyKeys`.
    pub topology_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `allocatable`.
    pub allocatable: Option<VolumeNodeResources>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `CsiNodeSpec`, with the API's field names.
pub struct CsiNodeSpec {
    #[serde(default)]
    /// `drivers`.
    pub drivers: Vec<CsiNodeDriver>,
}

/// A CSINode: the drivers registered on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiNode {
    #[serde(default)]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: CsiNodeSpec,
}

impl CsiNode {
    /// The CSINode of `node`, without drivers.
    pub fn new(node: &str) -> CsiNode {
        CsiNode {
            api_version: "storage.k8s.io/v1".into(),
            kind: "CSINode".into(),
            metadata: ObjectMeta::named(node),
            spec: Default::default(),
        }
    }

    /// The registration of driver `name`, if present.
    pub fn driver(&self, name: &str) -> Option<&CsiNodeDriver> {
        self.spec.drivers.iter().find(|d| d.name == name)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `CsiDriverSpec`, with the API's field names.
pub struct CsiDriverSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `attachRequired`.
    pub attach_required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `podInfoOnMount`.
    pub pod_info_on_mount: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `fsGroupPolicy`.
    pub fs_group_policy: Option<FsGroupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `requiresRepublish`.
    pub requires_republish: Option<bool>,
}

/// A CSIDriver: how Kubernetes should treat a driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiDriver {
    #[serde(default)]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: CsiDriverSpec,
}

impl CsiDriver {
    /// `attachRequired` defaults to true (C1.8: a missing CSIDriver means attach).
    pub fn attach_required(&self) -> bool {
        self.spec.attach_required.unwrap_or(true)
    }

    /// `spec.podInfoOnMount`; false when unset.
    pub fn pod_info_on_mount(&self) -> bool {
        self.spec.pod_info_on_mount.unwrap_or(false)
    }

    /// `spec.fsGroupPolicy`; ReadWriteOnceWithFSType when unset, as Kubernetes defaults it.
    pub fn fs_group_policy(&self) -> FsGroupPolicy {
        self.spec
            .fs_group_policy
            .clone()
            .unwrap_or(FsGroupPolicy::ReadWriteOnceWithFsType)
    }
}
