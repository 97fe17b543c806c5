//! A whole cluster's storage lifecycle from the core's machines, on one
//! object store: the binder, provisioner, attach/detach, resizer, one kubelet
//! per node, and the CSI driver machine (a controller instance and one node
//! instance per node) whose plans complete in memory.
//!
//! A seeded scheduler picks what happens next among everything pending —
//! a watch event for a machine, an API or CSI completion, a timer — so a
//! seed is one interleaving, replayed byte for byte. Faults (failed CSI
//! calls, duplicated deliveries) are injected at a seeded rate. Safety
//! properties are checked on every CSI call as it is made.

use std::collections::{BTreeMap, VecDeque};

use crate::attach::{Attach, AttachConfig};
use crate::binder::Binder;
use crate::control::csi_map::DriverModes;
use crate::control::{
    ApiCall, ApiResult, CsiCall, CsiResult, Effect, Event, Input, Machine, Watch,
};
use crate::driver::{self, Driver, DriverConfig, DriverState, Outcome, Plan, Request};
use crate::kubelet::{Kubelet, KubeletConfig};
use crate::model::*;
use crate::provision::{Provisioner, ProvisionerConfig};
use crate::resize::{ResizeConfig, Resizer};
use crate::store::Store;
use crate::{Code, OpId, Status, Tick};

/// The simulated driver's name.
pub const DRIVER: &str = "sim.volplane.io";
/// The simulated kubelet root.
pub const ROOT: &str = "/var/lib/kubelet";

/// A deterministic pseudo-random sequence (xorshift64*), seeded.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, per_mille: u32) -> bool {
        (self.next_u64() % 1000) < u64::from(per_mille)
    }
}

/// How the cluster runs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub nodes: usize,
    pub seed: u64,
    /// Chance, per mille, that a CSI call fails (with a retriable code).
    pub csi_fault_rate: u32,
    /// Chance, per mille, that a delivery is duplicated.
    pub duplicate_rate: u32,
}

impl ClusterConfig {
    pub fn new(nodes: usize, seed: u64) -> ClusterConfig {
        ClusterConfig {
            nodes,
            seed,
            csi_fault_rate: 0,
            duplicate_rate: 0,
        }
    }
}

/// Something waiting to be delivered to machine `to`.
#[derive(Debug, Clone)]
enum Delivery {
    Input(Input),
    /// A CSI call to carry out against the driver, then answer.
    Csi {
        op: OpId,
        node: Option<String>,
        call: CsiCall,
    },
}

/// A safety property that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub step: u64,
    pub what: String,
}

/// The cluster. See the module documentation.
pub struct Cluster {
    config: ClusterConfig,
    pub store: Store,
    machines: Vec<(String, Box<dyn Machine>)>,
    /// Per machine, deliveries in order.
    inbox: Vec<VecDeque<Delivery>>,
    controller: Driver,
    nodes: BTreeMap<String, Driver>,
    rng: Rng,
    pub now: Tick,
    pub step: u64,
    pub events: Vec<Event>,
    /// One line per step: what was delivered to whom.
    pub trace: Vec<String>,
    pub violations: Vec<Violation>,
    /// Handles DeleteVolume removed: their storage is gone.
    pub deleted_handles: Vec<String>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("step", &self.step)
            .field("now", &self.now)
            .finish()
    }
}

fn driver_config(node: &str, controller: bool) -> DriverConfig {
    let mut c = DriverConfig::new(DRIVER, "sim", node);
    c.controller = controller;
    c.node = !controller;
    c.reconcile_mounts = false;
    c.path_roots = vec![ROOT.into()];
    c
}

/// What the in-memory backend answers for a plan.
fn outcome(plan: &Plan) -> Outcome {
    match plan {
        Plan::CreateVolume(p) => Outcome::Created(driver::Volume {
            volume_id: format!("vol-{}", p.name),
            capacity_bytes: p.suggested_bytes,
            volume_context: Default::default(),
            accessible_topology: vec![],
            content_source: None,
        }),
        Plan::ControllerPublish {
            node_id, volume, ..
        } => Outcome::Published {
            publish_context: [(
                "device".to_string(),
                format!("/dev/sim/{}/{}", node_id, volume.volume_id),
            )]
            .into(),
        },
        Plan::ControllerExpand { capacity, .. } => Outcome::ControllerExpanded {
            capacity_bytes: capacity.required_bytes,
            node_expansion_required: true,
        },
        Plan::NodeExpand { required_bytes, .. } => Outcome::NodeExpanded {
            capacity_bytes: *required_bytes,
        },
        Plan::GetCapacity { .. } => Outcome::Capacity {
            available_bytes: 1 << 40,
            maximum_volume_size: None,
            minimum_volume_size: None,
        },
        Plan::VolumeStats { .. } => Outcome::Stats {
            usage: Default::default(),
            condition: None,
        },
        _ => Outcome::Done,
    }
}

