//! Names users and tools grep for: annotations, finalizers, event reasons,
//! paths. Spelled exactly as Kubernetes and the CSI sidecars spell them
//! (SEMANTICS.md A.1, B, C, D, E.5).

use sha2::{Digest, Sha256};

/// `pv.kubernetes.io/bind-completed`, as Kubernetes and the sidecars spell it.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `pv.kubernetes.io/bound-by-controller`, as Kubernetes and the sidecars spell it.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// `volume.kubernetes.io/selected-node`, as Kubernetes and the sidecars spell it.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// `pv.kubernetes.io/provisioned-by`, as Kubernetes and the sidecars spell it.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// `volume.kubernetes.io/storage-provisioner`, as Kubernetes and the sidecars spell it.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// `volume.beta.kubernetes.io/storage-provisioner`, as Kubernetes and the sidecars spell it.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// `pv.kubernetes.io/migrated-to`, as Kubernetes and the sidecars spell it.
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// `volume.alpha.kubernetes.io/pre-resize-capacity`, as Kubernetes and the sidecars spell it.
pub const ANN_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
/// `volume.kubernetes.io/provisioner-deletion-secret-name`, as Kubernetes and the sidecars spell it.
pub const ANN_DELETION_SECRET_NAME: &str = "volume.kubernetes.io/provisioner-deletion-secret-name";
/// `volume.kubernetes.io/provisioner-deletion-secret-namespace`, as Kubernetes and the sidecars spell it.
pub const ANN_DELETION_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/provisioner-deletion-secret-namespace";
/// `volume.kubernetes.io/controller-modify-secret-name`: on a PV whose class
/// names a controller-modify Secret, the Secret ControllerModifyVolume uses.
pub const ANN_MODIFY_SECRET_NAME: &str = "volume.kubernetes.io/controller-modify-secret-name";
/// `volume.kubernetes.io/controller-modify-secret-namespace`, its namespace.
pub const ANN_MODIFY_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/controller-modify-secret-namespace";
/// `csi.volume.kubernetes.io/nodeid`, as Kubernetes and the sidecars spell it.
pub const ANN_NODE_ID: &str = "csi.volume.kubernetes.io/nodeid";
/// `csi.alpha.kubernetes.io/node-id`, as Kubernetes and the sidecars spell it.
pub const ANN_VA_NODE_ID: &str = "csi.alpha.kubernetes.io/node-id";
/// `volumes.kubernetes.io/controller-managed-attach-detach`, as Kubernetes and the sidecars spell it.
pub const ANN_CONTROLLER_MANAGED_ATTACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
/// `kubernetes.io/no-provisioner`, as Kubernetes and the sidecars spell it.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// `external-provisioner.volume.kubernetes.io/finalizer`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_EXTERNAL_PROVISIONER: &str =
    "external-provisioner.volume.kubernetes.io/finalizer";
/// `kubernetes.io/pv-controller`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_PV_CONTROLLER: &str = "kubernetes.io/pv-controller";
/// `kubernetes.io/pvc-protection`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// `kubernetes.io/pv-protection`, as Kubernetes and the sidecars spell it.
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
/// `snapshot.storage.kubernetes.io/volumesnapshot-bound-protection`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_SNAPSHOT_BOUND: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection";
/// `snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_SNAPSHOT_AS_SOURCE: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection";
/// `snapshot.storage.kubernetes.io/pvc-as-source-protection`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_PVC_AS_SNAPSHOT_SOURCE: &str =
    "snapshot.storage.kubernetes.io/pvc-as-source-protection";
/// `snapshot.storage.kubernetes.io/volumesnapshot-being-deleted`, as Kubernetes and the sidecars spell it.
pub const ANN_SNAPSHOT_BEING_DELETED: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";
/// `csi.storage.k8s.io/pvc/name`: with `--extra-create-metadata`, the
/// claim's name among CreateVolume's parameters.
pub const PARAM_PVC_NAME: &str = "csi.storage.k8s.io/pvc/name";
/// `csi.storage.k8s.io/pvc/namespace`: the claim's namespace, likewise.
pub const PARAM_PVC_NAMESPACE: &str = "csi.storage.k8s.io/pvc/namespace";
/// `csi.storage.k8s.io/pv/name`: the PV's name, likewise.
pub const PARAM_PV_NAME: &str = "csi.storage.k8s.io/pv/name";
/// `csi.storage.k8s.io/volumesnapshot/name`: with `--extra-create-metadata`,
/// the snapshot's name among CreateSnapshot's parameters.
pub const PARAM_SNAPSHOT_NAME: &str = "csi.storage.k8s.io/volumesnapshot/name";
/// `csi.storage.k8s.io/volumesnapshot/namespace`: its namespace, likewise.
pub const PARAM_SNAPSHOT_NAMESPACE: &str = "csi.storage.k8s.io/volumesnapshot/namespace";
/// `csi.storage.k8s.io/volumesnapshotcontent/name`: the content's name, likewise.
pub const PARAM_SNAPSHOT_CONTENT_NAME: &str = "csi.storage.k8s.io/volumesnapshotcontent/name";
/// `snapshot.storage.kubernetes.io/allow-volume-mode-change`: on a
/// content, `"true"` lets a claim restore it in another volume mode than
/// its source's.
pub const ANN_ALLOW_VOLUME_MODE_CHANGE: &str =
    "snapshot.storage.kubernetes.io/allow-volume-mode-change";
