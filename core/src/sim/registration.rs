//! Registration in the simulation: each node's node-driver-registrar and
//! plugin watcher, joined by the registry's sockets. A registrar that
//! listens puts a socket in its node's registry and the watcher finds it;
//! the watcher's GetInfo and NotifyRegistrationStatus reach the registrar
//! listening there (or fail when none is); GetPluginInfo and NodeGetInfo go
//! to the node's driver. The driver's node calls are refused until the
//! watcher has registered it, as the kubelet refuses them.

use std::collections::BTreeMap;

use super::{Actor, DRIVER, Delivery, ROOT, Sim};
use crate::OpId;
use crate::control::ApiCall;
use crate::control::ApiResult;
use crate::driver::Request;
use crate::machine::{self, Machine};
use crate::registration::registrar::{Registrar, RegistrarConfig, RegistrarEffect, RegistrarInput};
use crate::registration::watcher::{WatcherEffect, WatcherInput};

/// The kubelet's plugin registry on every simulated node.
const REGISTRY: &str = "/var/lib/kubelet/plugins_registry";

/// A fresh node-driver-registrar for `node`.
pub(super) fn registrar(node: &str) -> Actor {
    let config = RegistrarConfig::new(REGISTRY, &format!("{ROOT}/plugins/{DRIVER}/csi.sock"));
    Actor::Registrar {
        node: node.into(),
        m: Box::new(Registrar::new(config)),
    }
}

/// Malformed plugins a workload puts in a registry: what is wrong, and the
/// GetInfo answer (type, name, versions). The kubelet refuses every one.
/// (A plugin taking the driver's own name at its version is not among them:
/// the kubelet cannot tell it from the driver, the first of the two to be
/// validated holds the name, as upstream's does — see the watcher's tests.)
pub const ROGUES: [(&str, &str, &str, &[&str]); 3] = [
    (
        "of another type",
        "DevicePlugin",
        "gpu.example.com",
        &["1.0.0"],
    ),
    ("with no versions", "CSIPlugin", "empty.example.com", &[]),
    (
        "with no v1 version",
        "CSIPlugin",
        "old.example.com",
        &["0.3.0", "2.0.0"],
    ),
];

/// The sockets in the registries and the registration calls under way.
#[derive(Debug, Clone, Default, Hash)]
pub(super) struct Registry {
    /// (node, socket) → the registrar actor listening there.
    sockets: BTreeMap<(String, String), usize>,
    /// (node, socket) → the malformed plugin (an index into [`ROGUES`])
    /// answering there.
    rogues: BTreeMap<(String, String), usize>,
    /// (registrar actor, rpc) → the watcher actor and its op waiting.
    calls: BTreeMap<(usize, u64), (usize, OpId)>,
    next_rpc: u64,
}

impl Sim {
    /// The actor index of `node`'s plugin watcher.
    fn watcher_of(&self, node: &str) -> Option<usize> {
        self.actors
            .iter()
            .position(|a| matches!(a, Actor::Watcher(w) if w.node_name() == node))
    }

    /// True when `node`'s plugin watcher has registered the driver.
    pub(super) fn registered(&self, node: &str) -> bool {
        self.watcher_of(node)
            .is_some_and(|w| match &self.actors[w] {
                Actor::Watcher(w) => w.registered().contains_key(DRIVER),
                _ => false,
            })
    }

    fn node_of(&self, a: usize) -> String {
        match &self.actors[a] {
            Actor::Watcher(w) => w.node_name().to_string(),
            Actor::Registrar { node, .. } => node.clone(),
            _ => String::new(),
        }
    }

    /// A call to the node's driver on behalf of registration (never faulted).
    fn ask_driver(&mut self, node: &str, call: Request) -> crate::control::CsiResult {
        let now = self.now;
        self.storage_writes += 1;
        match self.nodes.get_mut(node) {
            Some(d) => d.call(&mut self.storage, Some(node), now, call, None),
            None => Err(crate::Status::internal("no such node")),
        }
    }