/// Sends one request through a driver machine whose plans complete at once.
fn call_driver(d: &mut Driver, now: Tick, request: Request) -> CsiResult {
    d.handle(now, driver::Input::Request { rpc: 1, request });
    let mut answer = None;
    while let Some(e) = d.poll() {
        match e {
            driver::Effect::Persist => {}
            driver::Effect::Execute { op, plan } => {
                let out = outcome(&plan);
                d.handle(
                    now,
                    driver::Input::Done {
                        op,
                        result: Ok(out),
                    },
                );
            }
            driver::Effect::Reply { result, .. } => answer = Some(result),
        }
    }
    answer.unwrap_or_else(|| Err(Status::internal("the driver gave no answer")))
}

impl Cluster {
    pub fn new(config: ClusterConfig) -> Cluster {
        let modes = DriverModes {
            single_node_multi_writer: true,
        };
        let mut machines: Vec<(String, Box<dyn Machine>)> = vec![
            ("binder".into(), Box::new(Binder::new())),
            ("provisioner".into(), {
                let mut c = ProvisionerConfig::new(DRIVER);
                c.modes = modes;
                Box::new(Provisioner::new(c))
            }),
            ("attach".into(), {
                let mut c = AttachConfig::new(DRIVER);
                c.modes = modes;
                Box::new(Attach::new(c))
            }),
            ("resizer".into(), {
                let mut c = ResizeConfig::new(DRIVER);
                c.modes = modes;
                Box::new(Resizer::new(c))
            }),
        ];
        let mut nodes = BTreeMap::new();
        for i in 0..config.nodes {
            let name = format!("node-{i}");
            let mut k = KubeletConfig::new(&name, DRIVER, ROOT);
            k.modes = modes;
            machines.push((format!("kubelet/{name}"), Box::new(Kubelet::new(k))));
            nodes.insert(
                name.clone(),
                Driver::new(driver_config(&name, false), DriverState::default()),
            );
        }
        let inbox = machines.iter().map(|_| VecDeque::new()).collect();
        let mut c = Cluster {
            rng: Rng::new(config.seed),
            config,
            store: Store::new(),
            machines,
            inbox,
            controller: Driver::new(driver_config("controller", true), DriverState::default()),
            nodes,
            now: 0,
            step: 0,
            events: Vec::new(),
            trace: Vec::new(),
            violations: Vec::new(),
            deleted_handles: Vec::new(),
        };
        let names: Vec<String> = c.nodes.keys().cloned().collect();
        for name in names {
            c.user(ApiCall::Create(Object::Node(Node::new(&name))));
            let mut csinode = CsiNode::new(&name);
            csinode.spec.drivers.push(CsiNodeDriver {
                name: DRIVER.into(),
                node_id: name.clone(),
                topology_keys: vec![],
                allocatable: None,
            });
            c.user(ApiCall::Create(Object::CsiNode(csinode)));
        }
        c
    }

    /// A user's (or scheduler's) write, applied now; its watch events are queued.
    pub fn user(&mut self, call: ApiCall) -> ApiResult {
        let (result, watches) = self.store.apply(self.now, &call);
        self.broadcast(watches);
        result
    }

    fn broadcast(&mut self, watches: Vec<Watch>) {
        for w in watches {
            for inbox in &mut self.inbox {
                inbox.push_back(Delivery::Input(Input::Watch(w.clone())));
            }
        }
    }

    /// Drains a machine's effects into the world.
    fn drain(&mut self, m: usize) {
        while let Some(e) = self.machines[m].1.poll() {
            match e {
                Effect::Event(e) => self.events.push(e),
                Effect::Api { op, call } => {
                    let (result, watches) = self.store.apply(self.now, &call);
                    self.inbox[m].push_back(Delivery::Input(Input::ApiDone { op, result }));
                    self.broadcast(watches);
                }
                Effect::Csi { op, node, call } => {
                    self.check_call(&self.machines[m].0.clone(), node.as_deref(), &call);
                    self.inbox[m].push_back(Delivery::Csi { op, node, call });
                }
            }
        }
    }

