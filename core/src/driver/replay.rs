//! Plans read back after a restart whose requests carried credentials.
//!
//! Secrets are never stored, so a plan read back after a restart has none.
//! One whose request carried secrets is not carried out again at once (the
//! storage would be called without the credentials it needs, or with no
//! right to act): it keeps its lock and waits for the CO's retry of the
//! same call, which carries them; that retry resumes it with its secrets,
//! and is then decided again against what the plan left. A CO that moved
//! on never retries that call, so any other call on the same volume (or
//! snapshot) that carries secrets resumes it the same way: the call that
//! undoes it (ControllerUnpublish after a ControllerPublish), or one that
//! comes next (ControllerModifyVolume after a ControllerExpandVolume whose
//! claim was shrunk back). The plan is carried out with that call's
//! secrets — if the storage refuses them, the plan fails, that failure is
//! the call's answer, and the volume is free again — and the call is then
//! decided against what the plan left, never refused for as long as the
//! driver runs. On the node, the call that undoes a parked stage or publish
//! carries no secrets (NodeUnstageVolume, NodeUnpublishVolume): it takes
//! the parked plan's place, undoing at its path whatever the plan may have
//! mounted before the crash (the node calls are idempotent). Any other call
//! without secrets is told what it waits for. Plans whose requests carried
//! none are carried out again at once, as before; no other volume waits for
//! a parked one.

use super::authority::request_secrets;
use super::*;

/// True when `request` is a retry of the call that made `plan`, or the
/// call that undoes it (see the module documentation).
fn retries(plan: &Plan, request: &Request) -> bool {
    match (plan, request) {
        (Plan::ControllerPublish { node_id, .. }, Request::ControllerUnpublish(r)) => {
            r.node_id.as_ref().is_none_or(|n| n == node_id)
        }
        (Plan::ControllerUnpublish { node_ids, .. }, Request::ControllerPublish(r)) => {
            node_ids.contains(&r.node_id)
        }
        (Plan::CreateVolume(p), Request::CreateVolume(r)) => p.name == r.name,
        (Plan::DeleteVolume { volume, .. }, Request::DeleteVolume(r)) => {
            volume.volume_id == r.volume_id
        }
        (Plan::ControllerPublish { node_id, .. }, Request::ControllerPublish(r)) => {
            *node_id == r.node_id
        }
        (Plan::ControllerUnpublish { .. }, Request::ControllerUnpublish(_))
        | (Plan::ControllerExpand { .. }, Request::ControllerExpand(_))
        | (Plan::ControllerModify { .. }, Request::ControllerModify(_)) => true,
        (Plan::CreateSnapshot(p), Request::CreateSnapshot(r)) => p.name == r.name,
        (Plan::DeleteSnapshot { snapshot, .. }, Request::DeleteSnapshot(r)) => {
            snapshot.snapshot_id == r.snapshot_id
        }
        (Plan::CreateGroupSnapshot(p), Request::CreateGroupSnapshot(r)) => p.name == r.name,
        (Plan::DeleteGroupSnapshot { group, .. }, Request::DeleteGroupSnapshot(r)) => {
            group.group_snapshot_id == r.group_snapshot_id
        }
        (Plan::Stage(p), Request::NodeStage(r)) => p.staging_path == r.staging_target_path,
        (Plan::Publish(p), Request::NodePublish(r)) => p.target_path == r.target_path,
        _ => false,
    }
}

impl Driver {
    /// The parked plan `request` retries, if any.
    pub(super) fn parked_for(&self, request: &Request) -> Option<OpId> {
        let key = lock_key(request)?;
        let credentialed = !request_secrets(request).0.is_empty();
        self.parked.iter().copied().find(|op| {
            self.state
                .in_flight
                .get(op)
                .is_some_and(|f| f.key == key && (credentialed || retries(&f.plan, request)))
        })
    }

    /// When `request` undoes a parked node plan at its path (NodeUnpublish
    /// of a parked publish's target, NodeUnstage of a parked stage with
    /// nothing published), the parked plan is dropped and its undoing is
    /// decided in its place (see the module documentation).
    pub(super) fn supersede(&mut self, request: &Request) -> Option<Decision> {
        let key = lock_key(request)?;
        let path = match request {
            Request::NodeUnpublish(r) => self.node_path("target_path", &r.target_path).ok()?,
            Request::NodeUnstage(r) => self
                .node_path("staging_target_path", &r.staging_target_path)
                .ok()?,
            _ => return None,
        };
        let published = self
            .state
            .node
            .get(&key)
            .is_some_and(|v| !v.targets.is_empty());
        let (op, undo) = self.parked.iter().find_map(|op| {
            let f = self.state.in_flight.get(op)?;
            let undo = match (&f.plan, request) {
                (Plan::Publish(p), Request::NodeUnpublish(_)) if p.target_path == path => {
                    Plan::Unpublish(PublishPlan {
                        secrets: Secrets::default(),
                        ..p.clone()
                    })
                }
                (Plan::Stage(p), Request::NodeUnstage(_))
                    if p.staging_path == path && !published =>
                {
                    Plan::Unstage(StagePlan {
                        secrets: Secrets::default(),
                        ..p.clone()
                    })
                }
                _ => return None,
            };
            (f.key == key).then_some((*op, undo))
        })?;
        self.parked.remove(&op);
        self.state.in_flight.remove(&op);
        self.dirty = true;
        Some(Decision::Execute { key, plan: undo })
    }

    /// The parked plan holding `key`, if any, for a refusal that names it.
    pub(super) fn parked_on(&self, key: &str) -> Option<&Plan> {
        self.parked
            .iter()
            .filter_map(|op| self.state.in_flight.get(op))
            .find(|f| f.key == key)
            .map(|f| &f.plan)
    }

    /// Carries out parked plan `op` with the secrets of `request` (from
    /// `rpc`), which is decided again once it completes.
    pub(super) fn resume(&mut self, op: OpId, rpc: RpcId, request: Request) {
        let Some(flight) = self.state.in_flight.get(&op) else {
            return;
        };
        let mut plan = flight.plan.clone();
        plan.set_secrets(request_secrets(&request));
        self.parked.remove(&op);
        self.resumed.insert(op, (rpc, request));
        self.queue.push_back(Effect::Execute { op, plan });
    }

    /// A resumed plan completed: its retry is decided again against what
    /// the plan left, or answered with the plan's failure.
    pub(super) fn resumed_done(
        &mut self,
        rpc: RpcId,
        request: Request,
        result: Result<Response, Status>,
    ) {
        match result {
            Ok(_) => {
                let decision = self.decide(request, &Default::default());
                self.settle(rpc, decision, Default::default());
            }
            Err(status) => self.queue.push_back(Effect::Reply {
                rpc,
                result: Err(status),
            }),
        }
    }

    /// The plans read back after a restart that wait for their CO's retry
    /// (it carries the credentials they need), described for a person.
    pub fn waiting_for_credentials(&self) -> Vec<String> {
        self.parked
            .iter()
            .filter_map(|op| self.state.in_flight.get(op))
            .map(|f| f.plan.describe())
            .collect()
    }
}
