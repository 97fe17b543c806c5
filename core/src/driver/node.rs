//! The Node service: stage once per volume, publish per workload target.

use super::state::{NodeVolume, StageRecord, TargetRecord};
use super::*;
use crate::Code;
use crate::path;

/// A backend failure with one of these codes means nothing was done, so the
/// record of the attempt is dropped instead of kept as uncertain.
fn refused_before_acting(e: &Status) -> bool {
    matches!(
        e.code,
        Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition | Code::AlreadyExists
    )
}

/// True when one path is the other or lies below it.
fn overlaps(a: &str, b: &str) -> bool {
    path::is_under(a, b) || path::is_under(b, a)
}

/// Which of a volume's own records a new use of a path may coincide with.
#[derive(Clone, Copy)]
enum Use<'a> {
    /// A stage: only the volume's own stage record (checked apart).
    Stage,
    /// A publish at this target: only the volume's own record of it.
    Target(&'a str),
}

impl Driver {
    pub(super) fn node_path(&self, field: &str, value: &str) -> Result<String, Status> {
        path::confined(field, value, &self.config.path_roots)
    }

    /// A queried volume path: one this driver never recorded (relative, or
    /// outside its roots included) is simply not found.
    fn queried_path(&self, volume_id: &str, value: &str) -> Result<String, Status> {
        if value.is_empty() {
            return Err(Status::invalid("volume_path is required"));
        }
        path::confined("volume_path", value, &self.config.path_roots).map_err(|_| {
            Status::not_found(format!(
                "volume {volume_id} is neither staged nor published at {value:?}"
            ))
        })
    }

    /// Refuses a path that coincides with, or nests in or around, a path
    /// recorded for another volume (or for another use of this one): each
    /// staging and target path belongs to one volume, so one volume's
    /// unstage or unpublish can never unmount another's mounts.
    fn check_owner(
        &self,
        field: &str,
        path: &str,
        volume_id: &str,
        new: Use<'_>,
    ) -> Result<(), Status> {
        for (id, nv) in &self.state.node {
            let own = id == volume_id;
            let stage = nv
                .stage
                .iter()
                .map(|s| ("staging path", s.staging_path.as_str()));
            let targets = nv.targets.keys().map(|t| ("target", t.as_str()));
            for (what, p) in stage.chain(targets) {
                let allowed = own
                    && match new {
                        Use::Stage => what == "staging path",
                        Use::Target(t) => what == "target" && p == t,
                    };
                if !allowed && overlaps(p, path) {
                    let whose = if own { "this volume" } else { "volume " };
                    let id = if own { "" } else { id.as_str() };
                    return Err(Status::failed_precondition(format!(
                        "{field} {path} is in use: it {} the {what} {p} of {whose}{id}; a path belongs to one volume",
                        if p == path { "is" } else { "nests with" }
                    )));
                }
            }
        }
        Ok(())
    }

    pub(super) fn node_stage(&mut self, r: NodeStage) -> Decision {
        if !self.config.stages() {
            return reject(Status::unimplemented(
                "NodeStageVolume: this driver does not advertise STAGE_UNSTAGE_VOLUME",
            ));
        }
        let staging = match self.node_path("staging_target_path", &r.staging_target_path) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        if let Err(e) = self.check_capability("volume_capability", &r.capability) {
            return reject(Status::failed_precondition(e.message));
        }
        if let Err(e) = self.check_owner("staging_target_path", &staging, &r.volume_id, Use::Stage)
        {
            return reject(e);
        }
        let nv = self.state.node.entry_or_default(r.volume_id.clone());
        if let Some(s) = &nv.stage {
            if s.staging_path != staging {
                return reject(Status::already_exists(format!(
                    "volume {} is already staged at {}; a volume is staged at one path per node, \
                     not also at {staging}",
                    r.volume_id, s.staging_path
                )));
            }
            if s.capability != r.capability {
                return reject(Status::already_exists(format!(
                    "volume {} is already staged at {staging} with capability {}, incompatible \
                     with {}",
                    r.volume_id, s.capability, r.capability
                )));
            }
            if s.certain {
                return answer(Response::Empty);
            }
        }
        nv.stage = Some(StageRecord {
            staging_path: staging.clone(),
            capability: r.capability.clone(),
            publish_context: r.publish_context.clone(),
            volume_context: r.volume_context.clone(),
            certain: false,
        });
        Decision::Execute {
            key: r.volume_id.clone(),
            plan: Plan::Stage(StagePlan {
                volume_id: r.volume_id,
                staging_path: staging,
                capability: r.capability,
                publish_context: r.publish_context,
                volume_context: r.volume_context,
                secrets: r.secrets,
            }),
        }
    }