    /// Safety properties, checked against the drivers' own state when a call is made.
    fn check_call(&mut self, who: &str, node: Option<&str>, call: &CsiCall) {
        let mut bad = None;
        match call {
            Request::NodeUnstage(r) => {
                if let Some(d) = node.and_then(|n| self.nodes.get(n))
                    && !d.state().targets(&r.volume_id).is_empty()
                {
                    bad = Some(format!(
                        "{who} unstages {} on {} while it is published",
                        r.volume_id,
                        node.unwrap_or("")
                    ));
                }
            }
            Request::ControllerUnpublish(r) => {
                let nodes: Vec<&String> = match &r.node_id {
                    Some(n) => self.nodes.keys().filter(|k| *k == n).collect(),
                    None => self.nodes.keys().collect(),
                };
                for n in nodes {
                    if self.nodes[n].state().node.contains_key(&r.volume_id) {
                        bad = Some(format!(
                            "{who} detaches {} from {n} while it is staged or published there",
                            r.volume_id
                        ));
                    }
                }
            }
            Request::ControllerPublish(r) => {
                let single = self.store.objects().any(|o| {
                    matches!(o, Object::Pv(pv) if pv.spec.csi.as_ref().is_some_and(|c| c.volume_handle == r.volume_id)
                        && !crate::attach::multi_attach_allowed(pv))
                });
                let elsewhere: Vec<String> = self
                    .controller
                    .state()
                    .volumes
                    .get(&r.volume_id)
                    .map(|v| {
                        v.published
                            .keys()
                            .filter(|n| **n != r.node_id)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                if single && !elsewhere.is_empty() {
                    bad = Some(format!(
                        "{who} attaches single-node volume {} to {} while it is attached to {}",
                        r.volume_id,
                        r.node_id,
                        elsewhere.join(", ")
                    ));
                }
            }
            Request::DeleteVolume(r) => {
                if self
                    .controller
                    .state()
                    .volumes
                    .get(&r.volume_id)
                    .is_some_and(|v| !v.published.is_empty())
                {
                    bad = Some(format!(
                        "{who} deletes {} while it is attached",
                        r.volume_id
                    ));
                }
                if self
                    .nodes
                    .values()
                    .any(|d| d.state().node.contains_key(&r.volume_id))
                {
                    bad = Some(format!(
                        "{who} deletes {} while it is staged or published",
                        r.volume_id
                    ));
                }
                let retained = self.store.objects().any(|o| {
                    matches!(o, Object::Pv(pv) if pv.spec.csi.as_ref().is_some_and(|c| c.volume_handle == r.volume_id)
                        && pv.reclaim_policy() == ReclaimPolicy::Retain)
                });
                if retained {
                    bad = Some(format!(
                        "{who} deletes {} whose PV says Retain",
                        r.volume_id
                    ));
                }
            }
            _ => {}
        }
        if let Some(what) = bad {
            self.violate(what);
        }
    }

    /// Invariants over the store: PV↔PVC binding is one-to-one, and a
    /// single-node (RWO/RWOP) volume has VolumeAttachments on one node at most.
    pub fn check_world(&mut self) {
        let mut nodes_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for o in self.store.objects() {
            if let Object::Va(va) = o {
                nodes_of
                    .entry(va.pv_name().to_string())
                    .or_default()
                    .push(va.spec.node_name.clone());
            }
        }
        for (pv, nodes) in nodes_of {
            if nodes.len() < 2 {
                continue;
            }
            if let Some(Object::Pv(v)) =
                self.store
                    .get(&ObjectKey::new(Kind::PersistentVolume, "", &pv))
                && !crate::attach::multi_attach_allowed(v)
            {
                self.violate(format!(
                    "single-node volume {pv} has VolumeAttachments on {}",
                    nodes.join(" and ")
                ));
            }
        }
        self.check_binding();
    }

    /// Records a violation the first time it is seen.
    fn violate(&mut self, what: String) {
        if !self.violations.iter().any(|v| v.what == what) {
            self.violations.push(Violation {
                step: self.step,
                what,
            });
        }
    }

    /// PV↔PVC binding is one-to-one, checked over the store.
    fn check_binding(&mut self) {
        let mut seen = BTreeMap::new();
        let mut found = Vec::new();
        for o in self.store.objects() {
            let Object::Pvc(c) = o else { continue };
            if c.phase() != PvcPhase::Bound {
                continue;
            }
            if let Some(other) = seen.insert(c.volume_name().to_string(), c.metadata.key()) {
                found.push(format!(
                    "claims {other} and {} are both bound to {}",
                    c.metadata.key(),
                    c.volume_name()
                ));
            }
        }
        for what in found {
            self.violate(what);
        }
    }

    /// Delivers one pending item, chosen by the seed; false when nothing is pending
    /// and no timer is due.
    pub fn step(&mut self) -> bool {
        for m in 0..self.machines.len() {
            self.drain(m);
        }
        let ready: Vec<usize> = (0..self.inbox.len())
            .filter(|m| !self.inbox[*m].is_empty())
            .collect();
        if ready.is_empty() {
            let next = self
                .machines
                .iter()
                .filter_map(|(_, m)| m.poll_timeout())
                .filter(|t| *t > self.now)
                .min();
            let Some(t) = next else { return false };
            self.now = t;
            self.trace
                .push(format!("{:>6} t={} timers", self.step, self.now));
            for (_, m) in &mut self.machines {
                m.handle_timeout(t);
            }
            self.step += 1;
            return true;
        }
        let m = ready[self.rng.below(ready.len())];
        let d = self.inbox[m].pop_front().expect("ready inbox");
        if self.rng.chance(self.config.duplicate_rate)
            && let Delivery::Input(i @ Input::Watch(_)) = &d
        {
            self.inbox[m].push_front(Delivery::Input(i.clone()));
        }
        self.now += 1;
        self.step += 1;
        let name = self.machines[m].0.clone();
        match d {
            Delivery::Input(input) => {
                self.trace.push(format!(
                    "{:>6} t={} {name} <- {}",
                    self.step,
                    self.now,
                    describe(&input)
                ));
                self.machines[m].1.handle(self.now, input);
            }
            Delivery::Csi { op, node, call } => {
                let result = if self.rng.chance(self.config.csi_fault_rate) {
                    Err(Status::new(
                        Code::Unavailable,
                        "injected fault: connection reset",
                    ))
                } else {
                    let now = self.now;
                    let target = match &node {
                        Some(n) => self.nodes.get_mut(n).expect("a node driver per node"),
                        None => &mut self.controller,
                    };
                    let r = call_driver(target, now, call.clone());
                    if let (Request::DeleteVolume(d), Ok(_)) = (&call, &r) {
                        self.deleted_handles.push(d.volume_id.clone());
                    }
                    r
                };
                let code = match &result {
                    Ok(_) => "OK".to_string(),
                    Err(e) => e.code.name().to_string(),
                };
                self.trace.push(format!(
                    "{:>6} t={} {name} -> {} {} {} = {code}",
                    self.step,
                    self.now,
                    call.method(),
                    call.volume().unwrap_or(""),
                    node.as_deref().unwrap_or("controller")
                ));
                self.machines[m]
                    .1
                    .handle(self.now, Input::CsiDone { op, result });
            }
        }
        self.check_world();
        true
    }

    /// Steps until nothing is pending (or `max` steps); returns steps taken.
    pub fn run(&mut self, max: u64) -> u64 {
        let start = self.step;
        while self.step - start < max && self.step() {}
        self.step - start
    }

    /// The node driver of `node`, for checks.
    pub fn node_driver(&self, node: &str) -> Option<&Driver> {
        self.nodes.get(node)
    }

    pub fn controller_driver(&self) -> &Driver {
        &self.controller
    }
}

fn describe(i: &Input) -> String {
    match i {
        Input::Watch(Watch::Applied(o)) => {
            format!("watch applied {} rv={}", o.key(), o.meta().resource_version)
        }
        Input::Watch(Watch::Deleted(o)) => format!("watch deleted {}", o.key()),
        Input::ApiDone { op, result } => format!(
            "api {op} {}",
            match result {
                ApiResult::Ok(_) => "ok",
                ApiResult::Conflict => "conflict",
                ApiResult::NotFound => "not found",
                ApiResult::AlreadyExists => "already exists",
                ApiResult::Failed(_) => "failed",
            }
        ),
        Input::CsiDone { op, .. } => format!("csi {op} done"),
    }
}

#[cfg(test)]
mod tests;
