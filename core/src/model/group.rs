//! The group snapshot API (`groupsnapshot.storage.k8s.io/v1`, the CRDs
//! kubernetes-csi/external-snapshotter installs): VolumeGroupSnapshot,
//! VolumeGroupSnapshotContent and VolumeGroupSnapshotClass, with their
//! field names.

use super::Labels;

use serde::{Deserialize, Serialize};

use super::{DeletionPolicy, LabelSelector, ObjectMeta, ObjectReference, VolumeSnapshotError};

/// The API version of the group snapshot kinds.
pub const GROUP_SNAPSHOT_API_VERSION: &str = "groupsnapshot.storage.k8s.io/v1";

/// Where a VolumeGroupSnapshot comes from: the claims a selector picks in
/// its namespace (dynamic), or an existing content (pre-provisioned).
/// Exactly one is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSnapshotSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `selector`.
    pub selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeGroupSnapshotContentName`.
    pub volume_group_snapshot_content_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeGroupSnapshotSpec`, with the API's field names.
pub struct VolumeGroupSnapshotSpec {
    #[serde(default)]
    /// `source`.
    pub source: VolumeGroupSnapshotSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeGroupSnapshotClassName`.
    pub volume_group_snapshot_class_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeGroupSnapshotStatus`, with the API's field names.
pub struct VolumeGroupSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `boundVolumeGroupSnapshotContentName`.
    pub bound_volume_group_snapshot_content_name: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `readyToUse`.
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `error`.
    pub error: Option<VolumeSnapshotError>,
}

/// A VolumeGroupSnapshot (namespaced): a user's request for one
/// crash-consistent snapshot of several claims.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSnapshot {
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
    pub spec: VolumeGroupSnapshotSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `status`.
    pub status: Option<VolumeGroupSnapshotStatus>,
}

impl VolumeGroupSnapshot {
    /// A dynamic group snapshot of the claims `selector` picks, with class `class`.
    pub fn of_claims(
        namespace: &str,
        name: &str,
        selector: LabelSelector,
        class: &str,
    ) -> VolumeGroupSnapshot {
        VolumeGroupSnapshot {
            api_version: GROUP_SNAPSHOT_API_VERSION.into(),
            kind: "VolumeGroupSnapshot".into(),
            metadata: ObjectMeta::namespaced(namespace, name),
            spec: VolumeGroupSnapshotSpec {
                source: VolumeGroupSnapshotSource {
                    selector: Some(selector),
                    volume_group_snapshot_content_name: None,
                },
                volume_group_snapshot_class_name: Some(class.into()),
            },
            status: None,
        }
    }

    /// `status.readyToUse`, false when unset.
    pub fn ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.ready_to_use)
            .unwrap_or(false)
    }

    /// `status.boundVolumeGroupSnapshotContentName`, when set and not empty.
    pub fn bound_content(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.bound_volume_group_snapshot_content_name.as_deref())
            .filter(|n| !n.is_empty())
    }
}

/// The pre-provisioned group snapshot a content stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct GroupSnapshotHandles {
    #[serde(default)]
    /// `volumeGroupSnapshotHandle`.
    pub volume_group_snapshot_handle: String,
    #[serde(default)]
    /// `volumeSnapshotHandles`.
    pub volume_snapshot_handles: Vec<String>,
}

/// The volumes to cut together (dynamic) or an existing group snapshot
/// (pre-provisioned). Exactly one is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSnapshotContentSource {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `volumeHandles`.
    pub volume_handles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `groupSnapshotHandles`.
    pub group_snapshot_handles: Option<GroupSnapshotHandles>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeGroupSnapshotContentSpec`, with the API's field names.
pub struct VolumeGroupSnapshotContentSpec {
    #[serde(default)]
    /// `volumeGroupSnapshotRef`.
    pub volume_group_snapshot_ref: ObjectReference,
    #[serde(default)]
    /// `deletionPolicy`.
    pub deletion_policy: DeletionPolicy,
    #[serde(default)]
    /// `driver`.
    pub driver: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeGroupSnapshotClassName`.
    pub volume_group_snapshot_class_name: Option<String>,
    #[serde(default)]
    /// `source`.
    pub source: VolumeGroupSnapshotContentSource,
}