    /// Emits a registration actor's pending effects into the world.
    pub(super) fn drain_registration(&mut self, a: usize) {
        let now = self.now;
        match &mut self.actors[a] {
            Actor::Watcher(w) => {
                for e in machine::effects(w.as_mut(), now) {
                    self.watcher_effect(a, e);
                }
            }
            Actor::Registrar { m, .. } => {
                for e in machine::effects(m.as_mut(), now) {
                    self.registrar_effect(a, e);
                }
            }
            _ => {}
        }
    }

    fn registrar_effect(&mut self, a: usize, e: RegistrarEffect) {
        let node = self.node_of(a);
        let to_watcher = |sim: &mut Sim, input: WatcherInput| {
            if let Some(w) = sim.watcher_of(&node) {
                sim.inbox[w].push_back(Delivery::Watcher(input));
            }
        };
        match e {
            RegistrarEffect::GetPluginInfo { op } => {
                let result = self.ask_driver(&node, Request::GetPluginInfo);
                self.inbox[a].push_back(Delivery::Registrar(RegistrarInput::PluginInfo {
                    op,
                    result,
                }));
            }
            RegistrarEffect::Listen { op, socket } => {
                self.registry
                    .sockets
                    .insert((node.clone(), socket.clone()), a);
                self.inbox[a].push_back(Delivery::Registrar(RegistrarInput::Listening {
                    op,
                    result: Ok(()),
                }));
                to_watcher(self, WatcherInput::SocketAdded(socket));
            }
            RegistrarEffect::Info { rpc, info } => {
                if let Some((w, op)) = self.registry.calls.remove(&(a, rpc)) {
                    self.inbox[w].push_back(Delivery::Watcher(WatcherInput::InfoDone {
                        op,
                        result: Ok(info),
                    }));
                }
            }
            RegistrarEffect::Ack { rpc } => {
                if let Some((w, op)) = self.registry.calls.remove(&(a, rpc)) {
                    self.inbox[w].push_back(Delivery::Watcher(WatcherInput::NotifyDone { op }));
                }
            }
            RegistrarEffect::RemoveSocket { socket } => {
                self.registry
                    .sockets
                    .remove(&(node.clone(), socket.clone()));
                to_watcher(self, WatcherInput::SocketRemoved(socket));
            }
            RegistrarEffect::Exit { code, reason } => {
                note!(
                    self,
                    "{:>6} t={} node-driver-registrar/{node} exits ({code}): {reason}",
                    self.stats.steps,
                    self.now
                );
                if code != 0 {
                    self.violate(
                        "registration refused",
                        format!("node-driver-registrar on {node} exited: {reason}"),
                    );
                }
            }
        }
    }

    /// No watcher holds the driver registered from a malformed plugin's socket.
    pub(super) fn check_registrations(&mut self) {
        let mut found = Vec::new();
        for a in &self.actors {
            if let Actor::Watcher(w) = a
                && let Some(r) = w.registered().get(DRIVER)
                && self
                    .registry
                    .rogues
                    .contains_key(&(w.node_name().to_string(), r.socket.clone()))
            {
                found.push(format!(
                    "{DRIVER} on {} is registered from {}",
                    w.node_name(),
                    r.socket
                ));
            }
        }
        for f in found {
            self.violate("malformed plugin registered", f);
        }
    }

    /// A malformed plugin's socket appears in `node`'s registry.
    pub(super) fn rogue_plugin(&mut self, node: &str, kind: usize) {
        let kind = kind % ROGUES.len();
        let socket = format!("{REGISTRY}/rogue-{kind}-reg.sock");
        self.registry
            .rogues
            .insert((node.to_string(), socket.clone()), kind);
        if let Some(w) = self.watcher_of(node) {
            self.inbox[w].push_back(Delivery::Watcher(WatcherInput::SocketAdded(socket)));
        }
    }

