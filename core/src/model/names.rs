//! Names users and tools grep for: annotations, finalizers, event reasons,
//! paths. Spelled exactly as Kubernetes and the CSI sidecars spell them
//! (SEMANTICS.md A.1, B, C, D, E.5).

use sha2::{Digest, Sha256};

pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
pub const ANN_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
pub const ANN_DELETION_SECRET_NAME: &str = "volume.kubernetes.io/provisioner-deletion-secret-name";
pub const ANN_DELETION_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/provisioner-deletion-secret-namespace";
pub const ANN_NODE_ID: &str = "csi.volume.kubernetes.io/nodeid";
pub const ANN_VA_NODE_ID: &str = "csi.alpha.kubernetes.io/node-id";
pub const ANN_CONTROLLER_MANAGED_ATTACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

pub const FINALIZER_EXTERNAL_PROVISIONER: &str =
    "external-provisioner.volume.kubernetes.io/finalizer";
pub const FINALIZER_PV_CONTROLLER: &str = "kubernetes.io/pv-controller";
pub const FINALIZER_PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const FINALIZER_PV_PROTECTION: &str = "kubernetes.io/pv-protection";
/// external-provisioner's hold on a clone's source claim while it is
/// copied (B5.6).
pub const FINALIZER_CLONING_PROTECTION: &str =
    "provisioner.storage.kubernetes.io/cloning-protection";
/// external-provisioner's hold on a snapshot while a claim is restored
/// from it (B5.6).
pub const FINALIZER_PROVISIONER_SNAPSHOT_SOURCE: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";

/// external-snapshotter's finalizers and annotations (pkg/utils/util.go).
pub const FINALIZER_CONTENT_BOUND: &str =
    "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection";
pub const FINALIZER_SNAPSHOT_BOUND: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection";
pub const FINALIZER_SNAPSHOT_AS_SOURCE: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection";
pub const FINALIZER_PVC_AS_SNAPSHOT_SOURCE: &str =
    "snapshot.storage.kubernetes.io/pvc-as-source-protection";
pub const ANN_SNAPSHOT_BEING_DELETED: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";
pub const ANN_SNAPSHOT_BEING_CREATED: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-being-created";
pub const ANN_DEFAULT_SNAPSHOT_CLASS: &str = "snapshot.storage.kubernetes.io/is-default-class";

/// The name of a VolumeSnapshot's dynamic content: `snapcontent-<uid>`.
pub fn snapshot_content_name(snapshot_uid: &str) -> String {
    format!("snapcontent-{snapshot_uid}")
}

/// The CSI snapshot name csi-snapshotter asks for: `snapshot-<uid>`.
pub fn csi_snapshot_name(snapshot_uid: &str) -> String {
    format!("snapshot-{snapshot_uid}")
}

/// external-snapshotter's group snapshot finalizers and annotations
/// (pkg/utils/util.go).
pub const FINALIZER_GROUP_CONTENT_BOUND: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshotcontent-bound-protection";
pub const FINALIZER_GROUP_SNAPSHOT_BOUND: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection";
pub const FINALIZER_SNAPSHOT_IN_GROUP: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection";
pub const ANN_GROUP_BEING_CREATED: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created";
pub const ANN_GROUP_BEING_DELETED: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted";
pub const ANN_DEFAULT_GROUP_SNAPSHOT_CLASS: &str =
    "groupsnapshot.storage.kubernetes.io/is-default-class";
/// On a member's VolumeSnapshotContent: the group snapshot it was cut in.
pub const ANN_GROUP_SNAPSHOT_HANDLE: &str =
    "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle";

/// The name of a VolumeGroupSnapshot's dynamic content:
/// `groupsnapcontent-<uid>`.
pub fn group_content_name(group_uid: &str) -> String {
    format!("groupsnapcontent-{group_uid}")
}

/// The CSI group snapshot name csi-snapshotter asks for:
/// `groupsnapshot-<uid>`.
pub fn csi_group_snapshot_name(group_uid: &str) -> String {
    format!("groupsnapshot-{group_uid}")
}