/// One member of a cut group: its volume and its snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `volumeHandle`.
    pub volume_handle: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `snapshotHandle`.
    pub snapshot_handle: String,
    /// Nanoseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `readyToUse`.
    pub ready_to_use: Option<bool>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeGroupSnapshotContentStatus`, with the API's field names.
pub struct VolumeGroupSnapshotContentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeGroupSnapshotHandle`.
    pub volume_group_snapshot_handle: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `readyToUse`.
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `error`.
    pub error: Option<VolumeSnapshotError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `volumeSnapshotInfoList`.
    pub volume_snapshot_info_list: Vec<VolumeSnapshotInfo>,
}

/// A VolumeGroupSnapshotContent (cluster-scoped): a group snapshot on the
/// storage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSnapshotContent {
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
    pub spec: VolumeGroupSnapshotContentSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `status`.
    pub status: Option<VolumeGroupSnapshotContentStatus>,
}

impl VolumeGroupSnapshotContent {
    /// An empty content named `name`.
    pub fn new(name: &str) -> VolumeGroupSnapshotContent {
        VolumeGroupSnapshotContent {
            api_version: GROUP_SNAPSHOT_API_VERSION.into(),
            kind: "VolumeGroupSnapshotContent".into(),
            metadata: ObjectMeta::named(name),
            ..Default::default()
        }
    }

    /// `status.readyToUse`, false when unset.
    pub fn ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.ready_to_use)
            .unwrap_or(false)
    }

    /// The storage's id of the group snapshot: the one the sidecar
    /// recorded, else the pre-provisioned handle.
    pub fn group_handle(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.volume_group_snapshot_handle.as_deref())
            .or(self
                .spec
                .source
                .group_snapshot_handles
                .as_ref()
                .map(|h| h.volume_group_snapshot_handle.as_str()))
            .filter(|h| !h.is_empty())
    }
}

/// A VolumeGroupSnapshotClass (cluster-scoped): a driver and its parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSnapshotClass {
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
    /// `driver`.
    pub driver: String,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `parameters`.
    pub parameters: Labels,
    #[serde(default)]
    /// `deletionPolicy`.
    pub deletion_policy: DeletionPolicy,
}

impl VolumeGroupSnapshotClass {
    /// A class named `name` for `driver`.
    pub fn new(
        name: &str,
        driver: &str,
        deletion_policy: DeletionPolicy,
    ) -> VolumeGroupSnapshotClass {
        VolumeGroupSnapshotClass {
            api_version: GROUP_SNAPSHOT_API_VERSION.into(),
            kind: "VolumeGroupSnapshotClass".into(),
            metadata: ObjectMeta::named(name),
            driver: driver.into(),
            parameters: Labels::new(),
            deletion_policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_group_and_its_content_load_from_upstream_manifests() {
        let g: VolumeGroupSnapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "groupsnapshot.storage.k8s.io/v1",
            "kind": "VolumeGroupSnapshot",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {
                "volumeGroupSnapshotClassName": "group",
                "source": {"selector": {"matchLabels": {"app": "db"}}}
            }
        }))
        .unwrap();
        let sel = g.spec.source.selector.as_ref().unwrap();
        assert!(sel.matches(&Labels::from([("app".to_string(), "db".to_string())])));
        let c: VolumeGroupSnapshotContent = serde_json::from_value(serde_json::json!({
            "kind": "VolumeGroupSnapshotContent",
            "metadata": {"name": "groupsnapcontent-1"},
            "spec": {
                "deletionPolicy": "Retain",
                "driver": "hostpath.csi.k8s.io",
                "volumeGroupSnapshotRef": {"name": "db", "namespace": "default"},
                "source": {"groupSnapshotHandles": {
                    "volumeGroupSnapshotHandle": "g-1",
                    "volumeSnapshotHandles": ["s-1", "s-2"]
                }}
            },
            "status": {"volumeSnapshotInfoList": [
                {"volumeHandle": "v-1", "snapshotHandle": "s-1", "readyToUse": true, "restoreSize": 1024}
            ]}
        }))
        .unwrap();
        assert_eq!(c.spec.deletion_policy, DeletionPolicy::Retain);
        assert_eq!(c.group_handle(), Some("g-1"));
        let info = &c.status.as_ref().unwrap().volume_snapshot_info_list[0];
        assert_eq!(
            (info.snapshot_handle.as_str(), info.restore_size),
            ("s-1", Some(1024))
        );
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(
            back["spec"]["source"]["groupSnapshotHandles"]["volumeSnapshotHandles"][1],
            "s-2"
        );
    }
}
