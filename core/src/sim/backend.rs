//! The simulated CSI driver: the real driver machine (a controller instance
//! and one node instance per node) over an in-memory storage backend that
//! keeps what really exists — volumes and whether they hold data,
//! attachments, mounts — so that the checks judge what happened, not what
//! the machines believe.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::control::{CsiCall, CsiResult};
use crate::driver::{self, Driver, DriverConfig, DriverState, Outcome, Plan, Request};
use crate::machine::{self, Machine};
use crate::mountinfo::MountEntry;
use crate::plant::Planted;
use crate::{Code, Status, Tick};

use super::{DRIVER, ROOT};

/// What exists in the simulated storage and on the simulated nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Storage {
    /// Volume handle → holds data (a pod wrote to it).
    pub volumes: BTreeMap<String, bool>,
    /// (handle, node) attached.
    pub attached: BTreeSet<(String, String)>,
    /// node → mounted paths → handle.
    pub mounts: BTreeMap<String, BTreeMap<String, String>>,
    /// Handles DeleteVolume removed, with whether they held data.
    pub deleted: Vec<(String, bool)>,
    /// Snapshot id → (source volume handle, holds data).
    #[serde(default)]
    pub snapshots: BTreeMap<String, (String, bool)>,
    /// Volumes the driver was asked to restore from a snapshot the storage
    /// no longer has (each a lost restore).
    #[serde(default)]
    pub restored_from_missing: Vec<String>,
    /// Volume handle → the mutable parameters it really has (set by
    /// CreateVolume, changed by ControllerModifyVolume).
    #[serde(default)]
    pub attributes: BTreeMap<String, BTreeMap<String, String>>,
    /// Volume handle → (its zone, its bytes): what fills each zone.
    #[serde(default)]
    pub placed: BTreeMap<String, (String, u64)>,
}

/// How many bytes each zone's storage holds.
pub const ZONE_BYTES: u64 = 64 << 30;

impl Storage {
    /// The bytes still free in `zone` (`None`: in all zones together).
    pub fn free(&self, zone: Option<&str>) -> u64 {
        let zones: std::collections::BTreeSet<&str> =
            [super::zone_of("node-0"), super::zone_of("node-1")].into();
        let used: u64 = self
            .placed
            .values()
            .filter(|(z, _)| zone.is_none_or(|want| want == z))
            .map(|(_, b)| *b)
            .sum();
        let total = match zone {
            Some(_) => ZONE_BYTES,
            None => ZONE_BYTES * zones.len() as u64,
        };
        total.saturating_sub(used)
    }
}

/// A mutable parameter value the simulated storage refuses
/// (INVALID_ARGUMENT), as a real one refuses an impossible IOPS figure.
pub const INFEASIBLE_VALUE: &str = "invalid";

