//! What the volume manager reconciles, and what each change dirties.
//!
//! A pass is about one volume (unpublish what no pod wants, stage, publish,
//! expand, unstage) or about the node (`status.volumesInUse`). A change
//! dirties only what it can affect: a pod the volumes of its claims and of
//! its recorded mounts; a claim the volume it is (or was) bound to; a
//! PersistentVolume or VolumeAttachment its volume; a node call the volume
//! it was about. Each of these dirties the node pass too, as what is in use
//! may follow. The Node object (volumesInUse, volumesAttached), the
//! CSIDriver (attachRequired, podInfoOnMount), a reconstruction and the
//! resync dirty everything the node has or wants.

use super::{Call, KubeletReconciler};
use crate::control::{ApiResult, Cx, Watch};
use crate::model::*;

/// The key of one pass of the volume manager.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KubeletKey {
    /// `status.volumesInUse` of the node (first: volumes are reported in
    /// use before they are waited for).
    Node,
    /// A PersistentVolume, by name.
    Volume(String),
}

impl KubeletReconciler {
    /// A watch event: dirty what the object's old and new versions can
    /// affect, then bring it into the cache and the index of users.
    pub(super) fn observe_watch(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let o = match &watch {
            Watch::Applied(o) | Watch::Deleted(o) => o.clone(),
        };
        if !self.relevant(&o) {
            return;
        }
        let old = cx.cache().get_shared(&o.key());
        if let Some(old) = &old {
            self.mark_object(cx, old);
        }
        self.mark_object(cx, &o);
        let (changed, present) = match watch {
            Watch::Applied(o) => (cx.cache_mut().apply(o), true),
            Watch::Deleted(o) => (cx.cache_mut().delete(&o).is_some(), false),
        };
        if changed {
            self.reindex(old.as_deref(), present.then_some(&*o));
        }
    }

    /// An API write completed: its object enters the cache as a watch
    /// event would bring it, and what it holds busy is looked at again.
    pub(super) fn api_completed(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        let Call::Api { key, object } = call else {
            return;
        };
        let old = cx.cache().get_shared(&object);
        if let Some(old) = &old {
            self.mark_object(cx, old);
        }
        match result {
            ApiResult::Ok(Some(o)) => {
                self.mark_object(cx, &o);
                if cx.cache_mut().apply(o.clone()) {
                    self.reindex(old.as_deref(), Some(&*o));
                }
            }
            ApiResult::Ok(None) => {}
            _ => {
                cx.fail(key);
            }
        }
    }

    fn reindex(&mut self, old: Option<&Object>, new: Option<&Object>) {
        if let Some(old) = old {
            self.users.index(old, false);
        }
        if let Some(new) = new {
            self.users.index(new, true);
        }
    }

    /// Dirties what a version of `o` can affect.
    pub(super) fn mark_object(&mut self, cx: &mut Cx<Self>, o: &Object) {
        match o {
            Object::Pod(p) => {
                for claim in p.claims() {
                    self.mark_claim(cx, &p.metadata.namespace, claim);
                }
                let uid = &p.metadata.uid;
                let mounted = self.actual.mounts.keys().filter(|(pod, _)| pod == uid);
                let volumes: Vec<KubeletKey> = mounted
                    .map(|(_, pv)| KubeletKey::Volume(pv.clone()))
                    .collect();
                cx.mark_all(volumes);
                cx.mark(KubeletKey::Node);
            }
            Object::Pvc(c) => self.mark_volume(cx, c.volume_name()),
            Object::Pv(pv) => self.mark_volume(cx, pv.name()),
            Object::Va(va) => self.mark_volume(cx, va.pv_name()),
            Object::Node(_) | Object::CsiDriver(_) => self.mark_everything(cx),
            _ => {}
        }
    }

    fn mark_claim(&mut self, cx: &mut Cx<Self>, namespace: &str, claim: &str) {
        let volume = cx
            .cache()
            .find(Kind::PersistentVolumeClaim, namespace, claim)
            .and_then(Object::as_pvc)
            .map(|c| c.volume_name().to_string());
        if let Some(volume) = volume {
            self.mark_volume(cx, &volume);
        }
    }

    /// Dirties the pass over `volume` (when named) and the node's.
    pub(super) fn mark_volume(&mut self, cx: &mut Cx<Self>, volume: &str) {
        if !volume.is_empty() {
            cx.mark(KubeletKey::Volume(volume.to_string()));
        }
        cx.mark(KubeletKey::Node);
    }

    /// Dirties what a name held busy or backed off names: the node's
    /// status, a claim being expanded, or a volume.
    pub(super) fn mark_name(&mut self, cx: &mut Cx<Self>, name: &str) {
        if name.starts_with("node:") {
            cx.mark(KubeletKey::Node);
        } else if name.starts_with("claim:") {
            self.mark_everything(cx);
        } else {
            self.mark_volume(cx, name);
        }
    }

    /// The node and every volume it has or its pods want.
    pub(super) fn mark_everything(&mut self, cx: &mut Cx<Self>) {
        let mut keys = vec![KubeletKey::Node];
        keys.extend(
            self.want(cx)
                .into_keys()
                .map(|(_, pv)| KubeletKey::Volume(pv)),
        );
        keys.extend(self.actual.devices.keys().cloned().map(KubeletKey::Volume));
        let mounted = self.actual.mounts.keys().map(|(_, pv)| pv.clone());
        keys.extend(mounted.map(KubeletKey::Volume));
        cx.mark_all(keys);
    }
}