/// `snapshot.storage.kubernetes.io/deletion-secret-name`: on a content, the
/// Secret its CreateSnapshot and DeleteSnapshot get (the snapshot
/// controller writes it from the class).
pub const ANN_SNAPSHOT_DELETION_SECRET_NAME: &str =
    "snapshot.storage.kubernetes.io/deletion-secret-name";
/// `snapshot.storage.kubernetes.io/deletion-secret-namespace`: its namespace.
pub const ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE: &str =
    "snapshot.storage.kubernetes.io/deletion-secret-namespace";
/// `groupsnapshot.storage.kubernetes.io/deletion-secret-name`: on a group
/// content, the Secret its CreateVolumeGroupSnapshot and
/// DeleteVolumeGroupSnapshot get.
pub const ANN_GROUP_DELETION_SECRET_NAME: &str =
    "groupsnapshot.storage.kubernetes.io/deletion-secret-name";
/// `groupsnapshot.storage.kubernetes.io/deletion-secret-namespace`: its namespace.
pub const ANN_GROUP_DELETION_SECRET_NAMESPACE: &str =
    "groupsnapshot.storage.kubernetes.io/deletion-secret-namespace";
/// `snapshot.storage.kubernetes.io/volumesnapshot-being-created`, as Kubernetes and the sidecars spell it.
pub const ANN_SNAPSHOT_BEING_CREATED: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-being-created";
/// `snapshot.storage.kubernetes.io/is-default-class`, as Kubernetes and the sidecars spell it.
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
/// `groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_GROUP_SNAPSHOT_BOUND: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection";
/// `snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection`, as Kubernetes and the sidecars spell it.
pub const FINALIZER_SNAPSHOT_IN_GROUP: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection";
/// `groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created`, as Kubernetes and the sidecars spell it.
pub const ANN_GROUP_BEING_CREATED: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created";
/// `groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted`, as Kubernetes and the sidecars spell it.
pub const ANN_GROUP_BEING_DELETED: &str =
    "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted";