    pub(super) fn staged(
        &mut self,
        p: &StagePlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let nv = self.state.node.entry_or_default(p.volume_id.clone());
        match result {
            Ok(_) => {
                if let Some(s) = nv.stage.as_mut() {
                    s.certain = true;
                }
                Ok(Response::Empty)
            }
            Err(e) => {
                if refused_before_acting(&e) {
                    nv.stage = None;
                }
                self.forget_if_empty(&p.volume_id);
                Err(e)
            }
        }
    }

    pub(super) fn node_unstage(&mut self, r: NodeUnstage) -> Decision {
        if !self.config.stages() {
            return reject(Status::unimplemented(
                "NodeUnstageVolume: this driver does not advertise STAGE_UNSTAGE_VOLUME",
            ));
        }
        let staging = match self.node_path("staging_target_path", &r.staging_target_path) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        let Some(nv) = self.state.node.get(&r.volume_id) else {
            return answer(Response::Empty);
        };
        let Some(stage) = nv.stage.as_ref().filter(|s| s.staging_path == staging) else {
            return answer(Response::Empty);
        };
        if !nv.targets.is_empty()
            && !self
                .config
                .plant
                .is(crate::plant::Plant::UnstageWhilePublished)
        {
            return reject(Status::failed_precondition(format!(
                "volume {} is still published at {}; NodeUnpublishVolume those targets before unstaging",
                r.volume_id,
                nv.targets.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let plan = StagePlan {
            volume_id: r.volume_id.clone(),
            staging_path: staging,
            capability: stage.capability.clone(),
            publish_context: stage.publish_context.clone(),
            volume_context: stage.volume_context.clone(),
            secrets: Secrets::default(),
        };
        Decision::Execute {
            key: r.volume_id,
            plan: Plan::Unstage(plan),
        }
    }

    pub(super) fn unstaged(
        &mut self,
        p: &StagePlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let Some(nv) = self.state.node.get_mut(&p.volume_id) else {
            return result.map(|_| Response::Empty);
        };
        match result {
            Ok(_) => {
                nv.stage = None;
                nv.expanded_bytes = None;
                self.forget_if_empty(&p.volume_id);
                Ok(Response::Empty)
            }
            Err(e) => {
                if let Some(s) = nv.stage.as_mut() {
                    s.certain = false;
                }
                Err(e)
            }
        }
    }

    pub(super) fn node_publish(&mut self, r: NodePublish) -> Decision {
        let target = match self.node_path("target_path", &r.target_path) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        let staging = if r.staging_target_path.is_empty() {
            String::new()
        } else {
            match self.node_path("staging_target_path", &r.staging_target_path) {
                Ok(p) => p,
                Err(e) => return reject(e),
            }
        };
        if target == staging {
            return reject(Status::invalid(format!(
                "target_path {target} is the staging path; a workload must get its own target"
            )));
        }
        if let Err(e) = self.check_capability("volume_capability", &r.capability) {
            return reject(e);
        }
        if let Err(e) = self.check_owner("target_path", &target, &r.volume_id, Use::Target(&target))
        {
            return reject(e);
        }
        if self.config.stages() {
            if staging.is_empty() {
                return reject(Status::failed_precondition(format!(
                    "staging_target_path is required: driver {} stages volumes; call NodeStageVolume first",
                    self.config.name
                )));
            }
            let staged_here = self
                .state
                .node
                .get(&r.volume_id)
                .and_then(|v| v.stage.as_ref())
                .is_some_and(|s| s.staging_path == staging && s.certain);
            if !staged_here {
                return reject(Status::failed_precondition(format!(
                    "volume {} is not staged at {staging}; call NodeStageVolume first",
                    r.volume_id
                )));
            }
        }
        let nv = self.state.node.entry_or_default(r.volume_id.clone());
        if let Some(t) = nv.targets.get(&target) {
            if t.capability != r.capability || t.readonly != r.readonly || t.staging_path != staging
            {
                return reject(Status::already_exists(format!(
                    "volume {} is already published at {target} with capability {} readonly={}, incompatible with {} readonly={}",
                    r.volume_id, t.capability, t.readonly, r.capability, r.readonly
                )));
            }
            if t.certain {
                return answer(Response::Empty);
            }
        } else if let Some((other, t)) = nv.targets.iter().next()
            && (!r.capability.access_mode.multi_target()
                || !t.capability.access_mode.multi_target())
        {
            let mode = if r.capability.access_mode.multi_target() {
                t.capability.access_mode
            } else {
                r.capability.access_mode
            };
            return reject(Status::failed_precondition(format!(
                "volume {} is already published at {other} and access mode {} allows a single target",
                r.volume_id,
                mode.csi_name()
            )));
        }
        if self
            .config
            .plant
            .is(crate::plant::Plant::PublishWithoutMount)
        {
            return answer(Response::Empty);
        }
        nv.targets.insert(
            target.clone(),
            TargetRecord {
                staging_path: staging.clone(),
                capability: r.capability.clone(),
                readonly: r.readonly,
                publish_context: r.publish_context.clone(),
                volume_context: r.volume_context.clone(),
                certain: false,
            },
        );
        Decision::Execute {
            key: r.volume_id.clone(),
            plan: Plan::Publish(PublishPlan {
                volume_id: r.volume_id,
                staging_path: staging,
                target_path: target,
                capability: r.capability,
                readonly: r.readonly,
                publish_context: r.publish_context,
                volume_context: r.volume_context,
                secrets: r.secrets,
            }),
        }
    }

    pub(super) fn published(
        &mut self,
        p: &PublishPlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let nv = self.state.node.entry_or_default(p.volume_id.clone());
        match result {
            Ok(_) => {
                if let Some(t) = nv.targets.get_mut(&p.target_path) {
                    t.certain = true;
                }
                Ok(Response::Empty)
            }
            Err(e) => {
                if refused_before_acting(&e) {
                    nv.targets.remove(&p.target_path);
                }
                self.forget_if_empty(&p.volume_id);
                Err(e)
            }
        }
    }

    pub(super) fn node_unpublish(&mut self, r: NodeUnpublish) -> Decision {
        let target = match self.node_path("target_path", &r.target_path) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        let Some(t) = self
            .state
            .node
            .get(&r.volume_id)
            .and_then(|v| v.targets.get(&target))
        else {
            return answer(Response::Empty);
        };
        let plan = PublishPlan {
            volume_id: r.volume_id.clone(),
            staging_path: t.staging_path.clone(),
            target_path: target,
            capability: t.capability.clone(),
            readonly: t.readonly,
            publish_context: t.publish_context.clone(),
            volume_context: t.volume_context.clone(),
            secrets: Secrets::default(),
        };
        Decision::Execute {
            key: r.volume_id,
            plan: Plan::Unpublish(plan),
        }
    }

    pub(super) fn unpublished(
        &mut self,
        p: &PublishPlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let Some(nv) = self.state.node.get_mut(&p.volume_id) else {
            return result.map(|_| Response::Empty);
        };
        match result {
            Ok(_) => {
                nv.targets.remove(&p.target_path);
                self.forget_if_empty(&p.volume_id);
                Ok(Response::Empty)
            }
            Err(e) => {
                if let Some(t) = nv.targets.get_mut(&p.target_path) {
                    t.certain = false;
                }
                Err(e)
            }
        }
    }

    /// The node volume whose stage or a target is at `path`.
    fn at_path(&self, volume_id: &str, path: &str) -> Option<(&NodeVolume, Capability)> {
        let nv = self.state.node.get(volume_id)?;
        if let Some(t) = nv.targets.get(path) {
            return Some((nv, t.capability.clone()));
        }
        nv.stage
            .as_ref()
            .filter(|s| s.staging_path == path)
            .map(|s| (nv, s.capability.clone()))
    }

    pub(super) fn node_volume_stats(&mut self, r: NodeVolumeStats) -> Decision {
        let path = match self.queried_path(&r.volume_id, &r.volume_path) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        let Some((_, cap)) = self.at_path(&r.volume_id, &path) else {
            return reject(Status::not_found(format!(
                "volume {} is neither staged nor published at {path}",
                r.volume_id
            )));
        };
        Decision::Execute {
            key: String::new(),
            plan: Plan::VolumeStats {
                volume_id: r.volume_id,
                volume_path: path,
                block: cap.access_type.is_block(),
            },
        }
    }

    pub(super) fn node_expand(&mut self, r: NodeExpand) -> Decision {
        let path = match self.queried_path(&r.volume_id, &r.volume_path) {
            Ok(p) => p,
            Err(e) => return reject(e),
        };
        if r.capacity.limit_bytes != 0 && r.capacity.limit_bytes < r.capacity.required_bytes {
            return reject(Status::invalid(format!(
                "capacity_range: limit_bytes {} is smaller than required_bytes {}",
                r.capacity.limit_bytes, r.capacity.required_bytes
            )));
        }
        let Some((nv, cap)) = self.at_path(&r.volume_id, &path) else {
            return reject(Status::not_found(format!(
                "volume {} is neither staged nor published at {path}",
                r.volume_id
            )));
        };
        if let Some(done) = nv.expanded_bytes
            && r.capacity.required_bytes != 0
            && done >= r.capacity.required_bytes
        {
            return answer(Response::NodeExpanded {
                capacity_bytes: done,
            });
        }
        let (staging, publish_context, volume_context) = match &nv.stage {
            Some(s) => (
                s.staging_path.clone(),
                s.publish_context.clone(),
                s.volume_context.clone(),
            ),
            None => {
                let t = &nv.targets[&path];
                (
                    String::new(),
                    t.publish_context.clone(),
                    t.volume_context.clone(),
                )
            }
        };
        Decision::Execute {
            key: r.volume_id.clone(),
            plan: Plan::NodeExpand {
                volume_id: r.volume_id,
                volume_path: path,
                staging_path: staging,
                capability: Some(r.capability.unwrap_or(cap)),
                required_bytes: r.capacity.required_bytes,
                publish_context,
                volume_context,
            },
        }
    }

    pub(super) fn node_expanded(
        &mut self,
        volume_id: &str,
        required: u64,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let capacity_bytes = match result? {
            Outcome::NodeExpanded { capacity_bytes } => capacity_bytes,
            Outcome::Done => required,
            other => return Err(controller::unexpected("NodeExpandVolume", &other)),
        };
        if let Some(nv) = self.state.node.get_mut(volume_id) {
            nv.expanded_bytes = Some(nv.expanded_bytes.unwrap_or(0).max(capacity_bytes));
        }
        Ok(Response::NodeExpanded { capacity_bytes })
    }

    fn forget_if_empty(&mut self, volume_id: &str) {
        if self
            .state
            .node
            .get(volume_id)
            .is_some_and(|v| v.stage.is_none() && v.targets.is_empty())
        {
            self.state.node.remove(volume_id);
        }
    }

    /// Drops certain records whose mounts are gone (the node rebooted, or
    /// someone unmounted them): the CO will stage and publish again.
    pub(super) fn reconcile(&mut self, mounts: &[crate::mountinfo::MountEntry]) {
        if !self.config.reconcile_mounts {
            return;
        }
        let mounted = |p: &str| mounts.iter().any(|m| m.mount_point == p);
        let ids: Vec<String> = self.state.node.keys().cloned().collect();
        for id in ids {
            if self.state.busy(&id) {
                continue;
            }
            let nv = self.state.node.get_mut(&id).expect("listed above");
            let before = nv.clone();
            nv.targets.retain(|path, t| !t.certain || mounted(path));
            if nv.targets.is_empty()
                && let Some(s) = &nv.stage
                && s.certain
                && !s.capability.access_type.is_block()
                && !mounted(&s.staging_path)
            {
                nv.stage = None;
            }
            if *nv != before {
                self.dirty = true;
            }
            self.forget_if_empty(&id);
        }
    }
}
