//! What attach/detach reconciles, and what each change dirties.
//!
//! A pass is about one volume (its desired attachments, its
//! VolumeAttachments, their detach, attach and ControllerPublish, the PV's
//! attacher finalizer) or one node (`status.volumesAttached`). A change
//! dirties only the volumes and nodes it can affect: a pod its claims'
//! volumes and its node; a claim its volume (the one it was bound to
//! before too); a VolumeAttachment its volume and node; a Node or CSINode
//! the volumes attached there. The CSIDriver (attachRequired) and the
//! periodic resync dirty everything.

use super::AttachReconciler;
use crate::control::Cx;
use crate::control::Watch;
use crate::model::*;

/// The key of one attach/detach pass.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttachKey {
    /// A PersistentVolume, by name.
    Volume(String),
    /// A Node, by name.
    Node(String),
}

impl AttachReconciler {
    /// A watch event: dirty what the object's old and new versions can
    /// affect, then bring it into the cache and the index of users.
    pub(super) fn observe_watch(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let (o, deleted) = match &watch {
            Watch::Applied(o) => (o.clone(), false),
            Watch::Deleted(o) => (o.clone(), true),
        };
        let old = cx.cache().get_shared(&o.key());
        if let Some(old) = &old {
            self.mark_object(cx, old);
        }
        self.mark_object(cx, &o);
        let changed = match watch {
            Watch::Applied(o) => {
                // Only the live incarnation counts as the one created; a
                // late event about one since deleted changes nothing.
                let name = o.meta().name.clone();
                let applied = cx.cache_mut().apply(o);
                if applied {
                    self.creating.remove(&name);
                }
                applied
            }
            Watch::Deleted(o) => {
                // A late delete of an object since created again is stale.
                let gone = cx.cache_mut().delete(&o).is_some();
                if gone && o.kind() == Kind::VolumeAttachment {
                    self.detaching.remove(&o.meta().name);
                    // Secret data read for it goes with it.
                    self.credentials.remove(&o.meta().name);
                }
                gone
            }
        };
        if changed {
            if let Some(old) = &old {
                self.index(old, false);
            }
            if !deleted {
                self.index(&o, true);
            }
        }
    }

    /// Keeps the index of users in step with the cache.
    pub(super) fn index(&mut self, o: &Object, present: bool) {
        self.users.index(o, present);
    }

    /// Dirties what a version of `o` can affect.
    pub(super) fn mark_object(&mut self, cx: &mut Cx<Self>, o: &Object) {
        let keys = self.keys_of(cx, o);
        cx.mark_all(keys);
    }

    /// What a version of `o` can affect.
    pub(super) fn keys_of(&self, cx: &Cx<Self>, o: &Object) -> Vec<AttachKey> {
        let mut keys = Vec::new();
        match o {
            Object::Pod(p) => {
                for claim in p.claims() {
                    let volume = cx
                        .cache()
                        .find(Kind::PersistentVolumeClaim, &p.metadata.namespace, claim)
                        .and_then(Object::as_pvc)
                        .map(|c| c.volume_name().to_string());
                    keys.extend(volume.filter(|v| !v.is_empty()).map(AttachKey::Volume));
                }
                keys.extend(p.node().map(|n| AttachKey::Node(n.to_string())));
            }
            // A volume's node statuses follow what is desired of it.
            Object::Pvc(c) if !c.volume_name().is_empty() => {
                keys.push(AttachKey::Volume(c.volume_name().to_string()));
                keys.extend(self.nodes_of(cx, c.volume_name()));
            }
            Object::Pv(pv) => {
                keys.push(AttachKey::Volume(pv.name().to_string()));
                keys.extend(self.nodes_of(cx, pv.name()));
            }
            Object::Va(va) => {
                keys.push(AttachKey::Volume(va.pv_name().to_string()));
                keys.push(AttachKey::Node(va.spec.node_name.clone()));
            }
            Object::Node(n) => keys.extend(self.node_and_volumes(cx, &n.metadata.name)),
            Object::CsiNode(n) => keys.extend(self.node_and_volumes(cx, &n.metadata.name)),
            Object::CsiDriver(_) => keys.extend(self.everything(cx)),
            _ => {}
        }
        keys
    }

    /// A node and the volumes attached (or being attached) there.
    fn node_and_volumes(&self, cx: &Cx<Self>, node: &str) -> Vec<AttachKey> {
        let mut keys = vec![AttachKey::Node(node.to_string())];
        keys.extend(
            cx.cache()
                .of_kind(Kind::VolumeAttachment)
                .filter_map(Object::as_va)
                .filter(|va| va.spec.node_name == node)
                .map(|va| AttachKey::Volume(va.pv_name().to_string())),
        );
        keys
    }

    /// The nodes a volume has VolumeAttachments on.
    fn nodes_of(&self, cx: &Cx<Self>, volume: &str) -> Vec<AttachKey> {
        cx.cache()
            .of_kind(Kind::VolumeAttachment)
            .filter_map(Object::as_va)
            .filter(|va| va.pv_name() == volume)
            .map(|va| AttachKey::Node(va.spec.node_name.clone()))
            .collect()
    }

    /// What an API call's object can affect (for a delete, the object as
    /// cached): looked at again when the call completes, and when its
    /// retry comes after a failure (a create that failed is not cached).
    pub(super) fn keys_of_call(
        &self,
        cx: &Cx<Self>,
        call: &crate::control::ApiCall,
    ) -> Vec<AttachKey> {
        use crate::control::ApiCall;
        match call {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => {
                self.keys_of(cx, o)
            }
            ApiCall::Delete(k) | ApiCall::Get(k) | ApiCall::RemoveFinalizer { key: k, .. } => cx
                .cache()
                .get_shared(k)
                .map(|o| self.keys_of(cx, &o))
                .unwrap_or_default(),
            ApiCall::List { .. } => Vec::new(),
        }
    }

    /// Dirties what a name held busy or backed off names: a
    /// VolumeAttachment, a Node or a PersistentVolume.
    pub(super) fn mark_name(&mut self, cx: &mut Cx<Self>, name: &str) {
        for kind in [Kind::VolumeAttachment, Kind::Node, Kind::PersistentVolume] {
            if let Some(o) = cx.cache().get_shared(&ObjectKey::new(kind, "", name)) {
                self.mark_object(cx, &o);
            }
        }
    }

    /// Every volume and node known (attachRequired changed, a resync).
    pub(super) fn mark_everything(&mut self, cx: &mut Cx<Self>) {
        let keys = self.everything(cx);
        cx.mark_all(keys);
    }

    fn everything(&self, cx: &Cx<Self>) -> Vec<AttachKey> {
        let mut keys: Vec<AttachKey> = Vec::new();
        for o in cx.cache().values() {
            match o {
                Object::Pv(pv) => keys.push(AttachKey::Volume(pv.name().to_string())),
                Object::Va(va) => {
                    keys.push(AttachKey::Volume(va.pv_name().to_string()));
                    keys.push(AttachKey::Node(va.spec.node_name.clone()));
                }
                Object::Node(n) => keys.push(AttachKey::Node(n.metadata.name.clone())),
                Object::Pod(p) => keys.extend(p.node().map(|n| AttachKey::Node(n.to_string()))),
                _ => {}
            }
        }
        keys
    }
}
