//! What the simulation judges of volume expansion: a claim never says its
//! volume is bigger than the storage made it; once the cluster is quiet,
//! every expansion ended in a state upstream writes — done (no status or
//! condition left behind), handed to a node (`NodeResizePending`, or
//! `NodeResizeInProgress` when its pod went meanwhile), or, for
//! a size the storage cannot have, `ControllerResizeInfeasible` with its
//! error.

use super::Sim;
use super::backend::ZONE_BYTES;
use crate::model::names::expansion::*;
use crate::model::*;

impl Sim {
    /// Safety: a claim's status capacity is never more than its volume has.
    pub(super) fn check_expansions(&self, found: &mut Vec<(&'static str, String)>) {
        for o in self.store.objects() {
            let Object::Pvc(c) = o else { continue };
            let Some(says) = c.status_capacity().map(|q| q.bytes()) else {
                continue;
            };
            let Some((handle, _)) = self.bound_volume(c) else {
                continue;
            };
            let Some((_, has)) = self.storage.placed.get(&handle) else {
                continue;
            };
            if says > *has {
                found.push((
                    "expansion",
                    format!(
                        "PVC {} says its volume {handle} holds {says} bytes, but the storage gave it {has}",
                        c.metadata.key()
                    ),
                ));
            }
        }
    }

    /// Liveness: every bound claim's expansion ended as upstream ends it.
    pub(super) fn expansions_converged(&self, found: &mut Vec<String>) {
        for o in self.store.objects() {
            let Object::Pvc(c) = o else { continue };
            if c.metadata.deleting() || c.phase() != PvcPhase::Bound || !self.expandable(c) {
                continue;
            }
            if self.bound_volume(c).is_none() {
                continue;
            }
            let request = c.request().map_or(0, |q| q.bytes());
            let capacity = c.status_capacity().map_or(0, |q| q.bytes());
            let state = c.resize_status();
            let ended = if request <= capacity {
                state.is_none() && c.condition(RESIZING).is_none()
            } else {
                match state {
                    // A node step waits for a pod to mount the volume (as
                    // upstream's), also once a kubelet started it and its
                    // pod went.
                    Some(NODE_PENDING | NODE_IN_PROGRESS) => true,
                    Some(CONTROLLER_INFEASIBLE) => {
                        request > ZONE_BYTES
                            && c.allocated().map(|q| q.bytes()) == Some(request)
                            && c.condition(CONTROLLER_RESIZE_ERROR).is_some()
                    }
                    _ => false,
                }
            };
            if !ended {
                found.push(format!(
                    "the expansion of PVC {} did not end: it asks {request} bytes, has {capacity}, allocated {:?}, status {state:?}, conditions {:?}",
                    c.metadata.key(),
                    c.allocated().map(|q| q.bytes()),
                    c.status.conditions.iter().map(|x| &x.type_).collect::<Vec<_>>()
                ));
            }
        }
    }

    /// The claim's class lets it grow.
    fn expandable(&self, c: &PersistentVolumeClaim) -> bool {
        let key = ObjectKey::new(Kind::StorageClass, "", c.class());
        matches!(self.store.get(&key), Some(Object::Class(sc)) if sc.allow_volume_expansion == Some(true))
    }
}
