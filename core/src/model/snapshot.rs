//! The snapshot API (`snapshot.storage.k8s.io/v1`, the CRDs
//! kubernetes-csi/external-snapshotter installs): VolumeSnapshot,
//! VolumeSnapshotContent and VolumeSnapshotClass, with their field names.

use super::Labels;

use serde::{Deserialize, Serialize};

use super::{ObjectMeta, ObjectReference, Quantity};

/// The API version of the snapshot kinds.
pub const SNAPSHOT_API_VERSION: &str = "snapshot.storage.k8s.io/v1";

/// What a VolumeSnapshotContent (and its storage snapshot) becomes when its
/// VolumeSnapshot goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum DeletionPolicy {
    #[default]
    /// `Delete`.
    Delete,
    /// `Retain`.
    Retain,
    #[serde(untagged)]
    /// `Other`.
    Other(String),
}

/// Where a VolumeSnapshot comes from: a claim to cut (dynamic), or an
/// existing content (pre-provisioned). Exactly one is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `persistentVolumeClaimName`.
    pub persistent_volume_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeSnapshotContentName`.
    pub volume_snapshot_content_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeSnapshotSpec`, with the API's field names.
pub struct VolumeSnapshotSpec {
    #[serde(default)]
    /// `source`.
    pub source: VolumeSnapshotSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeSnapshotClassName`.
    pub volume_snapshot_class_name: Option<String>,
}

/// A snapshot's last error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `time`.
    pub time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `message`.
    pub message: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeSnapshotStatus`, with the API's field names.
pub struct VolumeSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `boundVolumeSnapshotContentName`.
    pub bound_volume_snapshot_content_name: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `readyToUse`.
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `restoreSize`.
    pub restore_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `error`.
    pub error: Option<VolumeSnapshotError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeGroupSnapshotName`.
    pub volume_group_snapshot_name: Option<String>,
}

/// A VolumeSnapshot (namespaced): a user's request for a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshot {
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
    pub spec: VolumeSnapshotSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `status`.
    pub status: Option<VolumeSnapshotStatus>,
}

impl VolumeSnapshot {
    /// A dynamic snapshot of claim `claim` with class `class`.
    pub fn of_claim(namespace: &str, name: &str, claim: &str, class: &str) -> VolumeSnapshot {
        let mut metadata = ObjectMeta::named(name);
        metadata.namespace = namespace.into();
        VolumeSnapshot {
            api_version: SNAPSHOT_API_VERSION.into(),
            kind: "VolumeSnapshot".into(),
            metadata,
            spec: VolumeSnapshotSpec {
                source: VolumeSnapshotSource {
                    persistent_volume_claim_name: Some(claim.into()),
                    volume_snapshot_content_name: None,
                },
                volume_snapshot_class_name: Some(class.into()),
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

    /// `status.boundVolumeSnapshotContentName`, when set and not empty.
    pub fn bound_content(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.bound_volume_snapshot_content_name.as_deref())
            .filter(|n| !n.is_empty())
    }
}

/// The storage snapshot a content stands for: a volume to cut (dynamic) or
/// an existing snapshot (pre-provisioned). Exactly one is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeHandle`.
    pub volume_handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `snapshotHandle`.
    pub snapshot_handle: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeSnapshotContentSpec`, with the API's field names.
pub struct VolumeSnapshotContentSpec {
    #[serde(default)]
    /// `volumeSnapshotRef`.
    pub volume_snapshot_ref: ObjectReference,
    #[serde(default)]
    /// `deletionPolicy`.
    pub deletion_policy: DeletionPolicy,
    #[serde(default)]
    /// `driver`.
    pub driver: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeSnapshotClassName`.
    pub volume_snapshot_class_name: Option<String>,
    #[serde(default)]
    /// `source`.
    pub source: VolumeSnapshotContentSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `sourceVolumeMode`.
    pub source_volume_mode: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `VolumeSnapshotContentStatus`, with the API's field names.
pub struct VolumeSnapshotContentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `snapshotHandle`.
    pub snapshot_handle: Option<String>,
    /// Nanoseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<i64>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `readyToUse`.
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `error`.
    pub error: Option<VolumeSnapshotError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `volumeGroupSnapshotHandle`.
    pub volume_group_snapshot_handle: Option<String>,
}

/// A VolumeSnapshotContent (cluster-scoped): a snapshot on the storage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContent {
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
    pub spec: VolumeSnapshotContentSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `status`.
    pub status: Option<VolumeSnapshotContentStatus>,
}

impl VolumeSnapshotContent {
    /// An empty content named `name`.
    pub fn new(name: &str) -> VolumeSnapshotContent {
        VolumeSnapshotContent {
            api_version: SNAPSHOT_API_VERSION.into(),
            kind: "VolumeSnapshotContent".into(),
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

    /// The storage snapshot's id: the pre-provisioned handle, else the one
    /// the sidecar recorded.
    pub fn snapshot_handle(&self) -> Option<&str> {
        self.spec.source.snapshot_handle.as_deref().or(self
            .status
            .as_ref()
            .and_then(|s| s.snapshot_handle.as_deref()))
    }
}

/// A VolumeSnapshotClass (cluster-scoped): a driver and its parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
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

impl VolumeSnapshotClass {
    /// A class named `name` for `driver`, with `deletion_policy`.
    pub fn new(name: &str, driver: &str, deletion_policy: DeletionPolicy) -> VolumeSnapshotClass {
        VolumeSnapshotClass {
            api_version: SNAPSHOT_API_VERSION.into(),
            kind: "VolumeSnapshotClass".into(),
            metadata: ObjectMeta::named(name),
            driver: driver.into(),
            parameters: Labels::new(),
            deletion_policy,
        }
    }
}

/// RFC 3339 (UTC, seconds) of `nanos` since the Unix epoch, as a
/// VolumeSnapshot's `status.creationTime` shows a content's.
pub fn rfc3339(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_times_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_700_000_000 * 1_000_000_000),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(rfc3339(951_782_400 * 1_000_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1_000_000_000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn manifests_load_with_upstreams_field_names() {
        let vs: VolumeSnapshot = serde_json::from_value(serde_json::json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"source": {"persistentVolumeClaimName": "data"}, "volumeSnapshotClassName": "c"},
            "status": {"boundVolumeSnapshotContentName": "snapcontent-1", "readyToUse": true, "restoreSize": "1Gi"}
        }))
        .unwrap();
        assert!(vs.ready());
        assert_eq!(vs.bound_content(), Some("snapcontent-1"));
        let c: VolumeSnapshotContent = serde_json::from_value(serde_json::json!({
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": "snapcontent-1"},
            "spec": {"deletionPolicy": "Retain", "driver": "d", "source": {"snapshotHandle": "h"},
                     "volumeSnapshotRef": {"name": "s", "namespace": "ns"}},
        }))
        .unwrap();
        assert_eq!(c.spec.deletion_policy, DeletionPolicy::Retain);
        assert_eq!(c.snapshot_handle(), Some("h"));
        assert!(!c.ready());
    }
}
