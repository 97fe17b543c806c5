//! What the simulation judges of VolumeAttributesClasses: a claim whose
//! status says its volume has a class (and no modify is under way) has
//! a volume that really has that class's parameters; once the cluster is
//! quiet, every bound claim's class change ended in a status upstream
//! writes.

use super::Sim;
use super::backend::INFEASIBLE_VALUE;
use crate::model::*;
use crate::resize::modify::{IN_PROGRESS, INFEASIBLE, PENDING};

/// What a claim's class is, as the store has it.
enum ClassState<'a> {
    /// It exists, and the storage can have its parameters.
    Feasible(&'a VolumeAttributesClass),
    /// It exists, but the storage refuses its parameters.
    Infeasible,
    /// It does not exist.
    Missing,
}

impl Sim {
    fn attributes_class(&self, name: &str) -> ClassState<'_> {
        match self
            .store
            .get(&ObjectKey::new(Kind::VolumeAttributesClass, "", name))
        {
            Some(Object::AttributesClass(vac))
                if vac.parameters.values().any(|v| v == INFEASIBLE_VALUE) =>
            {
                ClassState::Infeasible
            }
            Some(Object::AttributesClass(vac)) => ClassState::Feasible(vac),
            _ => ClassState::Missing,
        }
    }

    /// False when the claim names a class its volume cannot be created
    /// with (one that does not exist, or whose parameters the storage
    /// refuses): it stays Pending, rightly.
    pub(super) fn attributes_provisionable(&self, c: &PersistentVolumeClaim) -> bool {
        c.volume_attributes_class()
            .is_none_or(|name| matches!(self.attributes_class(name), ClassState::Feasible(_)))
    }

    /// The volume handle of `c`'s bound PV, and the PV, when both exist.
    pub(super) fn bound_volume(
        &self,
        c: &PersistentVolumeClaim,
    ) -> Option<(String, &PersistentVolume)> {
        let key = ObjectKey::new(Kind::PersistentVolume, "", c.volume_name());
        let Some(Object::Pv(pv)) = self.store.get(&key) else {
            return None;
        };
        let handle = pv.spec.csi.as_ref()?.volume_handle.clone();
        self.storage
            .volumes
            .contains_key(&handle)
            .then_some((handle, pv))
    }

    /// `vac`'s parameters the volume `handle` does not have, if any.
    fn missing_parameters(&self, handle: &str, vac: &VolumeAttributesClass) -> Option<String> {
        let has = self.storage.attributes.get(handle);
        let wrong: Vec<String> = vac
            .parameters
            .iter()
            .filter(|(k, v)| has.and_then(|h| h.get(*k)).map(String::as_str) != Some(*v))
            .map(|(k, v)| format!("{k}={v} (has {:?})", has.and_then(|h| h.get(k))))
            .collect();
        (!wrong.is_empty()).then(|| wrong.join(", "))
    }

    /// Safety: a claim whose status says its volume has class X, with no
    /// modify under way, has a volume with X's parameters.
    pub(super) fn check_attributes(&self, found: &mut Vec<(&'static str, String)>) {
        for o in self.store.objects() {
            let Object::Pvc(c) = o else { continue };
            if c.status.modify_volume_status.is_some() {
                continue;
            }
            let Some(current) = c.status.current_volume_attributes_class_name.as_deref() else {
                continue;
            };
            let key = ObjectKey::new(Kind::VolumeAttributesClass, "", current);
            let Some(Object::AttributesClass(vac)) = self.store.get(&key) else {
                continue;
            };
            let Some((handle, _)) = self.bound_volume(c) else {
                continue;
            };
            if let Some(wrong) = self.missing_parameters(&handle, vac) {
                found.push((
                    "volume attributes",
                    format!(
                        "PVC {} says its volume {handle} has class {current}, but the storage lacks {wrong}",
                        c.metadata.key()
                    ),
                ));
            }
        }
    }

    /// Liveness: every bound claim that names a class has it (PV, status,
    /// storage), or its status says why not — Pending for a class that
    /// does not exist, Infeasible for one the storage refuses.
    pub(super) fn attributes_converged(&self, found: &mut Vec<String>) {
        for o in self.store.objects() {
            let Object::Pvc(c) = o else { continue };
            let Some(spec) = c.volume_attributes_class() else {
                continue;
            };
            if c.metadata.deleting() || c.phase() != PvcPhase::Bound {
                continue;
            }
            let Some((handle, pv)) = self.bound_volume(c) else {
                continue;
            };
            let status = c.status.modify_volume_status.as_ref();
            let (state, target) = status.map_or(("", ""), |s| {
                (
                    s.status.as_str(),
                    s.target_volume_attributes_class_name.as_str(),
                )
            });
            let wrong = match self.attributes_class(spec) {
                ClassState::Feasible(vac) => {
                    let current = c.status.current_volume_attributes_class_name.as_deref();
                    let missing = self.missing_parameters(&handle, vac);
                    (current != Some(spec)
                        || status.is_some()
                        || pv.spec.volume_attributes_class_name.as_deref() != Some(spec)
                        || missing.is_some())
                    .then(|| {
                        format!(
                            "current {current:?}, modify status {status:?}, PV class {:?}, storage lacks {missing:?}",
                            pv.spec.volume_attributes_class_name
                        )
                    })
                }
                // Retried once per longest delay: caught Infeasible, or
                // marked InProgress for the retry.
                ClassState::Infeasible => (!matches!(state, INFEASIBLE | IN_PROGRESS)
                    || target != spec)
                    .then(|| format!("modify status {status:?}, not Infeasible")),
                ClassState::Missing => {
                    (state != PENDING).then(|| format!("modify status {status:?}, not Pending"))
                }
            };
            if let Some(wrong) = wrong {
                found.push(format!(
                    "PVC {} names VolumeAttributesClass {spec}: {wrong}",
                    c.metadata.key()
                ));
            }
        }
    }
}
