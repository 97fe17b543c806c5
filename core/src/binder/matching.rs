//! Which volume a claim may take: the binder's choice of a match, and the
//! rules (A3) that say why a named volume does not fit a claim.

use crate::control::Cx;
use std::collections::BTreeMap;

use super::{BinderReconciler, bound_to_claim};
use crate::model::*;

impl BinderReconciler {
    /// The best volume for `claim`: a volume pre-bound to it wins at once
    /// (A3.4; still subject to capacity, volumeMode, volumeAttributesClassName
    /// and deletion, as upstream's FindMatchingVolume); otherwise, unless
    /// binding is delayed, the index's best match.
    pub(super) fn find_match(
        &self,
        cx: &Cx<Self>,
        claim: &PersistentVolumeClaim,
        delay: bool,
    ) -> Option<String> {
        let request = claim.request().map_or(0, |q| q.bytes());
        for name in self
            .index
            .claimed_by(&claim.metadata.namespace, &claim.metadata.name)
        {
            let Some(pv) = self.volume(cx, name) else {
                continue;
            };
            if bound_to_claim(&pv, claim)
                && pv.capacity().map_or(0, |q| q.bytes()) >= request
                && pv.volume_mode() == claim.volume_mode()
                && pv.attributes_class() == claim.attributes_class()
                && !pv.metadata.deleting()
            {
                return Some(name.to_string());
            }
        }
        if delay {
            return None;
        }
        if self.plant.is(crate::plant::Plant::BindClaimedVolume) {
            // Planted mistake: any big-enough volume of the class, claimed or not.
            let taken = cx
                .cache()
                .of_kind(Kind::PersistentVolume)
                .find_map(|o| match o {
                    Object::Pv(pv)
                        if pv.class() == claim.class()
                            && pv.capacity().map_or(0, |q| q.bytes()) >= request
                            && pv
                                .spec
                                .claim_ref
                                .as_ref()
                                .is_some_and(|r| r.name != claim.metadata.name) =>
                    {
                        Some(pv.name().to_string())
                    }
                    _ => None,
                });
            if taken.is_some() {
                return taken;
            }
        }
        self.index.best_unclaimed(claim)
    }
}

/// PV↔PVC binding is one-to-one: no volume is named by two Bound claims.
/// A safety invariant over the objects, holding after every step.
pub fn check_one_to_one<'a>(
    objects: impl IntoIterator<Item = &'a Object>,
) -> Result<(), crate::machine::Broken> {
    let mut holder: BTreeMap<&str, String> = BTreeMap::new();
    for o in objects {
        if let Object::Pvc(c) = o
            && c.phase() == PvcPhase::Bound
            && let Some(other) = holder.insert(c.volume_name(), c.metadata.key())
        {
            return Err(format!(
                "claims {other} and {} are both bound to {}",
                c.metadata.key(),
                c.volume_name()
            )
            .into());
        }
    }
    Ok(())
}

/// Why a volume pre-bound to the claim (claimRef naming it, no UID yet)
/// cannot complete the binding, if it cannot: too small, another volume
/// mode, or being deleted (what A3.4 still checks of a pre-bound volume).
pub fn prebind_mismatch(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Option<String> {
    let completing = pv.spec.claim_ref.as_ref().is_some_and(|r| r.uid.is_empty());
    if !completing {
        return None;
    }
    if pv.metadata.deleting() {
        return Some("volume is being deleted".into());
    }
    if pv.capacity().map_or(0, |q| q.bytes()) < claim.request().map_or(0, |q| q.bytes()) {
        return Some("requested PV is too small".into());
    }
    if pv.volume_mode() != claim.volume_mode() {
        return Some("incompatible volumeMode".into());
    }
    None
}

/// Why a volume named by a claim does not satisfy it (A3.10), if it does not.
pub fn volume_mismatch(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Option<String> {
    if pv.metadata.deleting() {
        return Some("volume is being deleted".into());
    }
    let request = claim.request().map_or(0, |q| q.bytes());
    if pv.capacity().map_or(0, |q| q.bytes()) < request {
        return Some("requested PV is too small".into());
    }
    if pv.class() != claim.class() {
        return Some("storageClassName does not match".into());
    }
    if pv.attributes_class() != claim.attributes_class() {
        return Some("volumeAttributesClassName does not match".into());
    }
    if pv.volume_mode() != claim.volume_mode() {
        return Some("incompatible volumeMode".into());
    }
    if !claim
        .spec
        .access_modes
        .iter()
        .all(|m| pv.spec.access_modes.contains(m))
    {
        return Some("incompatible accessMode".into());
    }
    None
}
