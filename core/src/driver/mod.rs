//! The driver machine: the CSI Identity, Controller and Node services as a
//! sans-IO state machine, for driver authors.
//!
//! A request comes in ([`Input::Request`]); the machine validates it against
//! its configuration and state and either answers at once (a repeat of
//! something done, a query it can answer from memory, a refusal with the CSI
//! status the specification names) or hands the adapter a [`Plan`] to carry
//! out ([`Effect::Execute`]). The plan's outcome comes back as
//! [`Input::Done`], and the machine answers the request ([`Effect::Reply`]).
//!
//! Guarantees:
//! * **Per-volume exclusion.** While a plan for a volume is in flight, any
//!   other request for that volume is answered `ABORTED` ("operation pending
//!   for volume …"), as the CSI specification allows.
//! * **Write-ahead.** A plan is recorded in the state, and an
//!   [`Effect::Persist`] is polled, before the plan's `Execute`; a reply is
//!   polled only after the `Persist` that records its result has completed
//!   ([`Input::Persisted`]). Nothing is polled while a persist is in flight;
//!   requests handled meanwhile are covered by the next one (group commit).
//!   A persist that fails fails the requests it covered with `UNAVAILABLE`
//!   (their plans do not run), and the next request persists again.
//! * **One commit per operation.** The outcome of a plan that succeeded
//!   and would be carried out again at a restart (its request carried no
//!   secrets) is answered before it is written: its in-flight record is
//!   already durable, so a crash before the outcome is written replays the
//!   plan (idempotent: the same volume for the same name, the same mount) before anything
//!   is served, and the answer given holds. Node plans are too when the
//!   boot is known ([`DriverState::start_boot`]): after a reboot they are
//!   forgotten rather than carried out again, since the mounts they made
//!   are gone and the kubelet redoes what it still wants. The outcome
//!   goes with the next persist, or within [`LAZY_FLUSH`] ms when none
//!   comes. Failures, and outcomes of credentialed plans, are written
//!   before they are answered.
//! * **Restart.** [`Driver::new`] given a persisted state carries every
//!   in-flight plan out again (plans are idempotent), so what was in flight
//!   when the process died is finished.
//! * **Idempotency.** A request repeated after it succeeded is answered from
//!   memory with the same answer and no new plan.

pub use crate::model::attributes;
mod authority;
mod controller;
mod group;
mod journal;
mod node;
pub mod plan;
mod replay;
pub mod request;
mod snapshot;
pub mod state;
pub mod tracked;
pub mod types;
pub mod volumes;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use plan::{
    CreatePlan, GroupPlan, Outcome, Plan, PublishPlan, SnapshotPlan, Source, StagePlan,
};
pub use request::*;
pub use state::{DriverState, check_invariants};
pub use tracked::RecordError;
pub use types::*;

use authority::Asking;

use crate::mountinfo::MountEntry;
use crate::{OpId, Status, Tick};

/// Identifies a request waiting for its answer (assigned by the adapter).
pub type RpcId = u64;

/// How long (ms) the outcome of a replayable plan may wait for the next
/// persist before it is written on its own.
pub const LAZY_FLUSH: Tick = 5;

