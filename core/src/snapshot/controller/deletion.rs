//! A VolumeSnapshot being deleted: its content marked, deleted when its
//! policy is Delete (only once it carries its finalizer), its finalizers
//! removed; held while a Pending claim restores from it.

use super::*;

impl SnapshotReconciler {
    /// upstream's processSnapshotWithDeletionTimestamp and
    /// checkandRemoveSnapshotFinalizersAndCheckandDeleteContent.
    pub(super) fn sync_deleted_snapshot(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot) {
        let holds = |f| s.metadata.has_finalizer(f);
        if !holds(FINALIZER_SNAPSHOT_AS_SOURCE)
            && !holds(FINALIZER_SNAPSHOT_BOUND)
            && !holds(FINALIZER_SNAPSHOT_IN_GROUP)
        {
            return;
        }
        // A member goes with its group (while the group is being deleted),
        // not alone.
        if let Some(group) = super::group::group_of(s)
            && cx
                .cache()
                .find(Kind::VolumeGroupSnapshot, &s.metadata.namespace, group)
                .is_some_and(|g| !g.meta().deleting())
        {
            let msg = format!(
                "deletion of the individual volume snapshot {}/{} is not allowed as it belongs to group snapshot {}/{group}. Deleting the group snapshot will trigger the deletion of all the individual volume snapshots that are part of the group.",
                s.metadata.namespace, s.metadata.name, s.metadata.namespace
            );
            return self.event(cx, s, false, reason::SNAPSHOT_DELETE_PENDING, msg);
        }
        let member = super::group::group_of(s).is_some();
        let name = match s.bound_content() {
            Some(n) => n.to_string(),
            // A member not yet bound: its content is named after it.
            None if member => s.metadata.name.replacen("snapshot-", "snapcontent-", 1),
            None if s.spec.source.persistent_volume_claim_name.is_some() => {
                snapshot_content_name(&s.metadata.uid)
            }
            None => String::new(),
        };
        let content = self.content(cx, &name).filter(|c| {
            let r = &c.spec.volume_snapshot_ref;
            refers_to(c, s)
                || (member
                    && r.uid.is_empty()
                    && r.name == s.metadata.name
                    && r.namespace == s.metadata.namespace)
        });
        if content.is_some() && self.restoring(cx, s) {
            // The restoring claim's next change looks again.
            self.event(
                cx,
                s,
                false,
                reason::SNAPSHOT_DELETE_PENDING,
                "Snapshot is being used to restore a PVC".into(),
            );
            return;
        }
        let delete_content = content
            .as_ref()
            .is_some_and(|c| c.spec.deletion_policy == DeletionPolicy::Delete);
        if let Some(c) = &content {
            // The content keeps its finalizer until csi-snapshotter has
            // deleted the storage snapshot: one deleted before its
            // finalizer was added would go at once and leak the snapshot
            // being cut (the simulator found this race).
            let unguarded = delete_content
                && !c.metadata.deleting()
                && !c.metadata.has_finalizer(FINALIZER_CONTENT_BOUND);
            let marked = c
                .metadata
                .annotations
                .contains_key(ANN_SNAPSHOT_BEING_DELETED);
            if !marked || unguarded {
                let mut next = c.clone();
                next.metadata
                    .annotations
                    .insert(ANN_SNAPSHOT_BEING_DELETED.into(), "yes".into());
                if unguarded {
                    next.metadata.add_finalizer(FINALIZER_CONTENT_BOUND);
                }
                return self.write(cx, ApiCall::Update(Object::Content(next)));
            }
            if delete_content && !c.metadata.deleting() {
                return self.write(cx, ApiCall::Delete(content_key(&c.metadata.name)));
            }
        }
        // The bound finalizer stays until the content is gone.
        let mut next = s.clone();
        next.metadata.remove_finalizer(FINALIZER_SNAPSHOT_AS_SOURCE);
        next.metadata.remove_finalizer(FINALIZER_SNAPSHOT_IN_GROUP);
        if !(content.is_some() && delete_content) {
            next.metadata.remove_finalizer(FINALIZER_SNAPSHOT_BOUND);
        }
        if next != *s {
            self.write(cx, ApiCall::Update(Object::Snapshot(next)));
        }
    }

    /// A Pending claim is being restored from this snapshot
    /// (isVolumeBeingCreatedFromSnapshot).
    pub(super) fn restoring(&self, cx: &Cx<Self>, s: &VolumeSnapshot) -> bool {
        cx.cache()
            .of_kind(Kind::PersistentVolumeClaim)
            .any(|o| match o {
                Object::Pvc(c) => {
                    c.metadata.namespace == s.metadata.namespace
                        && c.phase() == PvcPhase::Pending
                        && c.spec.data_source.as_ref().is_some_and(|d| {
                            d.kind == "VolumeSnapshot"
                                && d.api_group.as_deref() == Some("snapshot.storage.k8s.io")
                                && d.name == s.metadata.name
                        })
                }
                _ => false,
            })
    }
}