impl Storage {
    /// Carries out a plan for real (in memory) on `node` (None: the controller).
    fn carry_out(&mut self, node: Option<&str>, plan: &Plan) -> Outcome {
        match plan {
            Plan::CreateVolume(p) => self.create(p),
            Plan::DeleteVolume { volume, .. } => {
                if let Some(data) = self.volumes.remove(&volume.volume_id) {
                    self.deleted.push((volume.volume_id.clone(), data));
                }
                self.attributes.remove(&volume.volume_id);
                self.placed.remove(&volume.volume_id);
                Outcome::Done
            }
            Plan::ControllerPublish {
                volume, node_id, ..
            } => {
                self.attached
                    .insert((volume.volume_id.clone(), node_id.clone()));
                Outcome::Published {
                    publish_context: [(
                        "device".to_string(),
                        format!("/dev/sim/{node_id}/{}", volume.volume_id),
                    )]
                    .into(),
                }
            }
            Plan::ControllerUnpublish {
                volume, node_ids, ..
            } => {
                for n in node_ids {
                    self.attached.remove(&(volume.volume_id.clone(), n.clone()));
                }
                Outcome::Done
            }
            Plan::ControllerExpand {
                volume, capacity, ..
            } => {
                if let Some((_, bytes)) = self.placed.get_mut(&volume.volume_id) {
                    *bytes = (*bytes).max(capacity.required_bytes);
                }
                Outcome::ControllerExpanded {
                    capacity_bytes: capacity.required_bytes,
                    node_expansion_required: true,
                }
            }
            Plan::ControllerModify {
                volume,
                mutable_parameters,
                ..
            } => {
                if self.volumes.contains_key(&volume.volume_id) {
                    let has = self.attributes.entry(volume.volume_id.clone()).or_default();
                    for (k, v) in mutable_parameters {
                        has.insert(k.to_string(), v.to_string());
                    }
                }
                Outcome::Done
            }
            Plan::CreateSnapshot(p) => {
                Outcome::SnapshotCreated(self.cut(format!("snap-{}", p.name), &p.source, ""))
            }
            Plan::CreateGroupSnapshot(p) => Outcome::GroupCreated(self.cut_group(p)),
            Plan::DeleteGroupSnapshot { group, .. } => {
                for s in &group.snapshots {
                    self.snapshots.remove(&s.snapshot_id);
                }
                Outcome::Done
            }
            Plan::DeleteSnapshot { snapshot, .. } => {
                self.snapshots.remove(&snapshot.snapshot_id);
                Outcome::Done
            }
            Plan::GetCapacity {
                accessible_topology,
                ..
            } => Outcome::Capacity {
                available_bytes: self.free(
                    accessible_topology
                        .as_ref()
                        .and_then(|t| t.get(super::ZONE_KEY)),
                ),
                maximum_volume_size: None,
                minimum_volume_size: None,
            },
            Plan::Stage(_)
            | Plan::Unstage(_)
            | Plan::Publish(_)
            | Plan::Unpublish(_)
            | Plan::NodeExpand { .. } => self.carry_out_on_node(node, plan),
            Plan::VolumeStats { .. } => Outcome::Stats {
                usage: Default::default(),
                condition: None,
            },
            Plan::LookupVolume { volume_id, .. } => Outcome::VolumeFound(self.stored(volume_id)),
            Plan::LookupSnapshot { snapshot_id, .. } => {
                Outcome::SnapshotFound(self.snapshot(snapshot_id))
            }
            Plan::ListVolumes { .. } => Outcome::VolumesListed(driver::VolumePage {
                entries: self
                    .volumes
                    .keys()
                    .filter_map(|id| self.stored(id))
                    .collect(),
                next_token: String::new(),
            }),
            Plan::ListSnapshots { .. } => Outcome::SnapshotsListed(driver::SnapshotPage {
                entries: self
                    .snapshots
                    .keys()
                    .filter_map(|id| self.snapshot(id))
                    .collect(),
                next_token: String::new(),
            }),
        }
    }

    /// What the storage holds under volume id `id`.
    fn stored(&self, id: &str) -> Option<driver::StoredVolume> {
        self.volumes.get(id)?;
        let (zone, bytes) = self.placed.get(id).cloned().unwrap_or_default();
        let topology = if zone.is_empty() {
            Vec::new()
        } else {
            vec![[(super::ZONE_KEY.to_string(), zone)].into()]
        };
        let mut stored = driver::StoredVolume::new(driver::Volume {
            volume_id: id.to_string(),
            capacity_bytes: bytes,
            volume_context: driver::Attributes::new(),
            accessible_topology: topology,
            content_source: None,
        });
        stored.published_node_ids = self
            .attached
            .iter()
            .filter(|(v, _)| v == id)
            .map(|(_, n)| n.clone())
            .collect();
        Some(stored)
    }

    /// What the storage holds under snapshot id `id`.
    fn snapshot(&self, id: &str) -> Option<driver::Snapshot> {
        let (source, _) = self.snapshots.get(id)?;
        Some(driver::Snapshot {
            snapshot_id: id.to_string(),
            source_volume_id: source.clone(),
            size_bytes: 0,
            creation_time: Default::default(),
            ready_to_use: true,
            group_snapshot_id: String::new(),
        })
    }