    /// What a malformed plugin answers, and how the kubelet must treat it:
    /// GetInfo gets its info; a registration accepted is a violation.
    fn rogue_effect(&mut self, w: usize, kind: usize, e: &WatcherEffect) -> bool {
        let (what, type_, name, versions) = ROGUES[kind];
        match e {
            WatcherEffect::GetInfo { op, socket } => {
                let info = crate::registration::PluginInfo {
                    type_: type_.into(),
                    name: name.into(),
                    endpoint: format!("{}-csi.sock", socket.trim_end_matches("-reg.sock")),
                    supported_versions: versions.iter().map(|v| v.to_string()).collect(),
                };
                self.inbox[w].push_back(Delivery::Watcher(WatcherInput::InfoDone {
                    op: *op,
                    result: Ok(info),
                }));
            }
            WatcherEffect::Notify {
                op,
                socket,
                registered,
                ..
            } => {
                let node = self.node_of(w);
                if *registered {
                    self.violate(
                        "malformed plugin registered",
                        format!("the kubelet on {node} registered a plugin {what}"),
                    );
                }
                self.inbox[w].push_back(Delivery::Watcher(WatcherInput::NotifyDone { op: *op }));
                // Refused, it gives up and removes its socket, as
                // node-driver-registrar does.
                self.registry.rogues.remove(&(node, socket.clone()));
                self.inbox[w].push_back(Delivery::Watcher(WatcherInput::SocketRemoved(
                    socket.clone(),
                )));
            }
            _ => return false,
        }
        true
    }

    fn watcher_effect(&mut self, w: usize, e: WatcherEffect) {
        let node = self.node_of(w);
        let socket = match &e {
            WatcherEffect::GetInfo { socket, .. } | WatcherEffect::Notify { socket, .. } => {
                Some(socket.clone())
            }
            _ => None,
        };
        if let Some(kind) =
            socket.and_then(|s| self.registry.rogues.get(&(node.clone(), s)).copied())
            && self.rogue_effect(w, kind, &e)
        {
            return;
        }
        match e {
            WatcherEffect::GetInfo { op, socket } => {
                match self.registry.sockets.get(&(node, socket)).copied() {
                    Some(r) => {
                        let rpc = self.rpc(r, w, op);
                        self.inbox[r]
                            .push_back(Delivery::Registrar(RegistrarInput::GetInfo { rpc }));
                    }
                    None => self.inbox[w].push_back(Delivery::Watcher(WatcherInput::InfoDone {
                        op,
                        result: Err("connect: connection refused".into()),
                    })),
                }
            }
            WatcherEffect::NodeGetInfo { op, .. } => {
                let result = self.ask_driver(&node, Request::NodeGetInfo);
                self.inbox[w]
                    .push_back(Delivery::Watcher(WatcherInput::NodeInfoDone { op, result }));
            }
            WatcherEffect::Notify {
                op,
                socket,
                registered,
                error,
            } => match self.registry.sockets.get(&(node, socket)).copied() {
                Some(r) => {
                    let rpc = self.rpc(r, w, op);
                    self.inbox[r].push_back(Delivery::Registrar(RegistrarInput::Status {
                        rpc,
                        registered,
                        error,
                    }));
                }
                None => self.inbox[w].push_back(Delivery::Watcher(WatcherInput::NotifyDone { op })),
            },
            WatcherEffect::Api { op, call } => {
                let (result, watches) = self.api(call);
                self.inbox[w].push_back(Delivery::Watcher(WatcherInput::ApiDone { op, result }));
                self.broadcast(watches);
            }
        }
    }

    /// Carries out an API call from a machine: a write may meet an injected
    /// conflict. Returns the result and the watch events to broadcast once
    /// the caller has its completion queued.
    pub(super) fn api(&mut self, call: ApiCall) -> (ApiResult, Vec<crate::control::Watch>) {
        let conflict = self.faults_on
            && !matches!(
                &call,
                ApiCall::Create(_) | ApiCall::Get(_) | ApiCall::List { .. } | ApiCall::Delete(_)
            )
            && self.rng.chance(self.config.faults.api_conflict);
        if conflict {
            self.fault("api conflict");
            return (ApiResult::Conflict, vec![]);
        }
        self.store.write(self.now, call)
    }

    fn rpc(&mut self, registrar: usize, watcher: usize, op: OpId) -> u64 {
        self.registry.next_rpc += 1;
        let rpc = self.registry.next_rpc;
        self.registry.calls.insert((registrar, rpc), (watcher, op));
        rpc
    }

    pub(super) fn deliver_watcher(&mut self, a: usize, name: &str, input: WatcherInput) {
        note!(
            self,
            "{:>6} t={} {name} <- {}",
            self.stats.steps,
            self.now,
            describe_watcher(&input)
        );
        if let Actor::Watcher(w) = &mut self.actors[a] {
            w.handle(self.now, input);
        }
    }