/// The VolumeSnapshot and VolumeSnapshotContent the snapshot controller
/// makes for the member of group `group_uid` cut from `volume_handle`:
/// `snapshot-<h>` and `snapcontent-<h>`, h = sha256(uid ‖ handle).
pub fn group_member_names(group_uid: &str, volume_handle: &str) -> (String, String) {
    let h = sha256_hex(format!("{group_uid}{volume_handle}").as_bytes());
    (format!("snapshot-{h}"), format!("snapcontent-{h}"))
}

/// The volume attribute external-provisioner adds to every PV it makes.
pub const ATTR_PROVISIONER_IDENTITY: &str = "storage.kubernetes.io/csiProvisionerIdentity";

/// Event reasons.
pub mod reason {
    pub const FAILED_BINDING: &str = "FailedBinding";
    pub const VOLUME_MISMATCH: &str = "VolumeMismatch";
    pub const CLAIM_LOST: &str = "ClaimLost";
    pub const CLAIM_MISBOUND: &str = "ClaimMisbound";
    pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
    pub const WAIT_FOR_POD_SCHEDULED: &str = "WaitForPodScheduled";
    pub const EXTERNAL_PROVISIONING: &str = "ExternalProvisioning";
    pub const PROVISIONING: &str = "Provisioning";
    pub const PROVISIONING_SUCCEEDED: &str = "ProvisioningSucceeded";
    pub const PROVISIONING_FAILED: &str = "ProvisioningFailed";
    pub const VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";
    pub const VOLUME_DELETE: &str = "VolumeDelete";
    pub const VOLUME_RECYCLED: &str = "VolumeRecycled";
    pub const VOLUME_FAILED_RECYCLE: &str = "VolumeFailedRecycle";
    pub const VOLUME_UNKNOWN_RECLAIM_POLICY: &str = "VolumeUnknownReclaimPolicy";
    pub const FAILED_ATTACH_VOLUME: &str = "FailedAttachVolume";
    pub const SUCCESSFUL_ATTACH_VOLUME: &str = "SuccessfulAttachVolume";
    pub const FAILED_MOUNT: &str = "FailedMount";
    pub const RESIZING: &str = "Resizing";
    pub const VOLUME_RESIZE_FAILED: &str = "VolumeResizeFailed";
    pub const FILE_SYSTEM_RESIZE_REQUIRED: &str = "FileSystemResizeRequired";
    pub const FILE_SYSTEM_RESIZE_SUCCESSFUL: &str = "FileSystemResizeSuccessful";
    pub const VOLUME_RESIZE_SUCCESSFUL: &str = "VolumeResizeSuccessful";
    // external-snapshotter's snapshot controller and csi-snapshotter.
    pub const SNAPSHOT_VALIDATION_ERROR: &str = "SnapshotValidationError";
    pub const SNAPSHOT_CONTENT_MISSING: &str = "SnapshotContentMissing";
    pub const SNAPSHOT_MISBOUND: &str = "SnapshotMisbound";
    pub const SNAPSHOT_CONTENT_MISMATCH: &str = "SnapshotContentMismatch";
    pub const SNAPSHOT_CONTENT_MISBOUND: &str = "SnapshotContentMisbound";
    pub const SNAPSHOT_BIND_FAILED: &str = "SnapshotBindFailed";
    pub const SNAPSHOT_PVC_SOURCE_MISSING: &str = "SnapshotPVCSourceMissing";
    pub const SNAPSHOT_CONTENT_CREATION_FAILED: &str = "SnapshotContentCreationFailed";
    pub const CREATING_SNAPSHOT: &str = "CreatingSnapshot";
    pub const SNAPSHOT_CREATED: &str = "SnapshotCreated";
    pub const SNAPSHOT_READY: &str = "SnapshotReady";
    pub const SNAPSHOT_DELETE_PENDING: &str = "SnapshotDeletePending";
    pub const SNAPSHOT_CREATION_FAILED: &str = "SnapshotCreationFailed";
    pub const SNAPSHOT_CONTENT_CHECK_FAILED: &str = "SnapshotContentCheckandUpdateFailed";
    pub const SNAPSHOT_DELETE_ERROR: &str = "SnapshotDeleteError";
    // ... and for group snapshots.
    pub const GROUP_SNAPSHOT_VALIDATION_ERROR: &str = "GroupSnapshotValidationError";
    pub const GROUP_SNAPSHOT_CONTENT_MISSING: &str = "GroupSnapshotContentMissing";
    pub const GROUP_SNAPSHOT_MISBOUND: &str = "GroupSnapshotMisbound";
    pub const GROUP_SNAPSHOT_BIND_FAILED: &str = "GroupSnapshotBindFailed";
    pub const GROUP_SNAPSHOT_CONTENT_MISMATCH: &str = "GroupSnapshotContentMismatch";
    pub const GROUP_SNAPSHOT_CONTENT_MISBOUND: &str = "GroupSnapshotContentMisbound";
    pub const GROUP_SNAPSHOT_CONTENT_CREATION_FAILED: &str = "GroupSnapshotContentCreationFailed";
    pub const CREATE_GROUP_SNAPSHOT_CONTENT_FAILED: &str = "CreateGroupSnapshotContentFailed";
    pub const CREATING_GROUP_SNAPSHOT: &str = "CreatingGroupSnapshot";
    pub const GROUP_SNAPSHOT_CREATED: &str = "GroupSnapshotCreated";
    pub const GROUP_SNAPSHOT_READY: &str = "GroupSnapshotReady";
    pub const GROUP_SNAPSHOT_CREATION_FAILED: &str = "GroupSnapshotCreationFailed";
    pub const GROUP_SNAPSHOT_CONTENT_CHECK_FAILED: &str =
        "GroupSnapshotContentCheckandUpdateFailed";
    pub const GROUP_SNAPSHOT_DELETE_ERROR: &str = "GroupSnapshotDeleteError";
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// VolumeAttachment name: `csi-` + sha256(handle ‖ driver ‖ node), no separators (C1.1).
pub fn volume_attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!(
        "csi-{}",
        sha256_hex(format!("{handle}{driver}{node}").as_bytes())
    )
}

