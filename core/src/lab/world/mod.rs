//! The lab's cluster, synchronous: the object store, the control-plane
//! machines, one kubelet and plugin watcher per node, and the user's
//! commands. It carries out API writes itself (the store is in memory) and
//! hands everything that talks to a process — CSI calls, registration RPCs,
//! the pods' "containers" — to the engine as [`Job`]s, whose outcomes come
//! back through [`World::csi_done`] and [`World::watcher_done`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::Tick;
use crate::control::csi_map::DriverModes;
use crate::control::{
    ApiCall, ApiResult, ControlMachine, CsiCall, CsiResult, Effect, Event, Input, Watch,
};
use crate::driver::{NodeCapability, Response};
use crate::kubelet::{Certainty, Kubelet, KubeletConfig};
use crate::machine::{self, Machine, TimerTable};
use crate::model::*;
use crate::registration::watcher::{PluginWatcher, WatcherEffect, WatcherInput};
use crate::roles::{self, DriverFacts, Flags, RoleMachine, Switches};
use crate::store::Store;
use crate::{OpId, Status};

use super::Layout;
use super::status;

mod commands;
pub use commands::Command;
#[cfg(test)]
mod tests;

/// One of the world's machines.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Member {
    /// A control-plane machine (index into the controllers).
    Controller(usize),
    /// A node's kubelet.
    Kubelet(String),
    /// A node's plugin watcher.
    Watcher(String),
}

fn endpoint_of(
    endpoints: &BTreeMap<String, Result<String, Status>>,
    node: &str,
) -> Result<String, Status> {
    endpoints.get(node).cloned().unwrap_or_else(|| {
        Err(Status::new(
            crate::Code::Unavailable,
            format!("node {node} is not in the lab"),
        ))
    })
}

/// Who gets a CSI call's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A control-plane machine (index into the controllers).
    Controller(usize, OpId),
    /// A node's kubelet, by node name.
    Kubelet(String, OpId),
    /// NodeGetCapabilities after registration: then the node's kubelet starts.
    NodeCapabilities(String),
}

/// Work for the engine.
#[derive(Debug, Clone)]
pub enum Job {
    /// Make a CSI call to a plugin.
    Csi {
        /// "controller" or the node's name.
        plugin: String,
        /// Its endpoint, or why there is none yet.
        endpoint: Result<String, Status>,
        /// The call.
        call: CsiCall,
        /// Who gets the answer.
        reply: Reply,
    },
    /// Carry out a plugin watcher's registration effect on a node.
    Registration {
        /// The node.
        node: String,
        /// The effect.
        effect: WatcherEffect,
    },
    /// A pod's volumes are all published: its "container" reads what the
    /// previous pods wrote and writes its own file.
    Container {
        /// The pod.
        pod: String,
        /// Its node.
        node: String,
        /// Its volumes' target paths.
        targets: Vec<String>,
    },
}

/// One CSI call as the lab saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiRecord {
    /// "controller" or the node.
    pub plugin: String,
    /// The CSI method.
    pub method: String,
    /// The volume, if any.
    pub volume: String,
    /// The answer's code name.
    pub code: String,
}

/// Why a user's command was refused.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{0}")]
    /// A manifest that does not parse.
    Manifest(#[from] ManifestError),
    #[error("{0}")]
    /// A command the lab refuses, and why.
    Refused(String),
}

/// The lab's cluster. See the module documentation.
pub struct World {
    /// The objects.
    pub store: Store,
    layout: Layout,
    driver: String,
    nodes: Vec<String>,
    controllers: Vec<RoleMachine>,
    kubelets: BTreeMap<String, Kubelet>,
    watchers: BTreeMap<String, PluginWatcher>,
    deployments: BTreeMap<String, Deployment>,
    /// Pods whose container was started.
    started: BTreeSet<String>,
    asking_caps: BTreeSet<String>,
    /// When a failed NodeGetCapabilities may be asked again.
    caps_retry: TimerTable<String>,
    /// Every event the machines recorded.
    pub events: Vec<Event>,
    /// Every CSI call, with its answer's code.
    pub csi_log: Vec<CsiRecord>,
    jobs: Vec<Job>,
    lines: Vec<String>,
    scheduled: u32,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("nodes", &self.nodes)
            .field("objects", &self.store.objects().count())
            .finish_non_exhaustive()
    }
}

fn modes(multi_writer: bool) -> DriverModes {
    DriverModes {
        single_node_multi_writer: multi_writer,
    }
}

