//! The snapshot controller's group half (external-snapshotter's
//! pkg/common-controller/groupsnapshot_controller_helper.go).
//!
//! For a VolumeGroupSnapshot it:
//! * checks exactly one source is set (`GroupSnapshotValidationError`);
//! * keeps `volumegroupsnapshot-bound-protection` on it from the start.
//!   Upstream adds it once the group is bound, which lets a group deleted
//!   between making its content and binding it vanish and orphan the
//!   content, whose group snapshot is then cut and never deleted (the
//!   simulator found this);
//! * dynamic (`source.selector`): the claims the selector picks in its
//!   namespace, each Bound to a CSI volume of the class's driver (the class
//!   named, or the default group class of that driver, written back), go
//!   into the content `groupsnapcontent-<uid>` with a Normal
//!   `CreatingGroupSnapshot` event. Once csi-snapshotter has cut the group,
//!   each member gets a VolumeSnapshotContent `snapcontent-<h>` (annotated
//!   with the group's handle) and a VolumeSnapshot `snapshot-<h>` owned by
//!   the group and held by `volumesnapshot-in-group-protection`, bound to
//!   each other, h = sha256(group uid ‖ volume handle). The selector's
//!   `matchExpressions` count too (upstream lists claims by `matchLabels`
//!   only).
//! * pre-provisioned (`source.volumeGroupSnapshotContentName`): binds the
//!   named content;
//! * copies the content's status up, with `GroupSnapshotCreated` and
//!   `GroupSnapshotReady` events the first time.
//! * when deleted: waits while a member restores a Pending claim, marks its
//!   content `volumegroupsnapshot-being-deleted`, deletes the members and
//!   waits for them to go (upstream deletes the group first, which leaves
//!   members shown ready after their storage snapshots are gone), deletes
//!   the content if its policy is Delete, and removes its finalizer once
//!   the content is gone.
//!
//! A group content keeps `volumegroupsnapshotcontent-bound-protection`
//! while bound and not being deleted.

use super::*;
use crate::model::names::{
    ANN_DEFAULT_GROUP_SNAPSHOT_CLASS, ANN_GROUP_BEING_DELETED, ANN_GROUP_SNAPSHOT_HANDLE,
    FINALIZER_GROUP_CONTENT_BOUND, FINALIZER_GROUP_SNAPSHOT_BOUND, FINALIZER_SNAPSHOT_IN_GROUP,
    group_content_name, group_member_names,
};

pub(super) fn group_key(g: &VolumeGroupSnapshot) -> ObjectKey {
    ObjectKey::new(
        Kind::VolumeGroupSnapshot,
        &g.metadata.namespace,
        &g.metadata.name,
    )
}

fn group_content_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::VolumeGroupSnapshotContent, "", name)
}

/// The group a member snapshot belongs to: its VolumeGroupSnapshot owner.
pub(super) fn group_of(s: &VolumeSnapshot) -> Option<&str> {
    s.metadata
        .owner_references
        .iter()
        .find(|o| o.kind == "VolumeGroupSnapshot" && o.api_version == GROUP_SNAPSHOT_API_VERSION)
        .map(|o| o.name.as_str())
}

/// The content's ref names this very group (IsVolumeGroupSnapshotRefSet).
fn refers_to_group(c: &VolumeGroupSnapshotContent, g: &VolumeGroupSnapshot) -> bool {
    let r = &c.spec.volume_group_snapshot_ref;
    r.name == g.metadata.name && r.namespace == g.metadata.namespace && r.uid == g.metadata.uid
}

impl SnapshotReconciler {
    fn group_content(&self, cx: &Cx<Self>, name: &str) -> Option<VolumeGroupSnapshotContent> {
        match cx.cache().find(Kind::VolumeGroupSnapshotContent, "", name) {
            Some(Object::GroupContent(c)) => Some(c.clone()),
            _ => None,
        }
    }

