//! csi-snapshotter's group half (pkg/sidecar-controller/groupsnapshot_helper.go):
//! for each VolumeGroupSnapshotContent of its driver it
//!
//! * cuts a dynamic group (`source.volumeHandles`, no handle yet): the
//!   `volumegroupsnapshot-being-created` annotation first, then
//!   CreateVolumeGroupSnapshot named `groupsnapshot-<VolumeGroupSnapshot uid>`
//!   with the class's parameters, then the answer in `status`
//!   (volumeGroupSnapshotHandle, readyToUse, creationTime and one
//!   `volumeSnapshotInfoList` entry per member), then the annotation
//!   removed. A failure is `status.error` with a `GroupSnapshotCreationFailed`
//!   warning; a final one also removes the annotation.
//! * asks GetVolumeGroupSnapshot (with backoff) while a group is not ready,
//!   and for a pre-provisioned content (`source.groupSnapshotHandles`).
//! * when a content is being deleted and the snapshot controller marked it
//!   `volumegroupsnapshot-being-deleted` (or it is a pre-provisioned one
//!   never bound), and no cut is in flight: DeleteVolumeGroupSnapshot with
//!   its members when the policy is Delete, the status cleared, then the
//!   `volumegroupsnapshotcontent-bound-protection` finalizer removed.

use super::*;
use crate::model::names::{
    ANN_GROUP_BEING_CREATED, ANN_GROUP_BEING_DELETED, csi_group_snapshot_name,
};

fn group_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::VolumeGroupSnapshotContent, "", name)
}

/// The member snapshots a content names: those the driver reported, else
/// the pre-provisioned handles.
pub(super) fn member_ids(c: &VolumeGroupSnapshotContent) -> Vec<String> {
    let reported: Vec<String> = c
        .status
        .iter()
        .flat_map(|s| &s.volume_snapshot_info_list)
        .map(|i| i.snapshot_handle.clone())
        .filter(|h| !h.is_empty())
        .collect();
    if !reported.is_empty() {
        return reported;
    }
    c.spec
        .source
        .group_snapshot_handles
        .as_ref()
        .map(|h| h.volume_snapshot_handles.clone())
        .unwrap_or_default()
}

/// Upstream's shouldDeleteGroupSnapshotContent.
fn should_delete(c: &VolumeGroupSnapshotContent) -> bool {
    if !c.metadata.deleting() {
        return false;
    }
    if c.spec.source.group_snapshot_handles.is_some()
        && c.spec.volume_group_snapshot_ref.uid.is_empty()
    {
        return true;
    }
    if c.metadata.has_annotation(ANN_GROUP_BEING_CREATED) {
        return false;
    }
    c.metadata.has_annotation(ANN_GROUP_BEING_DELETED)
}

impl Snapshotter {
    /// Serves the group snapshot kinds too (their CRDs must exist, and the
    /// driver have the GroupController).
    pub fn with_groups(mut self, on: bool) -> Snapshotter {
        self.controller_mut().groups = on;
        self
    }
}

impl SnapshotterReconciler {
    /// The kinds its informers watch.
    pub fn watches(&self, kind: Kind) -> bool {
        match kind {
            Kind::VolumeSnapshotContent | Kind::VolumeSnapshotClass => true,
            Kind::VolumeGroupSnapshotContent | Kind::VolumeGroupSnapshotClass => self.groups,
            _ => false,
        }
    }

    pub(super) fn group_volume_handles(&self, cx: &Cx<Self>, content: &ObjectKey) -> Vec<String> {
        match cx.cache().get(content) {
            Some(Object::GroupContent(c)) => c.spec.source.volume_handles.clone(),
            _ => Vec::new(),
        }
    }

    pub(super) fn sync_group(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        let Some(shared) = cx.cache().get_shared(key) else {
            return;
        };
        let Object::GroupContent(c) = &*shared else {
            return;
        };
        if c.spec.driver != self.driver || cx.busy(key) {
            return;
        }
        if should_delete(c) {
            return self.sync_deleted(cx, c);
        }
        if let Some(Cut::Group(g)) = self.cut.get(key).cloned() {
            return self.write_group_status(cx, c, &g);
        }
        if let Some((message, final_error)) = self.failed.get(key).cloned() {
            return self.write_error(cx, c, message, final_error);
        }
        if c.group_handle().is_some() && c.metadata.has_annotation(ANN_GROUP_BEING_CREATED) {
            let mut next = c.clone();
            next.metadata.annotations.remove(ANN_GROUP_BEING_CREATED);
            return self.write_content(
                cx,
                c,
                ApiCall::Update(Object::GroupContent(next)),
                Settles::Nothing,
            );
        }
        if c.ready() || cx.waiting(key) {
            return;
        }
        match c.group_handle() {
            Some(handle) => {
                let secrets = match self.credentials_for(cx, c, Purpose::Check) {
                    Ok(Some(secrets)) => secrets,
                    Ok(None) => return,
                    Err(e) => return self.blocked(cx, key, e),
                };
                let call = Request::GetGroupSnapshot {
                    group_snapshot_id: handle.to_string(),
                    snapshot_ids: member_ids(c),
                    secrets,
                };
                Self::csi(
                    cx,
                    call,
                    Call::Check {
                        content: key.clone(),
                    },
                );
            }
            None if !c.spec.source.volume_handles.is_empty() => self.create_group(cx, c),
            None => {}
        }
    }