/// What the driver is and what it supports: fixed for the life of a process.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct DriverConfig {
    /// The driver name (GetPluginInfo), e.g. `volplane.csi.io`.
    pub name: String,
    /// Its version (GetPluginInfo).
    pub vendor_version: String,
    /// GetPluginInfo's manifest.
    pub manifest: Attributes,
    /// Serve the Controller service.
    pub controller: bool,
    /// Serve the Node service.
    pub node: bool,
    /// This node's id (NodeGetInfo).
    pub node_id: String,
    /// 0: the CO decides.
    pub max_volumes_per_node: u64,
    /// This node's topology segment (NodeGetInfo).
    pub topology: Option<Topology>,
    /// Staging and target paths must lie under one of these.
    pub path_roots: Vec<String>,
    /// Node ids ControllerPublish accepts; empty accepts any.
    pub known_nodes: BTreeSet<String>,
    /// The plugin capabilities advertised.
    pub plugin_capabilities: BTreeSet<PluginCapability>,
    /// The controller capabilities advertised.
    pub controller_capabilities: BTreeSet<ControllerCapability>,
    /// The node capabilities advertised.
    pub node_capabilities: BTreeSet<NodeCapability>,
    /// The group controller capabilities advertised (with the plugin
    /// capability GROUP_CONTROLLER_SERVICE).
    pub group_capabilities: BTreeSet<GroupCapability>,
    /// Access modes volumes can be created and published with.
    pub access_modes: BTreeSet<AccessMode>,
    /// Raw block access is supported.
    pub block: bool,
    /// Size of a volume when CreateVolume leaves it to the driver.
    pub default_volume_bytes: u64,
    /// Drop staged and published records whose mounts are gone when the
    /// adapter reports the node's mounts (after a reboot).
    pub reconcile_mounts: bool,
    /// The storage answers lookups by id ([`Features::lookup`]): an id the
    /// journal lacks is put to it before any answer.
    pub lookup: bool,
    /// The storage lists its volumes and snapshots ([`Features::list`]):
    /// ListVolumes and ListSnapshots answer from it.
    pub storage_lists: bool,
    /// Simulation only: a planted mistake.
    pub(crate) plant: crate::plant::Planted,
}

impl DriverConfig {
    /// A configuration with every capability the machine implements; adapters
    /// and backends narrow it to what their storage supports.
    pub fn new(name: &str, vendor_version: &str, node_id: &str) -> DriverConfig {
        use ControllerCapability as C;
        use NodeCapability as N;
        DriverConfig {
            name: name.into(),
            vendor_version: vendor_version.into(),
            manifest: Attributes::new(),
            controller: true,
            node: true,
            node_id: node_id.into(),
            max_volumes_per_node: 0,
            topology: None,
            path_roots: vec!["/var/lib/kubelet".into()],
            known_nodes: BTreeSet::new(),
            plugin_capabilities: [
                PluginCapability::ControllerService,
                PluginCapability::GroupControllerService,
                PluginCapability::OnlineExpansion,
            ]
            .into(),
            controller_capabilities: [
                C::CreateDeleteVolume,
                C::PublishUnpublishVolume,
                C::ListVolumes,
                C::GetCapacity,
                C::PublishReadonly,
                C::ExpandVolume,
                C::ListVolumesPublishedNodes,
                C::GetVolume,
                C::SingleNodeMultiWriter,
                C::ModifyVolume,
                C::CreateDeleteSnapshot,
                C::ListSnapshots,
                C::GetSnapshot,
                C::CloneVolume,
            ]
            .into(),
            node_capabilities: [
                N::StageUnstageVolume,
                N::GetVolumeStats,
                N::ExpandVolume,
                N::SingleNodeMultiWriter,
            ]
            .into(),
            group_capabilities: [GroupCapability::CreateDeleteGetVolumeGroupSnapshot].into(),
            access_modes: AccessMode::ALL.into(),
            block: true,
            default_volume_bytes: 1 << 30,
            reconcile_mounts: true,
            lookup: false,
            storage_lists: false,
            plant: crate::plant::Planted::default(),
        }
    }

    /// Plants a mistake in the driver (a build with the `plants` feature:
    /// `volplane check`'s own tests).
    #[cfg(any(test, feature = "plants"))]
    pub fn plant(&mut self, plant: crate::plant::Plant) {
        self.plant = self.plant.with(plant);
    }

    /// Drops the capabilities that need what the backend lacks.
    pub fn narrow(&mut self, features: Features) {
        use ControllerCapability as C;
        let lacking: &[(bool, &[C])] = &[
            (
                features.attach,
                &[
                    C::PublishUnpublishVolume,
                    C::PublishReadonly,
                    C::ListVolumesPublishedNodes,
                ],
            ),
            (features.expand, &[C::ExpandVolume]),
            (features.capacity, &[C::GetCapacity]),
            (
                features.snapshots,
                &[C::CreateDeleteSnapshot, C::ListSnapshots, C::GetSnapshot],
            ),
            (features.clones, &[C::CloneVolume]),
            (features.modify, &[C::ModifyVolume]),
        ];
        for (has, caps) in lacking {
            if !has {
                for c in *caps {
                    self.controller_capabilities.remove(c);
                }
            }
        }
        if !features.node_expand {
            self.node_capabilities.remove(&NodeCapability::ExpandVolume);
        }
        if !features.expand && !features.node_expand {
            self.plugin_capabilities
                .remove(&PluginCapability::OnlineExpansion);
        }
        if !features.block {
            self.block = false;
        }
        if !features.multi_node {
            self.access_modes.retain(|m| !m.multi_node());
        }
        self.lookup = features.lookup;
        self.storage_lists = features.list;
        if !features.group_snapshots {
            self.group_capabilities.clear();
            self.plugin_capabilities
                .remove(&PluginCapability::GroupControllerService);
        }
    }

