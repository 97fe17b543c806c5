//! A claim's data source (B5.6): the claim a clone copies and the snapshot
//! a restore reads are checked as upstream's getPVCSource and
//! getSnapshotSource check them, and carry external-provisioner's
//! finalizer while CreateVolume may still read them, so neither can vanish
//! under a copy.
//!
//! The finalizer is added before the first CreateVolume, and removed once
//! no claim may still read the source: no Pending claim names it whose PV
//! this provisioner has not yet made, and no CreateVolume from it is still
//! being retried (even for a claim since deleted, B4.5). Claims of other
//! provisioners count while Pending, as upstream's sweep counts them: they
//! share the finalizer's name.

use super::*;
use crate::model::names::{FINALIZER_CLONING_PROTECTION, FINALIZER_PROVISIONER_SNAPSHOT_SOURCE};

/// The finalizer external-provisioner puts on a source of this kind.
fn protection(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::PersistentVolumeClaim => Some(FINALIZER_CLONING_PROTECTION),
        Kind::VolumeSnapshot => Some(FINALIZER_PROVISIONER_SNAPSHOT_SOURCE),
        _ => None,
    }
}

/// The object a claim copies: a claim of the core group or a
/// VolumeSnapshot, in the claim's namespace.
pub(super) fn source_key(claim: &PersistentVolumeClaim) -> Option<ObjectKey> {
    let ds = claim.data_source()?;
    let group = ds.api_group.as_deref().unwrap_or("");
    let kind = match ds.kind.as_str() {
        "PersistentVolumeClaim" if group.is_empty() => Kind::PersistentVolumeClaim,
        "VolumeSnapshot" => Kind::VolumeSnapshot,
        _ => return None,
    };
    Some(ObjectKey::new(kind, &claim.metadata.namespace, &ds.name))
}

/// Upstream's words for a source volume that cannot be cloned.
const NOT_BOUND: &str = "claim in dataSource not bound or invalid";

impl ProvisionerReconciler {
    /// The volume a clone copies, as upstream's getPVCSource checks it: a
    /// Bound claim not being deleted, no bigger than the clone, bound both
    /// ways to a Bound CSI volume of the class's driver, of the same
    /// volume mode.
    pub(super) fn clone_source(
        &self,
        cx: &Cx<Self>,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        name: &str,
    ) -> Result<driver::ContentSource, String> {
        let ns = &claim.metadata.namespace;
        let Some(src) = self.claim(cx, &ObjectKey::new(Kind::PersistentVolumeClaim, ns, name))
        else {
            return Err(format!(
                "error getting PVC {name} (namespace {ns:?}) from api server: persistentvolumeclaims {name:?} not found"
            ));
        };
        if src.phase() != PvcPhase::Bound {
            return Err(format!(
                "the PVC DataSource {name} must have a status of Bound.  Got {:?}",
                src.phase()
            ));
        }
        if src.metadata.deleting() {
            return Err(format!(
                "the PVC DataSource {name} is currently being deleted"
            ));
        }
        let asked = claim.request().map_or(0, |q| q.bytes());
        let have = src.request().map_or(0, |q| q.bytes());
        if asked < have {
            return Err(format!(
                "error, new PVC request must be greater than or equal in size to the specified PVC data source, requested {asked} but source is {have}"
            ));
        }
        if src.volume_name().is_empty() {
            return Err(format!("volume name is empty in source PVC {name}"));
        }
        let v = self.volume(cx, src.volume_name()).ok_or(NOT_BOUND)?;
        let csi = v
            .spec
            .csi
            .as_ref()
            .filter(|c| c.driver == class.provisioner)
            .ok_or(NOT_BOUND)?;
        let back = v.spec.claim_ref.as_ref().is_some_and(|r| {
            r.uid == src.metadata.uid && r.namespace == *ns && r.name == src.metadata.name
        });
        if !back || v.phase() != PvPhase::Bound {
            return Err(NOT_BOUND.into());
        }
        let block = |m: Option<&VolumeMode>| m == Some(&VolumeMode::Block);
        match (block(claim.spec.volume_mode.as_ref()), block(v.spec.volume_mode.as_ref())) {
            (false, true) => Err("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Block, but new PVC requested Filesystem".into()),
            (true, false) => Err("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Filesystem, but new PVC requested Block".into()),
            _ => Ok(driver::ContentSource::Volume(csi.volume_handle.clone())),
        }
    }

