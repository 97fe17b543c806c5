//! The two contents the snapshotter cuts — a VolumeSnapshotContent and a
//! VolumeGroupSnapshotContent — as one [`CutContent`]: their annotations,
//! finalizers, secrets, events and status fields, where the two differ.

use super::*;
use crate::control::secrets::{self, SecretParams};
use crate::model::names::{self, ANN_GROUP_BEING_CREATED, FINALIZER_GROUP_CONTENT_BOUND, reason};

/// A content the snapshotter cuts: the one snapshot or the group.
pub(super) trait CutContent: Clone {
    /// The annotation that marks a cut under way.
    const BEING_CREATED: &'static str;
    /// The finalizer that holds the content while it is bound.
    const BOUND_FINALIZER: &'static str;
    /// The annotations naming the Secret its create and delete get.
    const DELETION_SECRET: (&'static str, &'static str);
    /// The class parameters naming the Secret its check gets
    /// (ListSnapshots, GetVolumeGroupSnapshot).
    const CHECK_SECRET: SecretParams;
    /// Its class's kind.
    const CLASS_KIND: Kind;
    /// What it is, in upstream's messages: `snapshot` or `group snapshot`.
    const NOUN: &'static str;
    /// Its class's resource, in the API server's not-found message.
    const CLASS_RESOURCE: &'static str;
    /// Its kind in secret templates (`${volumesnapshotcontent.name}`).
    const TOKEN_KIND: &'static str;
    /// Its class's name, if it names one.
    fn class_name(&self) -> Option<&str>;
    /// A member of a group snapshot, checked with its group's Secret (its
    /// annotations), not a class's.
    fn group_member(&self) -> bool {
        false
    }
    /// Its key.
    fn key(&self) -> ObjectKey;
    /// Its metadata.
    fn meta(&self) -> &ObjectMeta;
    /// Its metadata, to change.
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    /// As an API object.
    fn object(self) -> Object;
    /// The event reason and the status message for `message`: a failed
    /// creation, or a failed check of what exists.
    fn failure(&self, message: &str) -> (&'static str, String);
    /// The status's error.
    fn error(&self) -> Option<&VolumeSnapshotError>;
    /// The status's readyToUse and error, to change (the status made
    /// when there is none).
    fn error_mut(&mut self) -> (&mut Option<bool>, &mut Option<VolumeSnapshotError>);
    /// The error message the status shows now.
    fn shown_error(&self) -> Option<&str> {
        self.error()?.message.as_deref()
    }
    /// The status with readyToUse false and the error `shown`.
    fn set_error(&mut self, shown: String) {
        let (ready, error) = self.error_mut();
        *ready = Some(false);
        *error = Some(VolumeSnapshotError {
            time: None,
            message: Some(shown),
        });
    }
    /// The call that deletes its storage, when the policy is Delete and
    /// there is something of its own to delete.
    fn deletion(&self) -> Option<Request>;
    /// The status after the storage went.
    fn clear_cut(&mut self);
}

impl CutContent for VolumeSnapshotContent {
    const BEING_CREATED: &'static str = ANN_SNAPSHOT_BEING_CREATED;
    const BOUND_FINALIZER: &'static str = FINALIZER_CONTENT_BOUND;
    const DELETION_SECRET: (&'static str, &'static str) = (
        names::ANN_SNAPSHOT_DELETION_SECRET_NAME,
        names::ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE,
    );
    const CHECK_SECRET: SecretParams = secrets::SNAPSHOTTER_LIST;
    const CLASS_KIND: Kind = Kind::VolumeSnapshotClass;
    const NOUN: &'static str = "snapshot";
    const CLASS_RESOURCE: &'static str = "volumesnapshotclass.snapshot.storage.k8s.io";
    const TOKEN_KIND: &'static str = "volumesnapshot";

    fn class_name(&self) -> Option<&str> {
        self.spec.volume_snapshot_class_name.as_deref()
    }

    fn group_member(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.volume_group_snapshot_handle.is_some())
    }