    /// True when the driver stages (STAGE_UNSTAGE_VOLUME).
    pub fn stages(&self) -> bool {
        self.node_capabilities
            .contains(&NodeCapability::StageUnstageVolume)
    }

    /// True when the driver advertises `c`.
    pub fn has(&self, c: ControllerCapability) -> bool {
        self.controller_capabilities.contains(&c)
    }
}

/// Something the adapter observed or completed.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Input {
    /// A request arrived.
    Request {
        /// Names it in the reply.
        rpc: RpcId,
        /// What it asks.
        request: Request,
    },
    /// A plan handed out as `Effect::Execute { op, .. }` completed.
    Done {
        /// The operation the plan was polled with.
        op: OpId,
        /// What carrying it out produced.
        result: Result<Outcome, Status>,
    },
    /// The node's current mounts (read at start, after a possible reboot).
    Mounts(Vec<MountEntry>),
    /// The [`Effect::Persist`] `op` completed: the state as it was when it
    /// was polled is durable, or (`Err`) could not be written.
    Persisted {
        /// The persist polled with this id.
        op: OpId,
        /// Written, or why not.
        result: Result<(), crate::machine::EffectFailed>,
    },
}

/// What the adapter must do next.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Effect {
    /// Write `changes` durably, all or none (one transaction: the records
    /// of [`Driver::state`] changed since the last persist), then report
    /// [`Input::Persisted`]. Nothing more is polled until then: no plan
    /// runs before it is recorded, and no answer leaves before what it
    /// acknowledges is durable. `op` is named again in the completion.
    Persist {
        /// Named again in [`Input::Persisted`].
        op: OpId,
        /// The records to write.
        changes: Vec<state::Change>,
    },
    /// Carry out `plan` and report [`Input::Done`] with `op`.
    Execute {
        /// Named again in [`Input::Done`].
        op: OpId,
        /// What to carry out.
        plan: Plan,
    },
    /// Answer request `rpc`.
    Reply {
        /// The request answered.
        rpc: RpcId,
        /// The answer.
        result: Result<Response, Status>,
    },
}

/// How a request is settled.
enum Decision {
    Reply(Result<Response, Status>),
    Execute {
        key: String,
        plan: Plan,
    },
    /// Ask the storage (a lookup), then decide `request` again knowing
    /// what it holds.
    Ask {
        asking: Asking,
        request: Box<Request>,
    },
    /// A plan read back after a restart, waiting for the credentials its
    /// request carried: carry it out with this retry's, then decide the
    /// retry.
    Resume {
        op: OpId,
        request: Box<Request>,
    },
}

/// A query handed out, and what its answer is for.
#[derive(Debug, Clone, Hash)]
enum Query {
    /// The answer to request `rpc`.
    Answer(RpcId),
    /// A lookup of `asking`: `request` (from `rpc`) is decided again once
    /// the storage has said what it holds; `asked` are the ids already put
    /// to it.
    Then {
        rpc: RpcId,
        asking: Asking,
        request: Box<Request>,
        asked: BTreeSet<String>,
    },
}