impl World {
    /// A cluster with `nodes`, whose controller driver says `facts` of
    /// itself: the control plane is made by the role catalogue from them,
    /// as `volplane controller` makes it with every role but the capacity
    /// tracker and group snapshots switched on.
    pub fn new(layout: Layout, facts: &DriverFacts, nodes: &[String]) -> World {
        let flags = Flags {
            switches: Switches {
                group_snapshots: false,
                ..Switches::all()
            },
            ..Flags::default()
        };
        let made = roles::make(facts, &flags);
        let controllers = made.machines;
        let mut w = World {
            store: Store::with_admission(),
            layout,
            driver: facts.name.clone(),
            nodes: nodes.to_vec(),
            controllers,
            kubelets: BTreeMap::new(),
            watchers: nodes
                .iter()
                .map(|n| (n.clone(), PluginWatcher::new(n)))
                .collect(),
            deployments: BTreeMap::new(),
            started: BTreeSet::new(),
            asking_caps: BTreeSet::new(),
            caps_retry: TimerTable::default(),
            events: Vec::new(),
            csi_log: Vec::new(),
            jobs: Vec::new(),
            lines: Vec::new(),
            scheduled: 0,
        };
        for n in nodes {
            let mut node = Node::new(n);
            node.status.conditions.push(NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
            });
            w.write(0, ApiCall::Create(Object::Node(node)));
        }
        w
    }

    /// Lines for the user since the last call.
    pub fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }

    /// Work for the engine since the last call.
    pub fn take_jobs(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.jobs)
    }

    fn say(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Applies a write to the store and delivers its watch events to every
    /// machine at once.
    fn write(&mut self, now: Tick, call: ApiCall) -> ApiResult {
        let (result, watches) = self.store.write(now, call);
        self.broadcast(now, None, watches);
        result
    }

    /// Delivers watch events to every machine but `except` (which saw them
    /// with its own write's completion).
    fn broadcast(&mut self, now: Tick, except: Option<&Member>, watches: Vec<Watch>) {
        for w in watches {
            let kind = w.kind();
            for (i, m) in self.controllers.iter_mut().enumerate() {
                if except != Some(&Member::Controller(i)) && m.watches(kind) {
                    m.control().handle(now, Input::Watch(w.clone()));
                }
            }
            for (n, k) in &mut self.kubelets {
                if except != Some(&Member::Kubelet(n.clone())) && k.watches(kind) {
                    k.handle(now, Input::Watch(w.clone()));
                }
            }
            for (n, pw) in &mut self.watchers {
                if except != Some(&Member::Watcher(n.clone())) {
                    pw.handle(now, WatcherInput::Watch(w.clone()));
                }
            }
        }
    }

    /// The earliest timer of any machine.
    pub fn next_timeout(&self) -> Option<Tick> {
        let c = self
            .controllers
            .iter()
            .filter_map(RoleMachine::poll_timeout);
        let k = self.kubelets.values().filter_map(|k| k.poll_timeout());
        let w = self.watchers.values().filter_map(|w| w.poll_timeout());
        let r = self.caps_retry.next();
        c.chain(k).chain(w).chain(r).min()
    }

    /// Drains every machine through the one loop (firing due timers) until
    /// none has anything left to do; then starts the pods whose volumes are
    /// ready.
    pub fn pump(&mut self, now: Tick) {
        loop {
            let mut members: Vec<Member> = (0..self.controllers.len())
                .map(Member::Controller)
                .collect();
            members.extend(self.kubelets.keys().cloned().map(Member::Kubelet));
            members.extend(self.watchers.keys().cloned().map(Member::Watcher));
            let mut progress = false;
            for m in members {
                progress |= self.drain(now, m);
            }
            if !progress {
                break;
            }
        }
        self.start_kubelets(now);
        self.start_pods(now);
    }

    /// Drains one machine: API writes are applied to the store at once
    /// (their completion and watch events go back to the machine, the watch
    /// events to every other machine after), CSI calls and registration
    /// RPCs become jobs. True when the machine did anything.
    fn drain(&mut self, now: Tick, member: Member) -> bool {
        let mut watches = Vec::new();
        let mut carried = 0;
        let endpoints = self.endpoints();
        let World {
            store,
            controllers,
            kubelets,
            watchers,
            layout,
            events,
            jobs,
            lines,
            ..
        } = self;
        match &member {
            Member::Controller(_) | Member::Kubelet(_) => {
                let (m, reply_to): (&mut (dyn ControlMachine + 'static), _) = match &member {
                    Member::Controller(i) => (controllers[*i].control(), member.clone()),
                    Member::Kubelet(n) => match kubelets.get_mut(n) {
                        Some(k) => (k, member.clone()),
                        None => return false,
                    },
                    Member::Watcher(_) => return false,
                };
                let mut carry =
                    |_: &(dyn ControlMachine + 'static), now, e, done: &mut VecDeque<Input>| {
                        carried += 1;
                        match e {
                            Effect::Event(ev) => {
                                lines.push(format!("event   {ev}"));
                                events.push(ev);
                            }
                            Effect::Api { op, call } => {
                                watches.extend(store.serve(now, op, call, done));
                            }
                            Effect::Csi { op, node, call } => {
                                let reply = match &reply_to {
                                    Member::Controller(i) => Reply::Controller(*i, op),
                                    Member::Kubelet(n) => Reply::Kubelet(n.clone(), op),
                                    Member::Watcher(_) => return,
                                };
                                let (plugin, endpoint) = match &node {
                                    None => {
                                        ("controller".to_string(), Ok(layout.controller_endpoint()))
                                    }
                                    Some(n) => (n.clone(), endpoint_of(&endpoints, n)),
                                };
                                jobs.push(Job::Csi {
                                    plugin,
                                    endpoint,
                                    call,
                                    reply,
                                });
                            }
                        }
                    };
                machine::drain(m, now, &mut carry);
            }
            Member::Watcher(n) => {
                let Some(w) = watchers.get_mut(n) else {
                    return false;
                };
                let mut carry = |_: &PluginWatcher, now, e, done: &mut VecDeque<WatcherInput>| {
                    carried += 1;
                    match e {
                        WatcherEffect::Api { op, call } => {
                            watches.extend(store.serve(now, op, call, done));
                        }
                        effect => jobs.push(Job::Registration {
                            node: n.clone(),
                            effect,
                        }),
                    }
                };
                machine::drain(w, now, &mut carry);
            }
        }
        self.broadcast(now, Some(&member), watches);
        carried > 0
    }

    /// Each node's registered CSI endpoint for the driver, or why there is none.
    fn endpoints(&self) -> BTreeMap<String, Result<String, Status>> {
        self.nodes
            .iter()
            .map(|n| (n.clone(), self.node_endpoint(n)))
            .collect()
    }

    /// The CSI endpoint the node's kubelet registered for the driver.
    fn node_endpoint(&self, node: &str) -> Result<String, Status> {
        self.watchers
            .get(node)
            .and_then(|w| w.registered().get(&self.driver))
            .map(|r| r.endpoint.clone())
            .ok_or_else(|| {
                Status::new(
                    crate::Code::Unavailable,
                    format!(
                        "driver name {} not found in the list of registered CSI drivers",
                        self.driver
                    ),
                )
            })
    }

    /// A registration socket appeared in, or left, a node's registry.
    pub fn registry_changed(&mut self, now: Tick, node: &str, socket: &str, added: bool) {
        self.say(format!(
            "{node:<8} plugin watcher: {} {socket}",
            if added { "found" } else { "lost" }
        ));
        if let Some(w) = self.watchers.get_mut(node) {
            w.handle(
                now,
                if added {
                    WatcherInput::SocketAdded(socket.into())
                } else {
                    WatcherInput::SocketRemoved(socket.into())
                },
            );
        }
    }

    /// A registration RPC finished.
    pub fn watcher_done(&mut self, now: Tick, node: &str, input: WatcherInput) {
        if let Some(w) = self.watchers.get_mut(node) {
            w.handle(now, input);
        }
    }

    /// True when `node`'s plugin watcher registered the driver.
    pub fn registered(&self, node: &str) -> bool {
        self.watchers
            .get(node)
            .is_some_and(|w| w.registered().contains_key(&self.driver))
    }

    /// Every node has a kubelet (its driver registered and answered
    /// NodeGetCapabilities).
    pub fn ready(&self) -> bool {
        self.nodes.iter().all(|n| self.kubelets.contains_key(n))
    }

    fn start_kubelets(&mut self, now: Tick) {
        let waiting: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| {
                !self.kubelets.contains_key(*n)
                    && !self.asking_caps.contains(*n)
                    && self.caps_retry.get(*n).is_none_or(|t| t <= now)
                    && self.registered(n)
            })
            .cloned()
            .collect();
        for n in waiting {
            self.asking_caps.insert(n.clone());
            self.caps_retry.stop(&n);
            let endpoint = self.node_endpoint(&n);
            self.jobs.push(Job::Csi {
                plugin: n.clone(),
                endpoint,
                call: CsiCall::NodeGetCapabilities,
                reply: Reply::NodeCapabilities(n),
            });
        }
    }

    /// Records a CSI call's outcome for `lab status` and the tests.
    pub fn record(&mut self, plugin: &str, call: &CsiCall, result: &CsiResult) {
        self.csi_log.push(CsiRecord {
            plugin: plugin.into(),
            method: call.method().into(),
            volume: call.volume().unwrap_or("").into(),
            code: match &result {
                Ok(_) => "OK".into(),
                Err(s) => s.code.name().into(),
            },
        });
    }

    /// A CSI call finished (and was recorded).
    pub fn csi_done(&mut self, now: Tick, reply: Reply, result: CsiResult) {
        match reply {
            Reply::Controller(i, op) => self.controllers[i]
                .control()
                .handle(now, Input::CsiDone { op, result }),
            Reply::Kubelet(n, op) => {
                if let Some(k) = self.kubelets.get_mut(&n) {
                    k.handle(now, Input::CsiDone { op, result });
                }
            }
            Reply::NodeCapabilities(n) => {
                self.asking_caps.remove(&n);
                let caps = match result {
                    Ok(Response::NodeCapabilities(c)) => c,
                    _ => {
                        self.say(format!(
                            "{n:<8} kubelet: NodeGetCapabilities failed; asking again in 1 s"
                        ));
                        self.caps_retry.set(n, now + 1_000);
                        return;
                    }
                };
                let mut c = KubeletConfig::new(&n, &self.driver, &self.layout.kubelet_dir(&n));
                c.stage_unstage = caps.contains(&NodeCapability::StageUnstageVolume);
                c.node_expand = caps.contains(&NodeCapability::ExpandVolume);
                c.modes = modes(caps.contains(&NodeCapability::SingleNodeMultiWriter));
                let mut k = Kubelet::new(c);
                k.handle(now, Input::Restarted);
                for o in self.store.shared() {
                    if ControlMachine::watches(&k, o.kind()) {
                        k.handle(now, Input::Watch(Watch::Applied(o.clone())));
                    }
                }
                k.handle(now, Input::Synced);
                self.say(format!("{n:<8} kubelet: volume manager started"));
                self.kubelets.insert(n, k);
            }
        }
    }

    /// Pods on a node whose volumes are all published become Running and
    /// their container starts.
    fn start_pods(&mut self, now: Tick) {
        let pods: Vec<Pod> = self
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pod(p) if p.metadata.deletion_timestamp.is_none() => Some(p.clone()),
                _ => None,
            })
            .filter(|p| !self.started.contains(&p.metadata.uid))
            .collect();
        for mut pod in pods {
            let Some(node) = pod.node().map(str::to_string) else {
                continue;
            };
            let Some(k) = self.kubelets.get(&node) else {
                continue;
            };
            let mut targets = Vec::new();
            let mut ready = true;
            for claim in pod.claims() {
                let key =
                    ObjectKey::new(Kind::PersistentVolumeClaim, &pod.metadata.namespace, claim);
                let pv = match self.store.get(&key) {
                    Some(Object::Pvc(c)) if !c.volume_name().is_empty() => c.volume_name(),
                    _ => {
                        ready = false;
                        break;
                    }
                };
                match k
                    .actual()
                    .mounts
                    .get(&(pod.metadata.uid.clone(), pv.to_string()))
                {
                    Some(m) if m.state == Certainty::Done => targets.push(m.target.clone()),
                    _ => {
                        ready = false;
                        break;
                    }
                }
            }
            if !ready {
                continue;
            }
            let key = Object::Pod(pod.clone()).key();
            self.started.insert(pod.metadata.uid.clone());
            pod.status.phase = Some(PodPhase::Running);
            self.write(now, ApiCall::UpdateStatus(Object::Pod(pod.clone())));
            self.say(format!(
                "{node:<8} pod {}/{} Running",
                key.namespace, key.name
            ));
            self.jobs.push(Job::Container {
                pod: pod.metadata.name.clone(),
                node,
                targets,
            });
        }
    }

    /// `lab status`: the objects and their phases, as `kubectl get` prints them.
    /// Ends with the last ten events, as `kubectl get events` shows them.
    pub fn status(&self) -> String {
        let mut out = status::render(&self.store);
        out.push_str("\n\nEVENTS (last 10)\n");
        if self.events.is_empty() {
            out.push_str("  (none)");
        }
        let from = self.events.len().saturating_sub(10);
        for e in &self.events[from..] {
            out.push_str(&format!("  {e}\n"));
        }
        out.trim_end().to_string()
    }

    /// The CSI methods `plugin` answered OK, in order.
    pub fn calls_on(&self, plugin: &str) -> Vec<String> {
        self.csi_log
            .iter()
            .filter(|r| r.plugin == plugin && r.code == "OK")
            .map(|r| r.method.clone())
            .collect()
    }
}