    /// Before the first CreateVolume of `claim`: its source carries the
    /// finalizer. True when a write was issued; the claim is synced again
    /// when it completes.
    pub(super) fn protect_source(
        &mut self,
        cx: &mut Cx<Self>,
        claim: &PersistentVolumeClaim,
    ) -> bool {
        let Some(src) = source_key(claim) else {
            return false;
        };
        let Some(finalizer) = protection(src.kind) else {
            return false;
        };
        let Some(mut next) = cx.cache().get(&src).cloned() else {
            return false;
        };
        if !next.meta_mut().add_finalizer(finalizer) {
            return false;
        }
        let call = Call::Protect {
            rv: next.meta().resource_version.clone(),
            uid: claim.metadata.uid.clone(),
            claim: ObjectKey::new(
                Kind::PersistentVolumeClaim,
                &claim.metadata.namespace,
                &claim.metadata.name,
            ),
        };
        self.api(cx, call, ApiCall::Update(next));
        true
    }

    /// The protected source at `key` loses the finalizer once nothing may
    /// still read it.
    pub(super) fn release_source(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        let Some(finalizer) = protection(key.kind) else {
            return;
        };
        let Some(obj) = cx.cache().get(key) else {
            return;
        };
        let uid = obj.meta().uid.clone();
        if !obj.meta().has_finalizer(finalizer)
            || cx.busy(&uid)
            || cx.waiting(&uid)
            || self.source_in_use(cx, key)
        {
            return;
        }
        let mut next = obj.clone();
        next.meta_mut().remove_finalizer(finalizer);
        let call = Call::Release {
            uid,
            source: key.clone(),
            rv: obj.meta().resource_version.clone(),
        };
        self.api(cx, call, ApiCall::Update(next));
    }

    /// A CreateVolume from `src` may still run: one is being retried, or a
    /// Pending claim names it and has no PV from this provisioner yet.
    fn source_in_use(&self, cx: &Cx<Self>, src: &ObjectKey) -> bool {
        if self
            .provisioning
            .values()
            .any(|p| p.source.as_ref() == Some(src))
        {
            return true;
        }
        cx.cache()
            .of_kind(Kind::PersistentVolumeClaim)
            .filter_map(|o| match o {
                Object::Pvc(c) => Some(c),
                _ => None,
            })
            .filter(|c| c.phase() == PvcPhase::Pending)
            .filter(|c| source_key(c).as_ref() == Some(src))
            .any(|c| {
                !self.annotated_for_us(c)
                    || self
                        .volume(cx, &self.config.volume_name(&c.metadata.uid))
                        .is_none()
            })
    }

    /// The finalizer write for `claim`'s source completed.
    pub(super) fn protected(
        &mut self,
        cx: &mut Cx<Self>,
        uid: String,
        claim: ObjectKey,
        rv: &str,
        result: ApiResult,
    ) {
        if let ApiResult::Failed(msg) = &result {
            self.event(
                cx,
                Event::warning(
                    claim.clone(),
                    reason::PROVISIONING_FAILED,
                    format!("failed to protect the data source of the claim from deletion: {msg}"),
                ),
            );
        }
        let changed_since = || {
            let source = self.claim(cx, &claim).and_then(|c| source_key(&c));
            source.is_some_and(|s| cx.cache().newer_than(&s, rv))
        };
        // Written, or gone (the next sync says so), or changed meanwhile
        // and the change already here: looked at again now. Otherwise the
        // retry waits for its backoff, or for news of the claim.
        if matches!(result, ApiResult::Ok(_) | ApiResult::NotFound) || changed_since() {
            cx.mark(claim);
            return;
        }
        self.retry.insert(uid.clone(), claim);
        cx.fail(uid);
    }

    /// The finalizer removal from `source` completed.
    pub(super) fn released(
        &mut self,
        cx: &mut Cx<Self>,
        uid: String,
        source: ObjectKey,
        rv: &str,
        result: ApiResult,
    ) {
        match result {
            ApiResult::Ok(_) | ApiResult::NotFound => {
                cx.succeed(&uid);
                self.retry.remove(&uid);
            }
            // Changed meanwhile, and the change is already here.
            _ if cx.cache().newer_than(&source, rv) => {
                cx.mark(source);
            }
            _ => {
                self.retry.insert(uid.clone(), source);
                cx.fail(uid);
            }
        }
    }
}