/// The driver machine. See the module documentation for its contract.
#[derive(Debug, Clone, Hash)]
pub struct Driver {
    config: DriverConfig,
    state: DriverState,
    queue: VecDeque<Effect>,
    /// Queries being answered: not part of the persisted state.
    queries: BTreeMap<OpId, Query>,
    /// The state changed since it was last persisted.
    dirty: bool,
    /// Outcomes answered before they were written, and the time.
    lazy: journal::Lazy,
    /// The persist in flight, and how many queued effects it covers.
    persisting: Option<(OpId, usize)>,
    /// The records the persist in flight writes: written again by the next
    /// one if it fails.
    writing: Vec<(&'static str, String)>,
    /// Queued effects whose persist completed: they may leave.
    releasable: usize,
    /// The last persist failed: persist again only when something waits.
    persist_failed: bool,
    persists: u64,
    recovering: BTreeSet<OpId>,
    /// Plans read back after a restart whose requests carried secrets:
    /// each waits for its CO's retry, which carries them again.
    parked: BTreeSet<OpId>,
    /// Parked plans a retry resumed: that retry is decided again once
    /// the plan completes.
    resumed: BTreeMap<OpId, (RpcId, Request)>,
    /// Node operations in flight at the last stop that a reboot since made
    /// moot, described for a person: not carried out again.
    forgotten: Vec<String>,
}

impl Driver {
    /// A machine over a (possibly restored) state. Every plan that was in
    /// flight when the state was persisted is carried out again.
    pub fn new(config: DriverConfig, mut state: DriverState) -> Driver {
        if config.plant.is(crate::plant::Plant::ForgetVolumesOnRestart) {
            state.volumes.clear();
        }
        if config.plant.is(crate::plant::Plant::ForgetMountsOnRestart) {
            state.node.clear();
        }
        if config
            .plant
            .is(crate::plant::Plant::ForgetInFlightOnRestart)
        {
            state.in_flight.clear();
            state
                .volumes
                .update_all(|v| v.published.retain(|_, p| p.certain));
            for nv in state.node.values_mut() {
                nv.targets.retain(|_, t| t.certain);
                if nv.stage.as_ref().is_some_and(|s| !s.certain) {
                    nv.stage = None;
                }
            }
            state
                .node
                .retain(|_, nv| nv.stage.is_some() || !nv.targets.is_empty());
        }
        if config
            .plant
            .is(crate::plant::Plant::ForgetInterruptedCreate)
        {
            // Planted: a create in flight at the last stop is forgotten.
            state
                .in_flight
                .retain(|_, f| !matches!(f.plan, Plan::CreateVolume(_)));
        }
        let mut d = Driver {
            config,
            state,
            queue: VecDeque::new(),
            queries: BTreeMap::new(),
            dirty: false,
            lazy: journal::Lazy::default(),
            persisting: None,
            writing: Vec::new(),
            releasable: 0,
            persist_failed: false,
            persists: 0,
            recovering: BTreeSet::new(),
            parked: BTreeSet::new(),
            resumed: BTreeMap::new(),
            forgotten: Vec::new(),
        };
        for f in d.state.in_flight.values_mut() {
            // The requests that asked for these belonged to the last process.
            f.rpc = None;
        }
        if d.state.rebooted {
            d.forget_node_plans_after_reboot();
        }
        for (op, f) in &d.state.in_flight {
            if f.credentialed {
                d.parked.insert(*op);
                continue;
            }
            d.recovering.insert(*op);
            d.queue.push_back(Effect::Execute {
                op: *op,
                plan: f.plan.clone(),
            });
        }
        d
    }

    /// The driver's fixed configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// The state (each [`Effect::Persist`] writes the records of it that
    /// changed since the last one).
    pub fn state(&self) -> &DriverState {
        &self.state
    }

    /// True while plans restored from a previous run are still being finished.
    pub fn recovering(&self) -> bool {
        !self.recovering.is_empty()
    }

    /// Settles `decision` for request `rpc`; `asked` are the ids already
    /// put to the storage for it.
    fn settle(&mut self, rpc: RpcId, decision: Decision, asked: BTreeSet<String>) {
        match decision {
            Decision::Reply(result) => self.queue.push_back(Effect::Reply { rpc, result }),
            Decision::Ask { asking, request } => {
                let op = self.next_op();
                let plan = asking.plan(authority::request_secrets(&request));
                let then = Query::Then {
                    rpc,
                    asking,
                    request,
                    asked,
                };
                self.queries.insert(op, then);
                self.queue.push_back(Effect::Execute { op, plan });
            }
            Decision::Resume { op, request } => self.resume(op, rpc, *request),
            Decision::Execute { key, plan } => {
                let op = self.next_op();
                if plan.is_query() {
                    self.queries.insert(op, Query::Answer(rpc));
                } else {
                    let credentialed = plan.secrets().is_some_and(|s| !s.0.is_empty());
                    self.state.in_flight.insert(
                        op,
                        state::InFlight {
                            key,
                            plan: plan.clone(),
                            rpc: Some(rpc),
                            credentialed,
                        },
                    );
                    self.dirty = true;
                }
                self.queue.push_back(Effect::Execute { op, plan });
            }
        }
    }