/// `groupsnapshot.storage.kubernetes.io/is-default-class`, as Kubernetes and the sidecars spell it.
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
    /// The event reason `FailedBinding`.
    pub const FAILED_BINDING: &str = "FailedBinding";
    /// The event reason `VolumeMismatch`.
    pub const VOLUME_MISMATCH: &str = "VolumeMismatch";
    /// The event reason `ClaimLost`.
    pub const CLAIM_LOST: &str = "ClaimLost";
    /// The event reason `ClaimMisbound`.
    pub const CLAIM_MISBOUND: &str = "ClaimMisbound";
    /// The event reason `WaitForFirstConsumer`.
    pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
    /// The event reason `WaitForPodScheduled`.
    pub const WAIT_FOR_POD_SCHEDULED: &str = "WaitForPodScheduled";
    /// The event reason `ExternalProvisioning`.
    pub const EXTERNAL_PROVISIONING: &str = "ExternalProvisioning";
    /// The event reason `Provisioning`.
    pub const PROVISIONING: &str = "Provisioning";
    /// The event reason `ProvisioningSucceeded`.
    pub const PROVISIONING_SUCCEEDED: &str = "ProvisioningSucceeded";
    /// The event reason `ProvisioningFailed`.
    pub const PROVISIONING_FAILED: &str = "ProvisioningFailed";
    /// The event reason `VolumeFailedDelete`.
    pub const VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";
    /// The event reason `VolumeDelete`.
    pub const VOLUME_DELETE: &str = "VolumeDelete";
    /// The event reason `VolumeRecycled`.
    pub const VOLUME_RECYCLED: &str = "VolumeRecycled";
    /// The event reason `VolumeFailedRecycle`.
    pub const VOLUME_FAILED_RECYCLE: &str = "VolumeFailedRecycle";
    /// The event reason `VolumeUnknownReclaimPolicy`.
    pub const VOLUME_UNKNOWN_RECLAIM_POLICY: &str = "VolumeUnknownReclaimPolicy";
    /// The event reason `FailedAttachVolume`.
    pub const FAILED_ATTACH_VOLUME: &str = "FailedAttachVolume";
    /// The event reason `SuccessfulAttachVolume`.
    pub const SUCCESSFUL_ATTACH_VOLUME: &str = "SuccessfulAttachVolume";
    /// The event reason `FailedMount`.
    pub const FAILED_MOUNT: &str = "FailedMount";
    /// The event reason `Resizing`.
    pub const RESIZING: &str = "Resizing";
    /// The event reason `VolumeResizeFailed`.
    pub const VOLUME_RESIZE_FAILED: &str = "VolumeResizeFailed";
    /// The event reason `FileSystemResizeRequired`.
    pub const FILE_SYSTEM_RESIZE_REQUIRED: &str = "FileSystemResizeRequired";
    /// The event reason `FileSystemResizeSuccessful`.
    pub const FILE_SYSTEM_RESIZE_SUCCESSFUL: &str = "FileSystemResizeSuccessful";
    /// The event reason `VolumeResizeSuccessful`.
    pub const VOLUME_RESIZE_SUCCESSFUL: &str = "VolumeResizeSuccessful";
    /// The event reason `VolumeModify`: the resizer starts modifying a volume.
    pub const VOLUME_MODIFY: &str = "VolumeModify";
    /// The event reason `VolumeModifyFailed`.
    pub const VOLUME_MODIFY_FAILED: &str = "VolumeModifyFailed";
    /// The event reason `VolumeModifySuccessful`.
    pub const VOLUME_MODIFY_SUCCESSFUL: &str = "VolumeModifySuccessful";
    /// The event reason `VolumeModifyCanceled` (the claim went back to no class).
    pub const VOLUME_MODIFY_CANCELED: &str = "VolumeModifyCanceled";
    // external-snapshotter's snapshot controller and csi-snapshotter.
    /// The event reason `SnapshotValidationError`.
    pub const SNAPSHOT_VALIDATION_ERROR: &str = "SnapshotValidationError";
    /// The event reason `SnapshotContentMissing`.
    pub const SNAPSHOT_CONTENT_MISSING: &str = "SnapshotContentMissing";
    /// The event reason `SnapshotMisbound`.
    pub const SNAPSHOT_MISBOUND: &str = "SnapshotMisbound";
    /// The event reason `SnapshotContentMismatch`.
    pub const SNAPSHOT_CONTENT_MISMATCH: &str = "SnapshotContentMismatch";
    /// The event reason `SnapshotContentMisbound`.
    pub const SNAPSHOT_CONTENT_MISBOUND: &str = "SnapshotContentMisbound";
    /// The event reason `SnapshotBindFailed`.
    pub const SNAPSHOT_BIND_FAILED: &str = "SnapshotBindFailed";
    /// The event reason `SnapshotPVCSourceMissing`.
    pub const SNAPSHOT_PVC_SOURCE_MISSING: &str = "SnapshotPVCSourceMissing";
    /// The event reason `SnapshotContentCreationFailed`.
    pub const SNAPSHOT_CONTENT_CREATION_FAILED: &str = "SnapshotContentCreationFailed";
    /// The event reason `CreatingSnapshot`.
    pub const CREATING_SNAPSHOT: &str = "CreatingSnapshot";
    /// The event reason `SnapshotCreated`.
    pub const SNAPSHOT_CREATED: &str = "SnapshotCreated";
    /// The event reason `SnapshotReady`.
    pub const SNAPSHOT_READY: &str = "SnapshotReady";
    /// The event reason `SnapshotDeletePending`.
    pub const SNAPSHOT_DELETE_PENDING: &str = "SnapshotDeletePending";
    /// The event reason `SnapshotCreationFailed`.
    pub const SNAPSHOT_CREATION_FAILED: &str = "SnapshotCreationFailed";
    /// The event reason `SnapshotContentCheckandUpdateFailed`.
    pub const SNAPSHOT_CONTENT_CHECK_FAILED: &str = "SnapshotContentCheckandUpdateFailed";
    /// The event reason `SnapshotDeleteError`.
    pub const SNAPSHOT_DELETE_ERROR: &str = "SnapshotDeleteError";
    // ... and for group snapshots.
    /// The event reason `GroupSnapshotValidationError`.
    pub const GROUP_SNAPSHOT_VALIDATION_ERROR: &str = "GroupSnapshotValidationError";
    /// The event reason `GroupSnapshotContentMissing`.
    pub const GROUP_SNAPSHOT_CONTENT_MISSING: &str = "GroupSnapshotContentMissing";
    /// The event reason `GroupSnapshotMisbound`.
    pub const GROUP_SNAPSHOT_MISBOUND: &str = "GroupSnapshotMisbound";
    /// The event reason `GroupSnapshotBindFailed`.
    pub const GROUP_SNAPSHOT_BIND_FAILED: &str = "GroupSnapshotBindFailed";
    /// The event reason `GroupSnapshotContentMismatch`.
    pub const GROUP_SNAPSHOT_CONTENT_MISMATCH: &str = "GroupSnapshotContentMismatch";
    /// The event reason `GroupSnapshotContentMisbound`.
    pub const GROUP_SNAPSHOT_CONTENT_MISBOUND: &str = "GroupSnapshotContentMisbound";
    /// The event reason `GroupSnapshotContentCreationFailed`.
    pub const GROUP_SNAPSHOT_CONTENT_CREATION_FAILED: &str = "GroupSnapshotContentCreationFailed";
    /// The event reason `CreateGroupSnapshotContentFailed`.
    pub const CREATE_GROUP_SNAPSHOT_CONTENT_FAILED: &str = "CreateGroupSnapshotContentFailed";
    /// The event reason `CreatingGroupSnapshot`.
    pub const CREATING_GROUP_SNAPSHOT: &str = "CreatingGroupSnapshot";
    /// The event reason `GroupSnapshotCreated`.
    pub const GROUP_SNAPSHOT_CREATED: &str = "GroupSnapshotCreated";
    /// The event reason `GroupSnapshotReady`.
    pub const GROUP_SNAPSHOT_READY: &str = "GroupSnapshotReady";
    /// The event reason `GroupSnapshotCreationFailed`.
    pub const GROUP_SNAPSHOT_CREATION_FAILED: &str = "GroupSnapshotCreationFailed";
    /// The event reason `GroupSnapshotContentCheckandUpdateFailed`.
    pub const GROUP_SNAPSHOT_CONTENT_CHECK_FAILED: &str =
        "GroupSnapshotContentCheckandUpdateFailed";
    /// The event reason `GroupSnapshotDeleteError`.
    pub const GROUP_SNAPSHOT_DELETE_ERROR: &str = "GroupSnapshotDeleteError";
}