    fn key(&self) -> ObjectKey {
        ObjectKey::new(Kind::VolumeSnapshotContent, "", &self.metadata.name)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn object(self) -> Object {
        Object::Content(self)
    }

    fn failure(&self, message: &str) -> (&'static str, String) {
        if self.spec.source.volume_handle.is_some() {
            (
                reason::SNAPSHOT_CREATION_FAILED,
                format!("Failed to create snapshot: {message}"),
            )
        } else {
            (
                reason::SNAPSHOT_CONTENT_CHECK_FAILED,
                format!("Failed to check and update snapshot content: {message}"),
            )
        }
    }

    fn error(&self) -> Option<&VolumeSnapshotError> {
        self.status.as_ref()?.error.as_ref()
    }

    fn error_mut(&mut self) -> (&mut Option<bool>, &mut Option<VolumeSnapshotError>) {
        let status = self.status.get_or_insert_with(Default::default);
        (&mut status.ready_to_use, &mut status.error)
    }

    /// A member of a group snapshot goes with its group
    /// (DeleteVolumeGroupSnapshot), not on its own.
    fn deletion(&self) -> Option<Request> {
        let status = self.status.as_ref()?;
        let handle = status.snapshot_handle.clone()?;
        let member = status.volume_group_snapshot_handle.is_some();
        (self.spec.deletion_policy == DeletionPolicy::Delete && !member).then(|| {
            Request::DeleteSnapshot(driver::DeleteSnapshot {
                snapshot_id: handle,
                secrets: driver::Secrets::default(),
            })
        })
    }

    fn clear_cut(&mut self) {
        if let Some(s) = self.status.as_mut() {
            s.snapshot_handle = None;
            s.ready_to_use = None;
            s.creation_time = None;
            s.restore_size = None;
        }
    }
}

impl CutContent for VolumeGroupSnapshotContent {
    const BEING_CREATED: &'static str = ANN_GROUP_BEING_CREATED;
    const BOUND_FINALIZER: &'static str = FINALIZER_GROUP_CONTENT_BOUND;
    const DELETION_SECRET: (&'static str, &'static str) = (
        names::ANN_GROUP_DELETION_SECRET_NAME,
        names::ANN_GROUP_DELETION_SECRET_NAMESPACE,
    );
    const CHECK_SECRET: SecretParams = secrets::GROUP_SNAPSHOTTER_GET;
    const CLASS_KIND: Kind = Kind::VolumeGroupSnapshotClass;
    const NOUN: &'static str = "group snapshot";
    const CLASS_RESOURCE: &'static str = "volumegroupsnapshotclass.groupsnapshot.storage.k8s.io";
    const TOKEN_KIND: &'static str = "volumegroupsnapshot";

    fn class_name(&self) -> Option<&str> {
        self.spec.volume_group_snapshot_class_name.as_deref()
    }

    fn key(&self) -> ObjectKey {
        ObjectKey::new(Kind::VolumeGroupSnapshotContent, "", &self.metadata.name)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn object(self) -> Object {
        Object::GroupContent(self)
    }

    fn failure(&self, message: &str) -> (&'static str, String) {
        if self.group_handle().is_none() {
            (
                reason::GROUP_SNAPSHOT_CREATION_FAILED,
                format!("Failed to create group snapshot: {message}"),
            )
        } else {
            (
                reason::GROUP_SNAPSHOT_CONTENT_CHECK_FAILED,
                format!("Failed to check and update group snapshot content: {message}"),
            )
        }
    }

    fn error(&self) -> Option<&VolumeSnapshotError> {
        self.status.as_ref()?.error.as_ref()
    }

    fn error_mut(&mut self) -> (&mut Option<bool>, &mut Option<VolumeSnapshotError>) {
        let status = self.status.get_or_insert_with(Default::default);
        (&mut status.ready_to_use, &mut status.error)
    }

    fn deletion(&self) -> Option<Request> {
        let handle = self.status.as_ref()?.volume_group_snapshot_handle.clone()?;
        (self.spec.deletion_policy == DeletionPolicy::Delete).then(|| {
            Request::DeleteGroupSnapshot(driver::DeleteGroupSnapshot {
                group_snapshot_id: handle,
                snapshot_ids: super::group::member_ids(self),
                secrets: driver::Secrets::default(),
            })
        })
    }

    fn clear_cut(&mut self) {
        if let Some(s) = self.status.as_mut() {
            s.volume_group_snapshot_handle = None;
            s.ready_to_use = None;
            s.creation_time = None;
            s.volume_snapshot_info_list.clear();
        }
    }
}
