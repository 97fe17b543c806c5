//! Node and Pod, with the fields the volume lifecycle reads.

use serde::{Deserialize, Serialize};

use super::enums::PodPhase;
use super::meta::ObjectMeta;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `Taint`, with the API's field names.
pub struct Taint {
    /// `key`.
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `value`.
    pub value: String,
    #[serde(default)]
    /// `effect`.
    pub effect: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `NodeSpec`, with the API's field names.
pub struct NodeSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `taints`.
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    /// `unschedulable`.
    pub unschedulable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `NodeCondition`, with the API's field names.
pub struct NodeCondition {
    #[serde(rename = "type")]
    /// `type`.
    pub type_: String,
    /// `status`.
    pub status: String,
}

/// An entry of `node.status.volumesAttached`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct AttachedVolume {
    /// `name`.
    pub name: String,
    #[serde(default)]
    /// `devicePath`.
    pub device_path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `NodeStatus`, with the API's field names.
pub struct NodeStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `conditions`.
    pub conditions: Vec<NodeCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `volumesAttached`.
    pub volumes_attached: Vec<AttachedVolume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `volumesInUse`.
    pub volumes_in_use: Vec<String>,
}

/// A Node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Node {
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
    pub spec: NodeSpec,
    #[serde(default)]
    /// `status`.
    pub status: NodeStatus,
}

/// The taint that marks a node out of service (C3.6).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

impl Node {
    /// A node named `name`.
    pub fn new(name: &str) -> Node {
        Node {
            api_version: "v1".into(),
            kind: "Node".into(),
            metadata: ObjectMeta::named(name),
            spec: Default::default(),
            status: NodeStatus {
                conditions: vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                }],
                ..Default::default()
            },
        }
    }

    /// True when its Ready condition is True.
    pub fn ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }

    /// True when it carries the out-of-service taint.
    pub fn out_of_service(&self) -> bool {
        self.spec
            .taints
            .iter()
            .any(|t| t.key == OUT_OF_SERVICE_TAINT)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PvcSource`, with the API's field names.
pub struct PvcSource {
    /// `claimName`.
    pub claim_name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    /// `readOnly`.
    pub read_only: bool,
}

/// A pod volume; only claims matter to the lifecycle, other sources are kept out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct PodVolume {
    /// `name`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `persistentVolumeClaim`.
    pub persistent_volume_claim: Option<PvcSource>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PodSpec`, with the API's field names.
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `nodeName`.
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `volumes`.
    pub volumes: Vec<PodVolume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `serviceAccountName`.
    pub service_account_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PodStatus`, with the API's field names.
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `phase`.
    pub phase: Option<PodPhase>,
}

/// A Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
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
    pub spec: PodSpec,
    #[serde(default)]
    /// `status`.
    pub status: PodStatus,
}

impl Pod {
    /// An empty pod `namespace`/`name`.
    pub fn new(namespace: &str, name: &str) -> Pod {
        Pod {
            api_version: "v1".into(),
            kind: "Pod".into(),
            metadata: ObjectMeta::namespaced(namespace, name),
            ..Default::default()
        }
    }

    /// A pod with one volume, `data`, from claim `claim` of its namespace.
    pub fn using_claim(namespace: &str, name: &str, claim: &str) -> Pod {
        let mut pod = Pod::new(namespace, name);
        pod.spec.volumes.push(PodVolume {
            name: "data".into(),
            persistent_volume_claim: Some(PvcSource {
                claim_name: claim.into(),
                read_only: false,
            }),
        });
        pod
    }

    /// The node it is scheduled to, if any.
    pub fn node(&self) -> Option<&str> {
        self.spec.node_name.as_deref().filter(|n| !n.is_empty())
    }

    /// Claim names this pod uses.
    pub fn claims(&self) -> impl Iterator<Item = &str> {
        self.spec.volumes.iter().filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str())
        })
    }

    /// True when this pod, not terminated, uses claim `namespace/name`
    /// (upstream's podUsesPVC, as pvc-protection and Recycle count users).
    pub fn uses_claim(&self, namespace: &str, name: &str) -> bool {
        self.metadata.namespace == namespace
            && !self.terminated()
            && self.claims().any(|c| c == name)
    }

    /// True once it Succeeded or Failed.
    pub fn terminated(&self) -> bool {
        self.status.phase.as_ref().is_some_and(PodPhase::terminated)
    }
}