/// The unique volume name in node status: `kubernetes.io/csi/<driver>^<handle>` (C1.7).
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// external-attacher's finalizer: `external-attacher/` + the driver with every
/// character outside `[a-zA-Z0-9-]` replaced by `-`, and `X` appended when
/// the result ends in `-` (C2.2).
pub fn attacher_finalizer(driver: &str) -> String {
    let mut s: String = driver
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.ends_with('-') {
        s.push('X');
    }
    format!("external-attacher/{s}")
}

/// Kubelet's staging path for a volume (D3.1).
pub fn staging_path(kubelet_root: &str, driver: &str, handle: &str) -> String {
    format!(
        "{kubelet_root}/plugins/kubernetes.io/csi/{driver}/{}/globalmount",
        sha256_hex(handle.as_bytes())
    )
}

/// Kubelet's publish target for a pod's volume (D3.2).
pub fn publish_path(kubelet_root: &str, pod_uid: &str, pv: &str) -> String {
    format!("{kubelet_root}/pods/{pod_uid}/volumes/kubernetes.io~csi/{pv}/mount")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_kubernetes() {
        assert_eq!(
            attacher_finalizer("volplane.csi.io"),
            "external-attacher/volplane-csi-io"
        );
        assert_eq!(attacher_finalizer("a.b."), "external-attacher/a-b-X");
        let va = volume_attachment_name("vol-1", "volplane.csi.io", "node-a");
        assert_eq!(
            va,
            format!("csi-{}", sha256_hex(b"vol-1volplane.csi.ionode-a"))
        );
        assert_eq!(va.len(), 4 + 64);
        assert_eq!(unique_volume_name("d", "h"), "kubernetes.io/csi/d^h");
        assert!(
            staging_path("/var/lib/kubelet", "d", "h")
                .ends_with(&format!("/d/{}/globalmount", sha256_hex(b"h")))
        );
        assert_eq!(
            publish_path("/k", "uid", "pv"),
            "/k/pods/uid/volumes/kubernetes.io~csi/pv/mount"
        );
    }
}