/// An expansion's state on a claim (RecoverVolumeExpansionFailure, GA in
/// Kubernetes 1.34): `status.allocatedResourceStatuses["storage"]`, the
/// resize conditions, and the annotation the resizer leaves when no node
/// step is needed. The resizer and the kubelet write them.
pub mod expansion {
    /// The controller is expanding the volume.
    pub const CONTROLLER_IN_PROGRESS: &str = "ControllerResizeInProgress";
    /// The controller's expansion failed for good (INVALID_ARGUMENT,
    /// OUT_OF_RANGE, NOT_FOUND): only a new size restarts it.
    pub const CONTROLLER_INFEASIBLE: &str = "ControllerResizeInfeasible";
    /// The controller is done; the node must grow the filesystem.
    pub const NODE_PENDING: &str = "NodeResizePending";
    /// The node is growing the filesystem.
    pub const NODE_IN_PROGRESS: &str = "NodeResizeInProgress";
    /// The node's expansion failed for good.
    pub const NODE_INFEASIBLE: &str = "NodeResizeInfeasible";
    /// The claim condition while the controller expands.
    pub const RESIZING: &str = "Resizing";
    /// The claim condition while the node must grow the filesystem.
    pub const FS_RESIZE_PENDING: &str = "FileSystemResizePending";
    /// The claim condition after the controller's expansion failed for good.
    pub const CONTROLLER_RESIZE_ERROR: &str = "ControllerResizeError";
    /// The claim condition after the node's expansion failed for good.
    pub const NODE_RESIZE_ERROR: &str = "NodeResizeError";
    /// The conditions an expansion owns: each write of one replaces the others
    /// or keeps them, as upstream's MergeResizeConditionsOfPVC.
    pub const CONDITIONS: [&str; 4] = [
        RESIZING,
        FS_RESIZE_PENDING,
        CONTROLLER_RESIZE_ERROR,
        NODE_RESIZE_ERROR,
    ];
    /// Written by the resizer when the expansion finished without a node step.
    pub const ANN_NODE_EXPANSION_NOT_REQUIRED: &str =
        "volume.kubernetes.io/node-expansion-not-required";
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

/// csi-lib-utils' sanitizeName: every character outside `[a-zA-Z0-9-]`
/// replaced by `-`, and `X` appended when the result ends in `-` (lease
/// names and the attacher's finalizer are made so).
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
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
    s
}

/// external-attacher's finalizer: `external-attacher/` + the driver,
/// [`sanitize`]d (C2.2).
pub fn attacher_finalizer(driver: &str) -> String {
    let s = sanitize(driver);
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