    pub(super) fn deliver_registrar(&mut self, a: usize, name: &str, input: RegistrarInput) {
        note!(
            self,
            "{:>6} t={} {name} <- {}",
            self.stats.steps,
            self.now,
            describe_registrar(&input)
        );
        if let Actor::Registrar { m, .. } = &mut self.actors[a] {
            m.handle(self.now, input);
        }
    }

    /// `node` rebooted: the sockets in its registry are gone.
    pub(super) fn registry_reboot(&mut self, node: &str) {
        self.registry.sockets.retain(|(n, _), _| n != node);
        self.registry.rogues.retain(|(n, _), _| n != node);
    }

    /// A registration actor restarted (already fresh, its inbox empty): the
    /// calls it was part of fail; a watcher lists its watches and its
    /// registry again, a registrar starts again.
    pub(super) fn restart_registration(&mut self, a: usize) {
        let node = self.node_of(a);
        let lost: Vec<((usize, u64), (usize, OpId))> = self
            .registry
            .calls
            .iter()
            .filter(|((r, _), (w, _))| *r == a || *w == a)
            .map(|(k, v)| (*k, *v))
            .collect();
        for (key, (w, op)) in lost {
            self.registry.calls.remove(&key);
            if w != a {
                // The registrar died mid-call: the watcher's dial fails.
                self.inbox[w].push_back(Delivery::Watcher(WatcherInput::InfoDone {
                    op,
                    result: Err("connection reset by peer".into()),
                }));
            }
        }
        match &self.actors[a] {
            Actor::Watcher(_) => {
                let objects: Vec<_> = self.store.shared().cloned().collect();
                for o in objects {
                    let w = crate::control::Watch::Applied(o);
                    if let Some(d) = self.actors[a].watch(&w) {
                        self.inbox[a].push_back(d);
                    }
                }
                let sockets: Vec<String> = self
                    .registry
                    .sockets
                    .keys()
                    .chain(self.registry.rogues.keys())
                    .filter(|(n, _)| *n == node)
                    .map(|(_, s)| s.clone())
                    .collect();
                for s in sockets {
                    self.inbox[a].push_back(Delivery::Watcher(WatcherInput::SocketAdded(s)));
                }
            }
            Actor::Registrar { .. } => {
                self.registry.sockets.retain(|_, r| *r != a);
                self.inbox[a].push_back(Delivery::Registrar(RegistrarInput::Start));
            }
            _ => {}
        }
    }
}

fn describe_watcher(i: &WatcherInput) -> String {
    match i {
        WatcherInput::SocketAdded(s) => format!("socket added {s}"),
        WatcherInput::SocketRemoved(s) => format!("socket removed {s}"),
        WatcherInput::InfoDone { op, result } => {
            format!(
                "GetInfo {op} {}",
                if result.is_ok() { "ok" } else { "failed" }
            )
        }
        WatcherInput::NodeInfoDone { op, result } => {
            format!(
                "NodeGetInfo {op} {}",
                if result.is_ok() { "ok" } else { "failed" }
            )
        }
        WatcherInput::NotifyDone { op } => format!("NotifyRegistrationStatus {op} done"),
        WatcherInput::Watch(crate::control::Watch::Applied(o)) => {
            format!("watch {} rv={}", o.key(), o.meta().resource_version)
        }
        WatcherInput::Watch(crate::control::Watch::Deleted(o)) => {
            format!("watch deleted {}", o.key())
        }
        WatcherInput::ApiDone { op, .. } => format!("api {op} done"),
    }
}

fn describe_registrar(i: &RegistrarInput) -> String {
    match i {
        RegistrarInput::Start => "start".into(),
        RegistrarInput::PluginInfo { op, result } => {
            format!(
                "GetPluginInfo {op} {}",
                if result.is_ok() { "ok" } else { "failed" }
            )
        }
        RegistrarInput::Listening { op, .. } => format!("listening {op}"),
        RegistrarInput::GetInfo { rpc } => format!("GetInfo rpc {rpc}"),
        RegistrarInput::Status {
            rpc, registered, ..
        } => format!("NotifyRegistrationStatus rpc {rpc} registered={registered}"),
        RegistrarInput::Terminate => "terminate".into(),
    }
}
