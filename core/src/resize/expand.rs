//! The resizer's expand half, as external-resizer's expandAndRecover
//! (RecoverVolumeExpansionFailure, GA since Kubernetes 1.34).
//!
//! A bound claim whose request exceeds its status capacity is expanded:
//! the claim is marked (`Resizing`, `ControllerResizeInProgress`, and the
//! size set out for in `allocatedResources`), ControllerExpandVolume runs,
//! the PV's capacity follows, and the claim either waits for the node
//! (`NodeResizePending`, `FileSystemResizePending`) or gets its new
//! capacity here.
//!
//! Recovery: a controller expansion that failed for good as infeasible
//! (INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND) leaves the claim
//! `ControllerResizeInfeasible`, and it is not tried again at that size.
//! The user may then lower the request (to anything above the status
//! capacity) and the volume is expanded to that instead; [`Expansion::target`]
//! is upstream's decision of which size to go for, case by case.

use crate::control::csi_map;
use crate::control::{ApiCall, CsiResult, Cx, Event};
use crate::driver::{self, Request, Response};
use crate::model::names::expansion::*;
use crate::model::names::reason;
use crate::model::*;

use super::{Call, ResizeReconciler, SecretFor};

/// What the node is told while it must grow the filesystem.
pub const WAITING_FOR_NODE: &str =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

/// A claim's expansion as expandAndRecover weighs it (sizes in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expansion<'a> {
    /// The PV's capacity.
    pub pv: u64,
    /// What the claim asks for.
    pub spec: u64,
    /// `status.allocatedResources["storage"]`.
    pub allocated: Option<u64>,
    /// `status.allocatedResourceStatuses["storage"]`.
    pub status: Option<&'a str>,
    /// This claim's last ControllerExpandVolume failed for good (it is
    /// surely not running).
    pub final_error: bool,
    /// The claim has `FileSystemResizePending`.
    pub fs_pending: bool,
}

impl Expansion<'_> {
    /// The size to expand the volume to now; `None` when the controller has
    /// nothing to do (the node is finishing, or must finish first).
    pub fn target(&self) -> Option<u64> {
        let allocated_or_spec = self.allocated.unwrap_or(self.spec);
        let status = self.status.unwrap_or("");
        if self.pv < self.spec {
            // The volume must grow; an expansion under way ends first.
            match status {
                NODE_INFEASIBLE => Some(allocated_or_spec),
                NODE_PENDING | NODE_IN_PROGRESS => {
                    (self.pv < allocated_or_spec).then_some(allocated_or_spec)
                }
                // Still running, maybe: carried on to its size; surely
                // ended: the size asked now.
                CONTROLLER_IN_PROGRESS if self.final_error => Some(self.spec),
                CONTROLLER_IN_PROGRESS => Some(allocated_or_spec),
                _ => Some(self.spec),
            }
        } else {
            // The volume is big enough: the API objects may lag behind it,
            // or the node may need the controller to say it is safe again.
            match status {
                NODE_PENDING | NODE_IN_PROGRESS => None,
                NODE_INFEASIBLE | CONTROLLER_IN_PROGRESS | CONTROLLER_INFEASIBLE => {
                    Some(allocated_or_spec)
                }
                "" if self.allocated.is_some() => self.allocated,
                _ if self.fs_pending => None,
                _ => Some(self.spec),
            }
        }
    }
}

/// `claim` marked as being expanded to `target` by the controller: the
/// `Resizing` condition, and, when `update_status`, the status and the
/// allocated size.
fn marked_in_progress(
    claim: &PersistentVolumeClaim,
    target: u64,
    update_status: bool,
) -> PersistentVolumeClaim {
    let mut c = claim.clone();
    c.merge_resize_conditions(vec![PvcCondition::holds(RESIZING, "")], !update_status);
    c.metadata
        .annotations
        .remove(ANN_NODE_EXPANSION_NOT_REQUIRED);
    if update_status {
        c.set_resize_status(Some(CONTROLLER_IN_PROGRESS));
    }
    if c.allocated().map(|q| q.bytes()) != Some(target) {
        c.status
            .allocated_resources
            .insert("storage".into(), Quantity::from_bytes(target));
    }
    c
}