    /// What a change of a group kind (or of a claim a group may pick, or a
    /// member) may move on.
    pub(super) fn mark_group(&mut self, cx: &mut Cx<Self>, o: &Object) -> Vec<ObjectKey> {
        let groups = |ns: Option<&str>| -> Vec<ObjectKey> {
            cx.cache()
                .of_kind(Kind::VolumeGroupSnapshot)
                .filter(|g| ns.is_none_or(|ns| g.meta().namespace == ns))
                .map(Object::key)
                .collect()
        };
        match o {
            Object::GroupSnapshot(g) => {
                // Members wait for their group to go.
                let mut marked = vec![o.key()];
                marked.extend(
                    self.snapshots_of(cx, &g.metadata.namespace)
                        .filter(|s| group_of(s) == Some(g.metadata.name.as_str()))
                        .map(snapshot_key),
                );
                marked
            }
            Object::GroupContent(c) => {
                let r = &c.spec.volume_group_snapshot_ref;
                vec![
                    o.key(),
                    ObjectKey::new(Kind::VolumeGroupSnapshot, &r.namespace, &r.name),
                ]
            }
            Object::GroupSnapshotClass(_) => groups(None),
            Object::Pvc(c) => groups(Some(&c.metadata.namespace)),
            Object::Snapshot(s) => match group_of(s) {
                Some(g) => vec![ObjectKey::new(
                    Kind::VolumeGroupSnapshot,
                    &s.metadata.namespace,
                    g,
                )],
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// upstream's syncGroupSnapshot.
    pub(super) fn sync_group(&mut self, cx: &mut Cx<Self>, g: &VolumeGroupSnapshot) {
        if g.metadata.deleting() {
            return self.sync_deleted_group(cx, g);
        }
        let source = &g.spec.source;
        if source.selector.is_some() == source.volume_group_snapshot_content_name.is_some() {
            let b = blocked(
                reason::GROUP_SNAPSHOT_VALIDATION_ERROR,
                "Exactly one of Selector and VolumeGroupSnapshotContentName should be specified",
            );
            return self.block(cx, g, b);
        }
        if !g.metadata.has_finalizer(FINALIZER_GROUP_SNAPSHOT_BOUND) {
            let mut next = g.clone();
            next.metadata.add_finalizer(FINALIZER_GROUP_SNAPSHOT_BOUND);
            return self.write(cx, ApiCall::Update(Object::GroupSnapshot(next)));
        }
        let result = if !g.ready() || g.bound_content().is_none() {
            self.sync_unready_group(cx, g)
        } else {
            self.sync_ready_group(cx, g)
        };
        if let Err(b) = result {
            self.block(cx, g, b);
        }
    }

    fn sync_ready_group(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
    ) -> Result<(), Blocked> {
        let name = g.bound_content().unwrap_or_default();
        let Some(c) = self.group_content(cx, name) else {
            return Err(blocked(
                reason::GROUP_SNAPSHOT_CONTENT_MISSING,
                "VolumeGroupSnapshotContent is missing",
            ));
        };
        if !refers_to_group(&c, g) {
            return Err(blocked(
                reason::GROUP_SNAPSHOT_MISBOUND,
                "VolumeGroupSnapshotContent is not bound to the VolumeGroupSnapshot correctly",
            ));
        }
        Ok(())
    }

    fn sync_unready_group(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
    ) -> Result<(), Blocked> {
        if let Some(name) = &g.spec.source.volume_group_snapshot_content_name {
            if let Bound::Follow(c) = self.bind_named(cx, g, name, self.group_content(cx, name))? {
                self.update_group_status(cx, g, &c);
            }
            return Ok(());
        }
        let name = group_content_name(&g.metadata.uid);
        let Some(c) = self.group_content(cx, &name) else {
            return self.create_group_content(cx, g);
        };
        self.check_made::<VolumeGroupSnapshot>(&name, &c, refers_to_group(&c, g))?;
        if self.make_members(cx, g, &c) {
            return Ok(());
        }
        self.update_group_status(cx, g, &c);
        Ok(())
    }

    /// The volumes a dynamic group cuts, as upstream's
    /// getVolumesFromVolumeGroupSnapshot checks them.
    fn group_volumes(
        &self,
        cx: &Cx<Self>,
        g: &VolumeGroupSnapshot,
    ) -> Result<Vec<PersistentVolume>, String> {
        let selector = g.spec.source.selector.clone().unwrap_or_default();
        let claims: Vec<&PersistentVolumeClaim> = cx
            .cache()
            .of_kind(Kind::PersistentVolumeClaim)
            .filter_map(Object::as_pvc)
            .filter(|c| c.metadata.namespace == g.metadata.namespace)
            .filter(|c| selector.matches(&c.metadata.labels))
            .collect();
        if claims.is_empty() {
            return Err(format!(
                "label selector {} for group snapshot not applied to any PVC",
                selector.describe()
            ));
        }
        let mut volumes = Vec::new();
        for claim in claims {
            if claim.phase() != PvcPhase::Bound {
                return Err(format!(
                    "the PVC {} is not yet bound to a PV, will not attempt to take a group snapshot",
                    claim.metadata.name
                ));
            }
            let pv = cx
                .cache()
                .find(Kind::PersistentVolume, "", claim.volume_name())
                .and_then(Object::as_pv)
                .filter(|pv| {
                    pv.spec
                        .claim_ref
                        .as_ref()
                        .is_some_and(|r| r.uid == claim.metadata.uid)
                })
                .ok_or("claim in dataSource not bound or invalid")?;
            volumes.push(pv.clone());
        }
        Ok(volumes)
    }

    /// The class a dynamic group uses: the one named, or the one default
    /// group class of its volumes' driver, written back to the group.
    fn group_class(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
        driver: &str,
    ) -> Result<Option<VolumeGroupSnapshotClass>, String> {
        let classes = cx
            .cache()
            .of_kind(Kind::VolumeGroupSnapshotClass)
            .filter_map(|o| match o {
                Object::GroupSnapshotClass(c) => Some(c.clone()),
                _ => None,
            });
        if let Some(name) = &g.spec.volume_group_snapshot_class_name {
            let mut classes = classes;
            return classes
                .find(|c| &c.metadata.name == name)
                .map(Some)
                .ok_or_else(|| {
                    format!(
                        "volumegroupsnapshotclass.groupsnapshot.storage.k8s.io {name:?} not found"
                    )
                });
        }
        let defaults: Vec<VolumeGroupSnapshotClass> = classes
            .filter(|c| {
                c.metadata.annotation(ANN_DEFAULT_GROUP_SNAPSHOT_CLASS) == Some("true")
                    && c.driver == driver
            })
            .collect();
        match defaults.len() {
            0 => Err("cannot find default group snapshot class".into()),
            1 => {
                let mut next = g.clone();
                next.spec.volume_group_snapshot_class_name =
                    Some(defaults[0].metadata.name.clone());
                self.write(cx, ApiCall::Update(Object::GroupSnapshot(next)));
                Ok(None)
            }
            n => Err(format!("{n} default snapshot classes were found")),
        }
    }

    /// upstream's createGroupSnapshotContent.
    fn create_group_content(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
    ) -> Result<(), Blocked> {
        let key = format!("{}/{}", g.metadata.namespace, g.metadata.name);
        let failed = |why: String| {
            blocked(
                reason::GROUP_SNAPSHOT_CONTENT_CREATION_FAILED,
                format!("failed to create group snapshot content with error {why}"),
            )
        };
        let volumes = self.group_volumes(cx, g).map_err(failed)?;
        let Some(driver) = volumes[0].spec.csi.as_ref().map(|c| c.driver.clone()) else {
            return Err(failed(format!(
                "snapshotting non-CSI volumes is not supported, group snapshot:{key}"
            )));
        };
        let Some(class) = self.group_class(cx, g, &driver).map_err(failed)? else {
            return Ok(());
        };
        let mut handles = Vec::new();
        for pv in &volumes {
            let Some(csi) = &pv.spec.csi else {
                return Err(blocked(
                    reason::CREATE_GROUP_SNAPSHOT_CONTENT_FAILED,
                    format!("Cannot snapshot a non-CSI volume: {}", pv.metadata.name),
                ));
            };
            if csi.driver != class.driver {
                return Err(blocked(
                    reason::CREATE_GROUP_SNAPSHOT_CONTENT_FAILED,
                    format!(
                        "Volume CSI driver ({}) mismatch with VolumeGroupSnapshotClass ({}) {key}: {}",
                        csi.driver, class.driver, pv.metadata.name
                    ),
                ));
            }
            handles.push(csi.volume_handle.clone());
        }
        let content_name = group_content_name(&g.metadata.uid);
        let tokens = crate::control::secrets::SnapshotTokens {
            kind: "volumegroupsnapshot",
            content: &content_name,
            snapshot: Some((&g.metadata.namespace, &g.metadata.name)),
        };
        let mut c = VolumeGroupSnapshotContent::new(&content_name);
        crate::snapshot::name_deletion_secret(
            &mut c.metadata,
            &crate::control::secrets::GROUP_SNAPSHOTTER,
            &class.parameters,
            tokens,
            (
                crate::model::names::ANN_GROUP_DELETION_SECRET_NAME,
                crate::model::names::ANN_GROUP_DELETION_SECRET_NAMESPACE,
            ),
        )
        .map_err(failed)?;
        c.spec = VolumeGroupSnapshotContentSpec {
            volume_group_snapshot_ref: ObjectReference {
                kind: "VolumeGroupSnapshot".into(),
                api_version: GROUP_SNAPSHOT_API_VERSION.into(),
                namespace: g.metadata.namespace.clone(),
                name: g.metadata.name.clone(),
                uid: g.metadata.uid.clone(),
                ..Default::default()
            },
            deletion_policy: class.deletion_policy.clone(),
            driver: class.driver.clone(),
            volume_group_snapshot_class_name: Some(class.metadata.name.clone()),
            source: VolumeGroupSnapshotContentSource {
                volume_handles: handles,
                group_snapshot_handles: None,
            },
        };
        self.write(cx, ApiCall::Create(Object::GroupContent(c)));
        self.group_event(
            cx,
            g,
            true,
            reason::CREATING_GROUP_SNAPSHOT,
            format!("Waiting for a group snapshot {key} to be created by the CSI driver."),
        );
        Ok(())
    }

    /// The next step of making the members of a cut group (one write):
    /// true when one was issued.
    fn make_members(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
        c: &VolumeGroupSnapshotContent,
    ) -> bool {
        let Some(status) = c.status.as_ref() else {
            return false;
        };
        let Some(handle) = status.volume_group_snapshot_handle.clone() else {
            return false;
        };
        for info in &status.volume_snapshot_info_list {
            if let Some(call) = self.member_step(cx, g, c, &handle, info) {
                self.write(cx, call);
                return true;
            }
        }
        false
    }

    /// What the member cut from `info.volume_handle` still needs.
    fn member_step(
        &self,
        cx: &Cx<Self>,
        g: &VolumeGroupSnapshot,
        c: &VolumeGroupSnapshotContent,
        group_handle: &str,
        info: &VolumeSnapshotInfo,
    ) -> Option<ApiCall> {
        let ns = &g.metadata.namespace;
        let (snapshot_name, content_name) =
            group_member_names(&g.metadata.uid, &info.volume_handle);
        let pv = cx
            .cache()
            .of_kind(Kind::PersistentVolume)
            .filter_map(Object::as_pv)
            .find(|pv| {
                pv.spec.csi.as_ref().is_some_and(|s| {
                    s.driver == c.spec.driver && s.volume_handle == info.volume_handle
                })
            });
        let Some(content) = self.content(cx, &content_name) else {
            let mut m = VolumeSnapshotContent::new(&content_name);
            m.metadata
                .annotations
                .insert(ANN_GROUP_SNAPSHOT_HANDLE.into(), group_handle.into());
            m.spec = VolumeSnapshotContentSpec {
                volume_snapshot_ref: ObjectReference {
                    kind: "VolumeSnapshot".into(),
                    namespace: ns.clone(),
                    name: snapshot_name,
                    ..Default::default()
                },
                deletion_policy: c.spec.deletion_policy.clone(),
                driver: c.spec.driver.clone(),
                volume_snapshot_class_name: None,
                source: VolumeSnapshotContentSource {
                    volume_handle: Some(info.volume_handle.clone()),
                    snapshot_handle: None,
                },
                source_volume_mode: pv.and_then(|pv| pv.spec.volume_mode.as_ref()).map(
                    |m| match m {
                        VolumeMode::Block => "Block".to_string(),
                        _ => "Filesystem".to_string(),
                    },
                ),
            };
            return Some(ApiCall::Create(Object::Content(m)));
        };
        let snapshot = self
            .snapshots_of(cx, ns)
            .find(|s| s.metadata.name == snapshot_name)
            .cloned();
        let Some(snapshot) = snapshot else {
            let claim = pv
                .and_then(|pv| pv.spec.claim_ref.as_ref())
                .map(|r| r.name.clone())
                .unwrap_or_default();
            let mut s = VolumeSnapshot::of_claim(ns, &snapshot_name, &claim, "");
            s.spec.volume_snapshot_class_name = None;
            s.metadata.owner_references.push(OwnerReference {
                api_version: GROUP_SNAPSHOT_API_VERSION.into(),
                kind: "VolumeGroupSnapshot".into(),
                name: g.metadata.name.clone(),
                controller: None,
                uid: g.metadata.uid.clone(),
            });
            s.metadata.add_finalizer(FINALIZER_SNAPSHOT_IN_GROUP);
            return Some(ApiCall::Create(Object::Snapshot(s)));
        };
        if content.spec.volume_snapshot_ref.uid.is_empty() {
            let mut next = content;
            next.spec.volume_snapshot_ref.uid = snapshot.metadata.uid.clone();
            return Some(ApiCall::Update(Object::Content(next)));
        }
        if snapshot.bound_content().is_none() {
            let mut next = snapshot;
            let status = next.status.get_or_insert_with(Default::default);
            status.bound_volume_snapshot_content_name = Some(content_name);
            status.volume_group_snapshot_name = Some(g.metadata.name.clone());
            return Some(ApiCall::UpdateStatus(Object::Snapshot(next)));
        }
        if content
            .status
            .as_ref()
            .is_none_or(|s| s.snapshot_handle.is_none())
        {
            let mut next = content;
            next.status = Some(VolumeSnapshotContentStatus {
                snapshot_handle: Some(info.snapshot_handle.clone()),
                creation_time: info.creation_time,
                restore_size: info.restore_size,
                ready_to_use: info.ready_to_use,
                error: None,
                volume_group_snapshot_handle: Some(group_handle.into()),
            });
            return Some(ApiCall::UpdateStatus(Object::Content(next)));
        }
        None
    }

    /// upstream's updateGroupSnapshotStatus: the content's status copied up.
    fn update_group_status(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
        c: &VolumeGroupSnapshotContent,
    ) {
        let was = g.status.clone();
        let mut status = was.clone().unwrap_or_default();
        let cs = c.status.clone().unwrap_or_default();
        let ready = cs.ready_to_use.unwrap_or(false);
        if status.bound_volume_group_snapshot_content_name.is_none() {
            status.bound_volume_group_snapshot_content_name = Some(c.metadata.name.clone());
        }
        if status.creation_time.is_none() {
            status.creation_time = cs.creation_time.clone();
        }
        if status.ready_to_use != Some(ready) {
            status.ready_to_use = Some(ready);
            if ready {
                status.error = None;
            }
        }
        if cs.error.is_some() && status.error != cs.error {
            status.error = cs.error.clone();
        }
        if was.as_ref() == Some(&status) {
            return;
        }
        let key = format!("{}/{}", g.metadata.namespace, g.metadata.name);
        let created = |st: Option<&VolumeGroupSnapshotStatus>| {
            st.is_some_and(|st| st.creation_time.is_some())
        };
        if !created(was.as_ref()) && created(Some(&status)) {
            let msg = format!("GroupSnapshot {key} was successfully created by the CSI driver.");
            self.group_event(cx, g, true, reason::GROUP_SNAPSHOT_CREATED, msg);
        }
        if !g.ready() && ready {
            let msg = format!("GroupSnapshot {key} is ready to use.");
            self.group_event(cx, g, true, reason::GROUP_SNAPSHOT_READY, msg);
        }
        let mut next = g.clone();
        next.status = Some(status);
        self.write(cx, ApiCall::UpdateStatus(Object::GroupSnapshot(next)));
    }

    /// A group that cannot go on: the error in its status (once per
    /// message) with a warning.
    fn group_event(
        &mut self,
        cx: &mut Cx<Self>,
        g: &VolumeGroupSnapshot,
        normal: bool,
        reason: &str,
        message: String,
    ) {
        let key = group_key(g);
        let e = if normal {
            Event::normal(key, reason, message)
        } else {
            Event::warning(key, reason, message)
        };
        cx.event(e);
    }

    /// upstream's processGroupSnapshotWithDeletionTimestamp.
    fn sync_deleted_group(&mut self, cx: &mut Cx<Self>, g: &VolumeGroupSnapshot) {
        if !g.metadata.has_finalizer(FINALIZER_GROUP_SNAPSHOT_BOUND) {
            return;
        }
        let name = match g.bound_content() {
            Some(n) => n.to_string(),
            None if g.spec.source.volume_group_snapshot_content_name.is_none() => {
                group_content_name(&g.metadata.uid)
            }
            None => String::new(),
        };
        let content = self
            .group_content(cx, &name)
            .filter(|c| refers_to_group(c, g));
        let members: Vec<VolumeSnapshot> = self
            .snapshots_of(cx, &g.metadata.namespace)
            .filter(|s| group_of(s) == Some(g.metadata.name.as_str()))
            .cloned()
            .collect();
        if let Some(s) = members.iter().find(|s| self.restoring(cx, s)) {
            let msg = format!(
                "Snapshot {}/{} belonging to VolumeGroupSnapshot {}/{} is being used to restore a PVC",
                s.metadata.namespace, s.metadata.name, g.metadata.namespace, g.metadata.name
            );
            return self.group_event(cx, g, false, reason::SNAPSHOT_DELETE_PENDING, msg);
        }
        let delete_content = content
            .as_ref()
            .is_some_and(|c| c.spec.deletion_policy == DeletionPolicy::Delete);
        if let Some(c) = &content {
            // As for a single content: it keeps its finalizer until
            // csi-snapshotter has deleted the group on the storage.
            let unguarded = delete_content
                && !c.metadata.deleting()
                && !c.metadata.has_finalizer(FINALIZER_GROUP_CONTENT_BOUND);
            if !c.metadata.has_annotation(ANN_GROUP_BEING_DELETED) || unguarded {
                let mut next = c.clone();
                next.metadata
                    .annotations
                    .insert(ANN_GROUP_BEING_DELETED.into(), "yes".into());
                if unguarded {
                    next.metadata.add_finalizer(FINALIZER_GROUP_CONTENT_BOUND);
                }
                return self.write(cx, ApiCall::Update(Object::GroupContent(next)));
            }
        }
        if let Some(s) = members.iter().find(|s| !s.metadata.deleting()) {
            return self.write(cx, ApiCall::Delete(snapshot_key(s)));
        }
        // The members (and their contents) go first, so that none is
        // ever shown ready once its storage snapshot is gone; each one's
        // going marks this group again.
        if !members.is_empty() {
            return;
        }
        if let Some(c) = &content {
            if let Some(call) = self.orphan_member(cx, g, c) {
                return self.write(cx, call);
            }
            if delete_content && !c.metadata.deleting() {
                return self.write(cx, ApiCall::Delete(group_content_key(&c.metadata.name)));
            }
        }
        // The bound finalizer stays until the content is gone.
        if !(content.is_some() && delete_content) {
            let mut next = g.clone();
            next.metadata
                .remove_finalizer(FINALIZER_GROUP_SNAPSHOT_BOUND);
            self.write(cx, ApiCall::Update(Object::GroupSnapshot(next)));
        }
    }

    /// A member content of policy Delete left without its snapshot (the
    /// group was deleted while its members were being made): marked for
    /// csi-snapshotter, then deleted. Its storage snapshot goes with the
    /// group.
    fn orphan_member(
        &self,
        cx: &Cx<Self>,
        g: &VolumeGroupSnapshot,
        c: &VolumeGroupSnapshotContent,
    ) -> Option<ApiCall> {
        let infos = c.status.iter().flat_map(|s| &s.volume_snapshot_info_list);
        for info in infos {
            let (snapshot, name) = group_member_names(&g.metadata.uid, &info.volume_handle);
            let Some(m) = self.content(cx, &name) else {
                continue;
            };
            let alone = self
                .snapshots_of(cx, &g.metadata.namespace)
                .all(|s| s.metadata.name != snapshot);
            if !alone || m.metadata.deleting() || m.spec.deletion_policy != DeletionPolicy::Delete {
                continue;
            }
            if !m.metadata.has_annotation(ANN_SNAPSHOT_BEING_DELETED) {
                let mut next = m;
                next.metadata
                    .annotations
                    .insert(ANN_SNAPSHOT_BEING_DELETED.into(), "yes".into());
                return Some(ApiCall::Update(Object::Content(next)));
            }
            return Some(ApiCall::Delete(content_key(&name)));
        }
        None
    }

    /// upstream's syncGroupSnapshotContent: the bound finalizer while bound
    /// and not being deleted.
    pub(super) fn sync_group_content(&mut self, cx: &mut Cx<Self>, c: &VolumeGroupSnapshotContent) {
        let source = &c.spec.source;
        if source.group_snapshot_handles.is_some() != source.volume_handles.is_empty() {
            cx.event(Event::warning(
                group_content_key(&c.metadata.name),
                "GroupContentValidationError",
                "Exactly one of GroupSnapshotHandles and VolumeHandles should be specified",
            ));
            return;
        }
        if c.spec.volume_group_snapshot_ref.uid.is_empty() {
            return;
        }
        if !c.metadata.deleting() && !c.metadata.has_finalizer(FINALIZER_GROUP_CONTENT_BOUND) {
            let mut next = c.clone();
            next.metadata.add_finalizer(FINALIZER_GROUP_CONTENT_BOUND);
            self.write(cx, ApiCall::Update(Object::GroupContent(next)));
        }
    }
}