    fn next_op(&mut self) -> OpId {
        let op = OpId(self.state.next_op);
        self.state.next_op += 1;
        op
    }

    /// Decides `request`, putting to the storage first any id it names
    /// that the journal lacks and that is not among `asked`.
    fn decide(&mut self, request: Request, asked: &BTreeSet<String>) -> Decision {
        if let Some(op) = self.parked_for(&request) {
            return Decision::Resume {
                op,
                request: Box::new(request),
            };
        }
        if let Some(undo) = self.supersede(&request) {
            return undo;
        }
        if let Some(refused) = self.refusal(&request) {
            return reject(refused);
        }
        if let Some(ask) = self.ask_storage(&request, asked) {
            return ask;
        }
        match request {
            Request::CreateVolume(r) => self.create_volume(r),
            Request::DeleteVolume(r) => self.delete_volume(r),
            Request::ControllerPublish(r) => self.controller_publish(r),
            Request::ControllerUnpublish(r) => self.controller_unpublish(r),
            Request::ValidateCapabilities(r) => self.validate_capabilities(r),
            Request::ListVolumes(r) => self.list_volumes(r),
            Request::GetCapacity(r) => self.get_capacity(r),
            Request::ControllerExpand(r) => self.controller_expand(r),
            Request::ControllerGetVolume { volume_id } => self.controller_get_volume(&volume_id),
            Request::ControllerModify(r) => self.controller_modify(r),
            Request::CreateSnapshot(r) => self.create_snapshot(r),
            Request::DeleteSnapshot(r) => self.delete_snapshot(r),
            Request::ListSnapshots(r) => self.list_snapshots(r),
            Request::GetSnapshot { snapshot_id } => self.get_snapshot(&snapshot_id),
            Request::CreateGroupSnapshot(r) => self.create_group(r),
            Request::DeleteGroupSnapshot(r) => self.delete_group(r),
            Request::GetGroupSnapshot {
                group_snapshot_id,
                snapshot_ids,
                ..
            } => self.get_group(&group_snapshot_id, &snapshot_ids),
            Request::NodeStage(r) => self.node_stage(r),
            Request::NodeUnstage(r) => self.node_unstage(r),
            Request::NodePublish(r) => self.node_publish(r),
            Request::NodeUnpublish(r) => self.node_unpublish(r),
            Request::NodeVolumeStats(r) => self.node_volume_stats(r),
            Request::NodeExpand(r) => self.node_expand(r),
            identity => match self.about(&identity) {
                Some(about) => answer(about),
                None => reject(Status::internal(format!(
                    "{}: no answer for it (a bug in volplane)",
                    identity.method()
                ))),
            },
        }
    }

