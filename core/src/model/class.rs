//! `StorageClass` (storage.k8s.io/v1): how volumes of a class are made,
//! and where they may be (`allowedTopologies`); `VolumeAttributesClass`:
//! the parameters of a volume that may change while it lives.

use super::Labels;

use serde::{Deserialize, Serialize};

use super::{BindingMode, ObjectMeta, ReclaimPolicy};

/// A StorageClass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct StorageClass {
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
    /// `provisioner`.
    pub provisioner: String,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `parameters`.
    pub parameters: Labels,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `reclaimPolicy`.
    pub reclaim_policy: Option<ReclaimPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeBindingMode`.
    pub volume_binding_mode: Option<BindingMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `allowVolumeExpansion`.
    pub allow_volume_expansion: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `mountOptions`.
    pub mount_options: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `allowedTopologies`: where volumes of this class may be made, an OR
    /// of terms (empty: anywhere).
    pub allowed_topologies: Vec<TopologySelectorTerm>,
}

/// One term of `allowedTopologies`: an AND of its label requirements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct TopologySelectorTerm {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `matchLabelExpressions`.
    pub match_label_expressions: Vec<TopologySelectorLabelRequirement>,
}

/// A topology label and the values it may take (an OR).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct TopologySelectorLabelRequirement {
    #[serde(default)]
    /// `key`.
    pub key: String,
    #[serde(default)]
    /// `values`.
    pub values: Vec<String>,
}

/// The annotation that marks the default StorageClass.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

impl StorageClass {
    /// A class named `name` whose volumes `provisioner` makes.
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

    /// True when annotated as the cluster's default class.
    pub fn is_default(&self) -> bool {
        self.metadata.annotation(DEFAULT_CLASS_ANNOTATION) == Some("true")
    }
}

/// A VolumeAttributesClass (storage.k8s.io/v1, cluster-scoped): a driver's
/// mutable parameters. CreateVolume gets them as `mutable_parameters`, and
/// a claim that names another class has its volume modified
/// (ControllerModifyVolume).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttributesClass {
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
    /// `driverName`.
    pub driver_name: String,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `parameters`.
    pub parameters: Labels,
}

impl VolumeAttributesClass {
    /// A class named `name` of `driver`, with `parameters`.
    pub fn new(name: &str, driver: &str, parameters: &[(&str, &str)]) -> VolumeAttributesClass {
        VolumeAttributesClass {
            api_version: "storage.k8s.io/v1".into(),
            kind: "VolumeAttributesClass".into(),
            metadata: ObjectMeta::named(name),
            driver_name: driver.into(),
            parameters: parameters
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
}

/// A CSIStorageCapacity (storage.k8s.io/v1, namespaced): how much a
/// driver can still provision for one StorageClass in one topology
/// segment, for the scheduler to place pods whose volumes wait for them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct CsiStorageCapacity {
    #[serde(default)]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `nodeTopology`: the nodes the capacity is for (absent: none).
    pub node_topology: Option<super::LabelSelector>,
    #[serde(default)]
    /// `storageClassName`.
    pub storage_class_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `capacity`: what GetCapacity reported available.
    pub capacity: Option<super::Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `maximumVolumeSize`.
    pub maximum_volume_size: Option<super::Quantity>,
}