impl ResizeReconciler {
    /// The expand half's pass over a bound claim of this driver's.
    pub(super) fn sync_expand(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
    ) {
        if !self.needs_expansion(cx, key, claim) {
            return;
        }
        if let Some((volume, capacity, node_required)) = self.expanded.get(key).cloned() {
            if volume == pv.name() {
                return self.record(cx, key, claim, pv, capacity, node_required);
            }
            self.expanded.remove(key);
        }
        let bytes = |q: Option<Quantity>| q.map_or(0, |q| q.bytes());
        let expansion = Expansion {
            pv: bytes(pv.capacity()),
            spec: bytes(claim.request()),
            allocated: claim.allocated().map(|q| q.bytes()),
            status: claim.resize_status(),
            final_error: self.final_errors.contains(key),
            fs_pending: claim.condition(FS_RESIZE_PENDING).is_some(),
        };
        let Some(target) = expansion.target() else {
            return;
        };
        let unchanged = expansion.allocated == Some(target);
        if unchanged && expansion.status == Some(CONTROLLER_INFEASIBLE) {
            // Infeasible at this size: only a new size restarts it.
            // (Upstream's slow set re-arms itself on every look at such a
            // claim, so it never retries either; here nothing wakes it but
            // the user's change.)
            return;
        }
        let marked = marked_in_progress(claim, target, !unchanged);
        if marked != *claim {
            self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(marked)));
            return;
        }
        self.call_expand(cx, key, pv, target);
    }

    /// True when the claim asks for more than its status capacity and its
    /// class allows expansion (a warning says so when it does not).
    fn needs_expansion(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
    ) -> bool {
        let request = claim.request().map_or(0, |q| q.bytes());
        let status = claim.status_capacity().map_or(0, |q| q.bytes());
        if request <= status {
            self.expanded.remove(key);
            return false;
        }
        let allowed = match cx.cache().find(Kind::StorageClass, "", claim.class()) {
            Some(Object::Class(c)) => c.allow_volume_expansion == Some(true),
            _ => false,
        };
        if !allowed {
            let msg = format!(
                "storageclass {:?} does not allow volume expansion",
                claim.class()
            );
            let e = Event::warning(key.clone(), reason::VOLUME_RESIZE_FAILED, msg);
            self.tell(cx, key, e);
        }
        allowed
    }

    /// ControllerExpandVolume to `bytes`, once the Secret it needs is read.
    fn call_expand(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        pv: &PersistentVolume,
        bytes: u64,
    ) {
        let Some(csi) = &pv.spec.csi else { return };
        let named = csi.controller_expand_secret_ref.as_ref().map(|secret| {
            crate::control::secrets::pv_ref(pv.name(), "controllerExpandSecretRef", secret)
        });
        let secrets = match named {
            None => driver::Secrets::default(),
            Some(Err(why)) => return self.resize_failed(cx, key, pv.name(), &why.to_string()),
            Some(Ok(secret)) => match self.credentials.remove(key) {
                Some(data) => data,
                None => {
                    self.get_secret(cx, key, pv, secret.clone(), SecretFor::Expand);
                    return;
                }
            },
        };
        let msg = format!("External resizer is resizing volume {}", pv.name());
        self.tell(cx, key, Event::normal(key.clone(), reason::RESIZING, msg));
        let capability = csi_map::pv_capability(pv, self.config.modes).ok();
        let call = Request::ControllerExpand(driver::ControllerExpand {
            volume_id: csi.volume_handle.clone(),
            capacity: driver::CapacityRange {
                required_bytes: bytes,
                limit_bytes: 0,
            },
            capability,
            secrets,
        });
        let (claim, pv) = (key.clone(), pv.name().to_string());
        cx.csi_holding([key.clone()], None, call, Call::Expand { claim, pv });
    }

    /// The volume grew to `capacity`: the PV says so first, then the claim.
    fn record(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        capacity: u64,
        node_required: bool,
    ) {
        if pv.capacity().map_or(0, |q| q.bytes()) < capacity {
            let mut v = pv.clone();
            v.spec
                .capacity
                .insert("storage".into(), Quantity::from_bytes(capacity));
            self.api(cx, key, ApiCall::Update(Object::Pv(v)));
        } else {
            self.finish(cx, key, claim, capacity, node_required);
        }
    }

    /// The controller's part is done: the claim either waits for the node
    /// (`NodeResizePending`) or gets its new capacity, its expansion status
    /// and conditions cleared.
    fn finish(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        capacity: u64,
        node_required: bool,
    ) {
        let mut c = claim.clone();
        let e = if node_required {
            let pending = PvcCondition::holds(FS_RESIZE_PENDING, WAITING_FOR_NODE);
            c.merge_resize_conditions(vec![pending], true);
            c.metadata
                .annotations
                .remove(ANN_NODE_EXPANSION_NOT_REQUIRED);
            c.set_resize_status(Some(NODE_PENDING));
            Event::normal(
                key.clone(),
                reason::FILE_SYSTEM_RESIZE_REQUIRED,
                "Require file system resize of volume on node",
            )
        } else {
            c.status
                .capacity
                .insert("storage".into(), Quantity::from_bytes(capacity));
            c.merge_resize_conditions(Vec::new(), false);
            c.set_resize_status(None);
            c.metadata
                .annotations
                .insert(ANN_NODE_EXPANSION_NOT_REQUIRED.into(), "true".into());
            Event::normal(
                key.clone(),
                reason::VOLUME_RESIZE_SUCCESSFUL,
                "Resize volume succeeded",
            )
        };
        self.tell(cx, key, e);
        self.expanded.remove(key);
        self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(c)));
    }

    /// ControllerExpandVolume answered.
    pub(super) fn expand_done(
        &mut self,
        cx: &mut Cx<Self>,
        claim: ObjectKey,
        pv: String,
        result: CsiResult,
    ) {
        if !self.still_bound(cx, &claim, &pv) {
            cx.mark(claim);
            return;
        }
        match result {
            Ok(Response::ControllerExpanded {
                capacity_bytes,
                node_expansion_required,
            }) => {
                cx.succeed(&claim);
                self.final_errors.remove(&claim);
                let answer = (pv.clone(), capacity_bytes, node_expansion_required);
                self.expanded.insert(claim.clone(), answer);
            }
            Ok(other) => {
                self.resize_failed(cx, &claim, &pv, &format!("unexpected answer {other:?}"))
            }
            Err(e) => self.expand_failed(cx, &claim, &pv, &e),
        }
        cx.mark(claim);
    }

    /// A failed ControllerExpandVolume: one that surely ended is remembered
    /// (the next try goes for the size asked then); an infeasible one makes
    /// the claim `ControllerResizeInfeasible`; either has a
    /// `ControllerResizeError` condition saying why.
    fn expand_failed(&mut self, cx: &mut Cx<Self>, key: &ObjectKey, pv: &str, e: &crate::Status) {
        if !e.is_final() {
            self.final_errors.remove(key);
        } else if let Some(Object::Pvc(c)) = cx.cache().get(key) {
            self.final_errors.insert(key.clone());
            let mut c = c.clone();
            let infeasible = e.is_infeasible().then_some(CONTROLLER_INFEASIBLE);
            c.mark_expansion_failed(CONTROLLER_RESIZE_ERROR, &e.go_error(), infeasible);
            self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(c)));
        }
        self.resize_failed(cx, key, pv, &e.go_error());
    }

    /// A VolumeResizeFailed warning saying why, and the claim backs off.
    pub(super) fn resize_failed(
        &mut self,
        cx: &mut Cx<Self>,
        claim: &ObjectKey,
        pv: &str,
        why: &str,
    ) {
        cx.fail(claim.clone());
        let msg = format!(
            "resize volume {pv:?} by resizer {:?} failed: {why}",
            self.config.driver
        );
        cx.event(Event::warning(
            claim.clone(),
            reason::VOLUME_RESIZE_FAILED,
            msg,
        ));
    }
}