    /// Why `request` is refused before anything else: a service this
    /// instance does not serve, a capability it does not advertise, an
    /// operation already running on the same volume or snapshot.
    fn refusal(&self, request: &Request) -> Option<Status> {
        let method = request.method();
        let controller = matches!(
            *request,
            Request::CreateVolume(_)
                | Request::DeleteVolume(_)
                | Request::ControllerPublish(_)
                | Request::ControllerUnpublish(_)
                | Request::ValidateCapabilities(_)
                | Request::ListVolumes(_)
                | Request::GetCapacity(_)
                | Request::ControllerGetCapabilities
                | Request::ControllerExpand(_)
                | Request::ControllerGetVolume { .. }
                | Request::ControllerModify(_)
                | Request::CreateSnapshot(_)
                | Request::DeleteSnapshot(_)
                | Request::ListSnapshots(_)
                | Request::GetSnapshot { .. }
                | Request::GroupControllerGetCapabilities
                | Request::CreateGroupSnapshot(_)
                | Request::DeleteGroupSnapshot(_)
                | Request::GetGroupSnapshot { .. }
        );
        let node = request.path().is_some()
            || matches!(
                *request,
                Request::NodeGetCapabilities | Request::NodeGetInfo
            );
        if controller && !self.config.controller {
            return Some(Status::unimplemented(format!(
                "{method}: this driver instance does not serve the Controller service"
            )));
        }
        if node && !self.config.node {
            return Some(Status::unimplemented(format!(
                "{method}: this driver instance does not serve the Node service"
            )));
        }
        if let Some(missing) = self.missing_capability(request) {
            return Some(Status::unimplemented(format!(
                "{method}: driver {} does not advertise {missing}",
                self.config.name
            )));
        }
        // Planted: a repeated create is not held back while the first runs.
        let unheld = matches!(request, Request::CreateVolume(_))
            && self
                .config
                .plant
                .is(crate::plant::Plant::CreateRepeatsInFlight);
        if let Some(key) = lock_key(request)
            && self.state.busy(&key)
            && !unheld
        {
            if let Some(plan) = self.parked_on(&key) {
                return Some(Status::new(
                    crate::Code::Aborted,
                    format!(
                        "{method}: {} was in flight when the driver last stopped and waits for its retry, which carries the credentials it needs; retry that call first",
                        plan.describe()
                    ),
                ));
            }
            return Some(match request.snapshot() {
                Some(snapshot) => Status::aborted_pending_snapshot(snapshot),
                None => Status::aborted_pending(request.volume().unwrap_or_default()),
            });
        }
        None
    }

    /// The answers about the driver itself (identity and capabilities).
    fn about(&self, request: &Request) -> Option<Response> {
        let config = &self.config;
        Some(match request {
            Request::GetPluginInfo => Response::PluginInfo {
                name: config.name.clone(),
                vendor_version: config.vendor_version.clone(),
                manifest: config.manifest.clone(),
            },
            Request::GetPluginCapabilities => {
                let mut caps: Vec<_> = config.plugin_capabilities.iter().copied().collect();
                if !config.controller {
                    caps.retain(|c| {
                        *c != PluginCapability::ControllerService
                            && *c != PluginCapability::GroupControllerService
                    });
                }
                Response::PluginCapabilities(caps)
            }
            Request::Probe => Response::Probe {
                ready: !self.recovering(),
            },
            Request::NodeGetCapabilities => {
                Response::NodeCapabilities(config.node_capabilities.iter().copied().collect())
            }
            Request::NodeGetInfo => Response::NodeInfo {
                node_id: config.node_id.clone(),
                max_volumes_per_node: config.max_volumes_per_node,
                accessible_topology: config.topology.clone(),
            },
            Request::ControllerGetCapabilities => Response::ControllerCapabilities(
                config.controller_capabilities.iter().copied().collect(),
            ),
            Request::GroupControllerGetCapabilities => {
                Response::GroupCapabilities(config.group_capabilities.iter().copied().collect())
            }
            _ => return None,
        })
    }

    /// The capability a request needs that this driver does not advertise.
    fn missing_capability(&self, request: &Request) -> Option<&'static str> {
        use ControllerCapability as C;
        let (needed, name) = match request {
            Request::CreateVolume(_) | Request::DeleteVolume(_) => {
                (C::CreateDeleteVolume, "CREATE_DELETE_VOLUME")
            }
            Request::ControllerPublish(_) | Request::ControllerUnpublish(_) => {
                (C::PublishUnpublishVolume, "PUBLISH_UNPUBLISH_VOLUME")
            }
            Request::ListVolumes(_) => (C::ListVolumes, "LIST_VOLUMES"),
            Request::GetCapacity(_) => (C::GetCapacity, "GET_CAPACITY"),
            Request::ControllerExpand(_) => (C::ExpandVolume, "EXPAND_VOLUME"),
            Request::ControllerGetVolume { .. } => (C::GetVolume, "GET_VOLUME"),
            Request::ControllerModify(_) => (C::ModifyVolume, "MODIFY_VOLUME"),
            Request::CreateSnapshot(_) | Request::DeleteSnapshot(_) => {
                (C::CreateDeleteSnapshot, "CREATE_DELETE_SNAPSHOT")
            }
            Request::ListSnapshots(_) => (C::ListSnapshots, "LIST_SNAPSHOTS"),
            Request::GetSnapshot { .. } => (C::GetSnapshot, "GET_SNAPSHOT"),
            Request::GroupControllerGetCapabilities => {
                return (!self
                    .config
                    .plugin_capabilities
                    .contains(&PluginCapability::GroupControllerService))
                .then_some("GROUP_CONTROLLER_SERVICE");
            }
            Request::CreateGroupSnapshot(_)
            | Request::DeleteGroupSnapshot(_)
            | Request::GetGroupSnapshot { .. } => {
                return (!self
                    .config
                    .group_capabilities
                    .contains(&GroupCapability::CreateDeleteGetVolumeGroupSnapshot))
                .then_some("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT");
            }
            Request::NodeVolumeStats(_) => {
                return (!self
                    .config
                    .node_capabilities
                    .contains(&NodeCapability::GetVolumeStats))
                .then_some("GET_VOLUME_STATS");
            }
            Request::NodeExpand(_) => {
                return (!self
                    .config
                    .node_capabilities
                    .contains(&NodeCapability::ExpandVolume))
                .then_some("node EXPAND_VOLUME");
            }
            _ => return None,
        };
        (!self.config.has(needed)).then_some(name)
    }
}