    /// CreateVolume for real: the volume (holding what its source held)
    /// with its mutable parameters, where the CO prefers it.
    fn create(&mut self, p: &driver::CreatePlan) -> Outcome {
        let id = format!("vol-{}", p.name);
        // A restore or clone holds what its source held.
        let data = match &p.source {
            Some(driver::Source::Snapshot(s)) => {
                self.snapshots.get(&s.snapshot_id).is_some_and(|(_, d)| *d)
            }
            Some(driver::Source::Volume(v)) => {
                self.volumes.get(&v.volume_id).copied().unwrap_or(false)
            }
            None => false,
        };
        self.volumes.entry(id.clone()).or_insert(data);
        let zone = p
            .accessibility
            .as_ref()
            .and_then(|a| a.preferred.first().or(a.requisite.first()))
            .and_then(|t| t.get(super::ZONE_KEY))
            .map(|z| z.to_string())
            .unwrap_or_default();
        // A volume made before (a retried call) stays where it is, and is
        // reported there, as a real driver's idempotent CreateVolume does.
        let (placed_zone, _) = self
            .placed
            .entry(id.clone())
            .or_insert((zone, p.suggested_bytes))
            .clone();
        self.attributes.entry(id.clone()).or_insert_with(|| {
            p.mutable_parameters
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        });
        // Where it was placed: where the CO preferred it when first made,
        // else anywhere it could be.
        let at = p.accessibility.as_ref().and_then(|a| {
            let first = a.preferred.first().or(a.requisite.first())?;
            let mut at = first.clone();
            if !placed_zone.is_empty() {
                at.insert(super::ZONE_KEY.into(), placed_zone.as_str().into());
            }
            Some(at)
        });
        Outcome::Created(driver::Volume {
            volume_id: id,
            capacity_bytes: p.suggested_bytes,
            volume_context: Default::default(),
            accessible_topology: at.into_iter().collect(),
            content_source: None,
        })
    }