    /// CreateVolumeGroupSnapshot for a dynamic content, after marking it
    /// being created.
    fn create_group(&mut self, cx: &mut Cx<Self>, c: &VolumeGroupSnapshotContent) {
        let key = group_key(&c.metadata.name);
        let name = &c.metadata.name;
        let class_name = c.spec.volume_group_snapshot_class_name.as_deref();
        let class =
            class_name.and_then(
                |n| match cx.cache().find(Kind::VolumeGroupSnapshotClass, "", n) {
                    Some(Object::GroupSnapshotClass(class)) => Some(class.clone()),
                    _ => None,
                },
            );
        let Some(class) = class else {
            let why = match class_name {
                None => {
                    format!("failed to take group snapshot {name} without a group snapshot class")
                }
                Some(n) => {
                    format!("volumegroupsnapshotclass.groupsnapshot.storage.k8s.io {n:?} not found")
                }
            };
            let msg = format!(
                "failed to get input parameters to create group snapshot for group snapshot content {name}: {why:?}"
            );
            return self.blocked(cx, &key, msg);
        };
        let uid = &c.spec.volume_group_snapshot_ref.uid;
        if uid.is_empty() {
            let msg = format!(
                "cannot create group snapshot. Group snapshot content {name} not bound to a group snapshot"
            );
            return self.blocked(cx, &key, msg);
        }
        let parameters = match csi_parameters(&class.parameters) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("failed to remove CSI Parameters of prefixed keys: {e}");
                return self.blocked(cx, &key, msg);
            }
        };
        let secrets = match self.credentials_for(cx, c, Purpose::Create) {
            Ok(Some(secrets)) => secrets,
            Ok(None) => return,
            Err(e) => {
                let msg = format!(
                    "failed to get input parameters to create group snapshot for group snapshot content {name}: {e:?}"
                );
                return self.blocked(cx, &key, msg);
            }
        };
        if !c.metadata.has_annotation(ANN_GROUP_BEING_CREATED) {
            let mut next = c.clone();
            next.metadata
                .annotations
                .insert(ANN_GROUP_BEING_CREATED.into(), "yes".into());
            return self.write_content(
                cx,
                c,
                ApiCall::Update(Object::GroupContent(next)),
                Settles::Nothing,
            );
        }
        let call = Request::CreateGroupSnapshot(driver::CreateGroupSnapshot {
            name: csi_group_snapshot_name(uid),
            source_volume_ids: c.spec.source.volume_handles.clone(),
            parameters,
            secrets,
        });
        Self::csi(cx, call, Call::Create { content: key });
    }

    /// What the driver reported, merged into the status as upstream's
    /// updateGroupSnapshotContentStatus does.
    fn write_group_status(
        &mut self,
        cx: &mut Cx<Self>,
        c: &VolumeGroupSnapshotContent,
        g: &driver::GroupSnapshot,
    ) {
        let nanos = |t: &driver::Timestamp| {
            t.seconds
                .saturating_mul(1_000_000_000)
                .saturating_add(i64::from(t.nanos))
        };
        let mut status = c.status.clone().unwrap_or_default();
        status
            .volume_group_snapshot_handle
            .get_or_insert_with(|| g.group_snapshot_id.clone());
        if status.ready_to_use != Some(g.ready_to_use) {
            status.ready_to_use = Some(g.ready_to_use);
            if g.ready_to_use {
                status.error = None;
            }
        }
        status
            .creation_time
            .get_or_insert_with(|| rfc3339(nanos(&g.creation_time)));
        if status.volume_snapshot_info_list.is_empty() {
            status.volume_snapshot_info_list = g
                .snapshots
                .iter()
                .map(|s| VolumeSnapshotInfo {
                    volume_handle: s.source_volume_id.clone(),
                    snapshot_handle: s.snapshot_id.clone(),
                    creation_time: Some(nanos(&s.creation_time)),
                    ready_to_use: Some(s.ready_to_use),
                    restore_size: (s.size_bytes > 0)
                        .then(|| i64::try_from(s.size_bytes).unwrap_or(i64::MAX)),
                })
                .collect();
        }
        self.ask_again_unless(cx, group_key(&c.metadata.name), g.ready_to_use);
        let mut next = c.clone();
        next.status = Some(status);
        self.write_content(
            cx,
            c,
            ApiCall::UpdateStatus(Object::GroupContent(next)),
            Settles::Cut,
        );
    }
}