impl crate::machine::Machine for Driver {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Tick, input: Input) {
        self.lazy.now = now;
        match input {
            Input::Request { rpc, request } => {
                let decision = self.decide(request, &BTreeSet::new());
                self.settle(rpc, decision, BTreeSet::new());
            }
            Input::Done { op, result } => self.complete(op, result),
            Input::Mounts(mounts) => self.reconcile(&mounts),
            Input::Persisted { op, result } => self.persisted(op, result),
        }
    }

    fn poll(&mut self) -> Option<Effect> {
        if self.releasable > 0 {
            self.releasable -= 1;
            return self.queue.pop_front();
        }
        if self.persisting.is_some() {
            return None;
        }
        if self.dirty && (!self.persist_failed || !self.queue.is_empty()) {
            self.dirty = false;
            self.lazy.since = None;
            self.persists += 1;
            let op = OpId(self.persists);
            self.persisting = Some((op, self.queue.len()));
            let changes = self.state.take_changes();
            self.writing = changes.iter().map(|c| (c.table, c.key.clone())).collect();
            return Some(Effect::Persist { op, changes });
        }
        if self.dirty {
            return None;
        }
        self.queue.pop_front()
    }

    /// When outcomes answered before they were written must be written
    /// on their own (no persist came for them).
    fn poll_timeout(&self) -> Option<Tick> {
        self.lazy.since.map(|since| since + LAZY_FLUSH)
    }

    fn handle_timeout(&mut self, now: Tick) {
        self.lazy.now = now;
        if self
            .lazy
            .since
            .is_some_and(|since| now >= since + LAZY_FLUSH)
        {
            self.lazy.since = None;
            self.dirty = true;
        }
    }

    fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        check_invariants(&self.state)
    }
}

/// The lock a request takes, if any.
fn lock_key(request: &Request) -> Option<String> {
    match request {
        Request::CreateVolume(r) => Some(format!("name:{}", r.name)),
        Request::CreateSnapshot(r) => Some(snapshot::name_key(&r.name)),
        Request::DeleteSnapshot(r) => Some(snapshot::id_key(&r.snapshot_id)),
        Request::CreateGroupSnapshot(r) => Some(group::name_key(&r.name)),
        Request::DeleteGroupSnapshot(r) => Some(group::id_key(&r.group_snapshot_id)),
        Request::ListSnapshots(_)
        | Request::GetSnapshot { .. }
        | Request::GetGroupSnapshot { .. }
        | Request::GroupControllerGetCapabilities => None,
        Request::ListVolumes(_)
        | Request::GetCapacity(_)
        | Request::ValidateCapabilities(_)
        | Request::ControllerGetVolume { .. }
        | Request::NodeVolumeStats(_) => None,
        r => r.volume().map(str::to_string),
    }
}

fn answer(response: Response) -> Decision {
    Decision::Reply(Ok(response))
}

fn reject(status: Status) -> Decision {
    Decision::Reply(Err(status))
}