    /// A node plan: the node's mounts change.
    fn carry_out_on_node(&mut self, node: Option<&str>, plan: &Plan) -> Outcome {
        fn mounts<'a>(s: &'a mut Storage, node: Option<&str>) -> &'a mut BTreeMap<String, String> {
            s.mounts.entry(node.unwrap_or("").to_string()).or_default()
        }
        match plan {
            Plan::Stage(p) => {
                mounts(self, node).insert(p.staging_path.clone(), p.volume_id.clone());
                Outcome::Done
            }
            Plan::Unstage(p) => {
                mounts(self, node).remove(&p.staging_path);
                Outcome::Done
            }
            Plan::Publish(p) => {
                mounts(self, node).insert(p.target_path.clone(), p.volume_id.clone());
                // A pod now uses the volume: it holds data from here on.
                if let Some(data) = self.volumes.get_mut(&p.volume_id) {
                    *data = true;
                }
                Outcome::Done
            }
            Plan::Unpublish(p) => {
                mounts(self, node).remove(&p.target_path);
                Outcome::Done
            }
            Plan::NodeExpand { required_bytes, .. } => Outcome::NodeExpanded {
                capacity_bytes: *required_bytes,
            },
            _ => unreachable!("not a node plan: {plan:?}"),
        }
    }

    /// Records snapshot `id` of `source` with what the source holds now.
    /// A group snapshot of `p`'s volumes, one member each.
    fn cut_group(&mut self, p: &crate::driver::plan::GroupPlan) -> driver::GroupSnapshot {
        let group = format!("group-{}", p.name);
        let snapshots = p
            .sources
            .iter()
            .map(|v| self.cut(format!("snap-{}-{}", p.name, v.volume_id), v, &group))
            .collect();
        driver::GroupSnapshot {
            group_snapshot_id: group,
            snapshots,
            creation_time: driver::Timestamp {
                seconds: 1,
                nanos: 0,
            },
            ready_to_use: true,
        }
    }

    fn cut(&mut self, id: String, source: &driver::Volume, group: &str) -> driver::Snapshot {
        let data = self
            .volumes
            .get(&source.volume_id)
            .copied()
            .unwrap_or(false);
        self.snapshots
            .entry(id.clone())
            .or_insert((source.volume_id.clone(), data));
        driver::Snapshot {
            snapshot_id: id,
            source_volume_id: source.volume_id.clone(),
            size_bytes: source.capacity_bytes,
            creation_time: driver::Timestamp {
                seconds: 1,
                nanos: 0,
            },
            ready_to_use: true,
            group_snapshot_id: group.to_string(),
        }
    }

    /// Mounts of `handle` on `node`.
    pub fn mounts_of(&self, node: &str, handle: &str) -> Vec<&str> {
        self.mounts
            .get(node)
            .map(|m| {
                m.iter()
                    .filter(|(_, h)| *h == handle)
                    .map(|(p, _)| p.as_str())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// How a CSI call went wrong, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallFault {
    /// Refused with a code the spec allows for the RPC, nothing done.
    Error(Code),
    /// Done, but the caller sees DEADLINE_EXCEEDED.
    TimeoutAfterEffect,
    /// The driver process died right after carrying out the plan, before
    /// recording its completion; it restarts from its persisted state.
    CrashAfterEffect,
}

/// Codes a plugin may answer each RPC with (CSI spec error tables), for
/// injected refusals that change nothing.
/// How the machines tell errors apart: a retry that may have taken effect
/// (the kubelet's "uncertain"), out of capacity (the provisioner's
/// reschedule), a precondition, or final.
fn error_class(code: Code) -> u8 {
    match code {
        Code::Aborted | Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => 0,
        Code::ResourceExhausted => 1,
        Code::FailedPrecondition => 2,
        _ => 3,
    }
}

/// One error code of each class `call` may fail with (what the exhaustive
/// explorer branches over: a mistake on any error path is in its reach).
pub fn error_classes(call: &CsiCall) -> Vec<Code> {
    let mut out: Vec<Code> = Vec::new();
    for &c in allowed_errors(call) {
        if !out.iter().any(|o| error_class(*o) == error_class(c)) {
            out.push(c);
        }
    }
    out
}

/// The error codes the CSI spec allows `call` to answer (the faults injected).
pub fn allowed_errors(call: &CsiCall) -> &'static [Code] {
    match call {
        Request::CreateVolume(_) => &[
            Code::ResourceExhausted,
            Code::Aborted,
            Code::Unavailable,
            Code::Internal,
        ],
        Request::DeleteVolume(_) => &[
            Code::FailedPrecondition,
            Code::Aborted,
            Code::Unavailable,
            Code::Internal,
        ],
        Request::ControllerPublish(_) => &[
            Code::ResourceExhausted,
            Code::Aborted,
            Code::Unavailable,
            Code::Internal,
        ],
        Request::ControllerUnpublish(_) => &[Code::Aborted, Code::Unavailable, Code::Internal],
        Request::ControllerExpand(_) => &[
            Code::ResourceExhausted,
            Code::Aborted,
            Code::Unavailable,
            Code::Internal,
        ],
        Request::NodeStage(_) | Request::NodePublish(_) => {
            &[Code::Aborted, Code::Unavailable, Code::Internal]
        }
        Request::NodeUnstage(_) | Request::NodeUnpublish(_) => {
            &[Code::Aborted, Code::Unavailable, Code::Internal]
        }
        Request::NodeExpand(_) => &[Code::Aborted, Code::Unavailable, Code::Internal],
        Request::ControllerModify(_) => &[Code::Aborted, Code::Unavailable, Code::Internal],
        _ => &[Code::Unavailable],
    }
}

/// One driver process: the machine, and the state it last persisted.
#[derive(Debug, Clone, Hash)]
pub struct DriverProcess {
    /// The driver machine, as this process has it.
    pub machine: Driver,
    /// The records it persisted, as a record store keeps them:
    /// (table, key) → JSON. A restart reads the state back from them.
    persisted: BTreeMap<(&'static str, String), Vec<u8>>,
    /// The credentials its controller calls (and its node stage, publish
    /// and expand) must carry, when its StorageClasses name a Secret for
    /// them (a cloud driver's API key, a SAN's CHAP secret).
    pub credentials: Option<driver::Secrets>,
    /// The boot of the node it runs on (a new one after each reboot).
    boot: String,
}

/// The secrets a call carries, for the calls the provisioner, the
/// attacher, the resizer and the kubelet fill from a Secret.
fn carried(call: &CsiCall) -> Option<&driver::Secrets> {
    match call {
        CsiCall::CreateVolume(c) => Some(&c.secrets),
        CsiCall::DeleteVolume(c) => Some(&c.secrets),
        CsiCall::ControllerPublish(c) => Some(&c.secrets),
        CsiCall::ControllerUnpublish(c) => Some(&c.secrets),
        CsiCall::ControllerExpand(c) => Some(&c.secrets),
        CsiCall::ControllerModify(c) => Some(&c.secrets),
        CsiCall::NodeStage(c) => Some(&c.secrets),
        CsiCall::NodePublish(c) => Some(&c.secrets),
        CsiCall::NodeExpand(c) => Some(&c.secrets),
        _ => None,
    }
}

/// INVALID_ARGUMENT for a call that asks for a mutable parameter value the
/// storage cannot have; OUT_OF_RANGE for a volume grown past what a zone
/// holds.
fn infeasible(call: &CsiCall) -> Option<Status> {
    let params = match call {
        CsiCall::CreateVolume(c) => &c.mutable_parameters,
        CsiCall::ControllerModify(c) => &c.mutable_parameters,
        CsiCall::ControllerExpand(c) if c.capacity.required_bytes > ZONE_BYTES => {
            return Some(Status::new(
                Code::OutOfRange,
                format!(
                    "{} bytes is more than a zone of this storage holds ({ZONE_BYTES})",
                    c.capacity.required_bytes
                ),
            ));
        }
        _ => return None,
    };
    params
        .iter()
        .find(|(_, v)| &**v == INFEASIBLE_VALUE)
        .map(|(k, v)| Status::invalid(format!("{k}={v} is not a value this storage can have")))
}

fn config(node: &str, controller: bool, plant: Planted) -> DriverConfig {
    let mut c = DriverConfig::new(DRIVER, "sim", node);
    c.controller = controller;
    c.node = !controller;
    c.path_roots = vec![ROOT.into()];
    c.plant = plant;
    if !controller {
        let zone = super::zone_of(node);
        c.topology = Some([(super::ZONE_KEY.to_string(), zone.to_string())].into());
    }
    c
}

impl DriverProcess {
    /// A driver process on `node` (the controller's when `controller`).
    pub fn new(node: &str, controller: bool, plant: Planted) -> DriverProcess {
        let boot = "boot-0".to_string();
        let mut state = DriverState::default();
        let mut persisted = BTreeMap::new();
        if let Some(change) = state.start_boot(&boot)
            && let Some(value) = change.value
        {
            persisted.insert((change.table, change.key), value);
        }
        DriverProcess {
            machine: Driver::new(config(node, controller, plant), state),
            persisted,
            credentials: None,
            boot,
        }
    }

    /// Restarts from the persisted state (finishing what was in flight, unless
    /// the planted mistake forgets it).
    fn restart(&mut self, storage: &mut Storage, node: Option<&str>, now: Tick) {
        let c = self.machine.config().clone();
        let records = self
            .persisted
            .iter()
            .map(|((t, k), v)| (*t, k.as_str(), v.as_slice()));
        let mut state = DriverState::from_records(records).expect("the sim's records load");
        // The boot the process starts on, recorded before anything else.
        if let Some(change) = state.start_boot(&self.boot)
            && let Some(value) = change.value
        {
            self.persisted.insert((change.table, change.key), value);
        }
        self.machine = Driver::new(c, state);
        self.drain(storage, node, now, None);
    }

    /// The node rebooted: its mounts are gone, and the driver starts again
    /// (on a new boot) and reconciles with the (empty) mount table.
    pub fn reboot(&mut self, storage: &mut Storage, node: &str, now: Tick) {
        storage.mounts.remove(node);
        self.boot = format!("boot-{now}");
        self.restart(storage, Some(node), now);
        self.machine
            .handle(now, driver::Input::Mounts(Vec::<MountEntry>::new()));
        self.drain(storage, Some(node), now, None);
    }

    /// Drains effects through the one loop: persists, carries out plans at
    /// once, collects the reply. With `crash`, the process dies after the
    /// first plan is carried out (nothing after it happens) and restarts.
    fn drain(
        &mut self,
        storage: &mut Storage,
        node: Option<&str>,
        now: Tick,
        crash: Option<()>,
    ) -> Option<CsiResult> {
        let mut answer = None;
        let mut crash = crash;
        let mut crashed = false;
        let persisted = &mut self.persisted;
        let mut carry = |d: &Driver, _now, e, done: &mut VecDeque<driver::Input>| {
            if crashed {
                return;
            }
            match e {
                driver::Effect::Persist { op, changes } => {
                    let _ = d;
                    for c in changes {
                        match c.value {
                            Some(v) => persisted.insert((c.table, c.key), v),
                            None => persisted.remove(&(c.table, c.key)),
                        };
                    }
                    // What the records hold is what the state persists
                    // (fields not persisted aside).
                    #[cfg(debug_assertions)]
                    {
                        let replayed = DriverState::from_records(
                            persisted
                                .iter()
                                .map(|((t, k), v)| (*t, k.as_str(), v.as_slice())),
                        )
                        .expect("the records load");
                        assert_eq!(
                            serde_json::to_value(&replayed).unwrap(),
                            serde_json::to_value(d.state()).unwrap(),
                            "the journal holds the state"
                        );
                    }
                    done.push_back(driver::Input::Persisted { op, result: Ok(()) });
                }
                driver::Effect::Execute { op, plan } => {
                    let out = storage.carry_out(node, &plan);
                    if crash.take().is_some() {
                        crashed = true;
                        return;
                    }
                    done.push_back(driver::Input::Done {
                        op,
                        result: Ok(out),
                    });
                }
                driver::Effect::Reply { result, .. } => answer = Some(result),
            }
        };
        machine::drain(&mut self.machine, now, &mut carry);
        if crashed {
            self.restart(storage, node, now);
            return Some(Err(Status::new(
                Code::Unavailable,
                "the driver crashed (injected)",
            )));
        }
        answer
    }

    /// Carries out one CSI call, with an optional fault.
    pub fn call(
        &mut self,
        storage: &mut Storage,
        node: Option<&str>,
        now: Tick,
        call: CsiCall,
        fault: Option<CallFault>,
    ) -> CsiResult {
        if let Some(CallFault::Error(code)) = fault {
            return Err(Status::new(code, format!("injected {}", code.name())));
        }
        if let (Some(want), Some(got)) = (&self.credentials, carried(&call))
            && want != got
        {
            return Err(Status::new(
                Code::Unauthenticated,
                format!("{} without the driver's credentials", call.method()),
            ));
        }
        if let Some(refused) = infeasible(&call) {
            return Err(refused);
        }
        self.machine.handle(
            now,
            driver::Input::Request {
                rpc: 1,
                request: call,
            },
        );
        let crash = (fault == Some(CallFault::CrashAfterEffect)).then_some(());
        let answer = self
            .drain(storage, node, now, crash)
            .unwrap_or_else(|| Err(Status::internal("the driver gave no answer")));
        match fault {
            Some(CallFault::TimeoutAfterEffect) => Err(Status::new(
                Code::DeadlineExceeded,
                "context deadline exceeded (injected)",
            )),
            _ => answer,
        }
    }
}
