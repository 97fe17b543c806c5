//! The kubelet's plugin watcher and CSI plugin handler (E5.4–E5.7): a
//! registration socket appears → GetInfo → validation → NodeGetInfo → the
//! node's `csi.volume.kubernetes.io/nodeid` annotation and topology labels →
//! the CSINode entry → NotifyRegistrationStatus. The socket disappears →
//! the entry and the annotation key go.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{CSI_PLUGIN, PluginInfo, highest_v1};
use crate::control::{ApiCall, ApiResult, Backoff, Cache, CsiResult, Watch};
use crate::driver::Response;
use crate::machine::Machine;
use crate::model::names;
use crate::model::*;
use crate::{OpId, Tick};

#[derive(Debug, Clone, PartialEq, Hash)]
/// What the plugin watcher is told.
pub enum WatcherInput {
    /// A socket appeared in the registry.
    SocketAdded(String),
    /// A socket left the registry.
    SocketRemoved(String),
    /// GetInfo on a registration socket completed.
    InfoDone {
        /// The call polled with this id.
        op: OpId,
        /// The plugin's info, or why nobody answered.
        result: Result<PluginInfo, crate::machine::EffectFailed>,
    },
    /// NodeGetInfo on the plugin completed.
    NodeInfoDone {
        /// The call polled with this id.
        op: OpId,
        /// The driver's answer.
        result: CsiResult,
    },
    /// NotifyRegistrationStatus completed.
    NotifyDone {
        /// The call polled with this id.
        op: OpId,
    },
    /// A Node or CSINode as the watch delivered it.
    Watch(Watch),
    /// An API call completed.
    ApiDone {
        /// The call polled with this id.
        op: OpId,
        /// What the server answered.
        result: ApiResult,
    },
}

impl crate::api::ApiInput for WatcherInput {
    fn answer(op: OpId, result: ApiResult) -> WatcherInput {
        WatcherInput::ApiDone { op, result }
    }

    fn watch(watch: Watch) -> WatcherInput {
        WatcherInput::Watch(watch)
    }
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// What the plugin watcher asks its adapter to do.
pub enum WatcherEffect {
    /// Dial the registration socket and call GetInfo.
    GetInfo {
        /// Names the call in its completion.
        op: OpId,
        /// The registration socket to dial.
        socket: String,
    },
    /// Call NodeGetInfo on the plugin's CSI endpoint.
    NodeGetInfo {
        /// Names the call in its completion.
        op: OpId,
        /// The plugin's CSI endpoint.
        endpoint: String,
    },
    /// Tell the plugin whether it was registered; answer with [`WatcherInput::NotifyDone`].
    Notify {
        /// Names the call in its completion.
        op: OpId,
        /// The registration socket to dial.
        socket: String,
        /// Registered or not.
        registered: bool,
        /// Why not, when not.
        error: String,
    },
    /// Call the API server; answer with [`WatcherInput::ApiDone`].
    Api {
        /// Names the call in its completion.
        op: OpId,
        /// The request.
        call: ApiCall,
    },
}

/// A driver registered on this node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Registered {
    /// The registration socket it came from.
    pub socket: String,
    /// Its CSI endpoint.
    pub endpoint: String,
    /// The highest CSI version both support.
    pub version: (u64, u64, u64),
    /// Its node id (NodeGetInfo).
    pub node_id: String,
    /// Its topology labels.
    pub topology: BTreeMap<String, String>,
    /// Its volume limit (0: none).
    pub max_volumes: u64,
}

#[derive(Debug, Clone, Hash)]
enum Step {
    Info {
        socket: String,
    },
    NodeInfo {
        socket: String,
        info: PluginInfo,
        version: (u64, u64, u64),
    },
    /// Writing the node, then the CSINode, for a registration.
    Write {
        socket: String,
        driver: String,
    },
    /// Removing a driver's entry and annotation.
    Remove,
    Notify,
}

/// One node's plugin watcher. See the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct PluginWatcher {
    node: String,
    cache: Cache,
    plugins: BTreeMap<String, Registered>,
    /// Registrations whose node and CSINode writes are under way.
    pending: BTreeMap<String, Registered>,
    removing: BTreeMap<String, ()>,
    steps: BTreeMap<OpId, Step>,
    writing: bool,
    queue: VecDeque<WatcherEffect>,
    next_op: u64,
    now: Tick,
    /// The sockets in the registry now.
    sockets: BTreeSet<String>,
    /// Sockets whose GetInfo could not be made, retried with the kubelet's
    /// operation backoff (500 ms doubling to 2 min 2 s).
    retry: Backoff<String>,
}

impl PluginWatcher {
    /// A plugin watcher for `node` with empty memory.
    pub fn new(node: &str) -> PluginWatcher {
        PluginWatcher {
            node: node.into(),
            cache: Cache::default(),
            plugins: BTreeMap::new(),
            pending: BTreeMap::new(),
            removing: BTreeMap::new(),
            steps: BTreeMap::new(),
            writing: false,
            queue: VecDeque::new(),
            next_op: 0,
            now: 0,
            sockets: BTreeSet::new(),
            retry: Backoff::new(500, 122_000),
        }
    }

    fn get_info(&mut self, socket: String) {
        let op = self.op(Step::Info {
            socket: socket.clone(),
        });
        self.queue.push_back(WatcherEffect::GetInfo { op, socket });
    }

    /// The node this watcher runs on.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The drivers registered on this node, by name.
    pub fn registered(&self) -> &BTreeMap<String, Registered> {
        &self.plugins
    }

    fn op(&mut self, step: Step) -> OpId {
        self.next_op += 1;
        let op = OpId(self.next_op);
        self.steps.insert(op, step);
        op
    }

    fn notify(&mut self, socket: &str, registered: bool, error: String) {
        let op = self.op(Step::Notify);
        self.queue.push_back(WatcherEffect::Notify {
            op,
            socket: socket.to_string(),
            registered,
            error,
        });
    }

    /// GetInfo on a registration socket answered: valid info goes on to
    /// NodeGetInfo; nobody answering is retried later.
    fn info_done(&mut self, op: OpId, result: Result<PluginInfo, crate::machine::EffectFailed>) {
        let Some(Step::Info { socket }) = self.steps.remove(&op) else {
            return;
        };
        let info = match result {
            Ok(info) => info,
            Err(_) => {
                // Nobody answered on the socket: nothing to notify;
                // the kubelet's reconciler tries again later.
                if self.sockets.contains(&socket) {
                    self.retry.fail(socket, self.now);
                }
                return;
            }
        };
        match self.validate(&socket, &info).map(|v| (info, v)) {
            Ok((info, version)) => {
                let endpoint = info.endpoint.clone();
                let op = self.op(Step::NodeInfo {
                    socket,
                    info,
                    version,
                });
                self.queue
                    .push_back(WatcherEffect::NodeGetInfo { op, endpoint });
            }
            Err(e) => self.notify(&socket, false, e),
        }
    }

    /// NodeGetInfo answered: a node id makes the registration pending
    /// (its writes come next); anything else is told to the plugin.
    fn node_info_done(&mut self, op: OpId, result: CsiResult) {
        let Some(Step::NodeInfo {
            socket,
            info,
            version,
        }) = self.steps.remove(&op)
        else {
            return;
        };
        match result {
            Ok(Response::NodeInfo {
                node_id,
                max_volumes_per_node,
                accessible_topology,
            }) if !node_id.is_empty() => {
                // Registering again cancels a removal not yet written.
                self.removing.remove(&info.name);
                self.pending.insert(
                    info.name.clone(),
                    Registered {
                        socket,
                        endpoint: info.endpoint,
                        version,
                        node_id,
                        topology: accessible_topology.map(Into::into).unwrap_or_default(),
                        max_volumes: max_volumes_per_node,
                    },
                );
            }
            Ok(Response::NodeInfo { .. }) => self.notify(
                &socket,
                false,
                "error registering CSI driver: node ID is empty".into(),
            ),
            Ok(other) => self.notify(&socket, false, format!("NodeGetInfo answered {other:?}")),
            Err(e) => self.notify(
                &socket,
                false,
                format!("error during CSI NodeGetInfo call: {}", e.go_error()),
            ),
        }
    }

    fn on_input(&mut self, now: Tick, input: WatcherInput) {
        self.now = self.now.max(now);
        match input {
            WatcherInput::SocketAdded(socket) => {
                // A socket created again (its registrar restarted): the
                // kubelet's reconciler deregisters what it registered from
                // that socket, then registers it anew.
                self.deregister(&socket);
                self.sockets.insert(socket.clone());
                self.retry.succeed(&socket);
                self.get_info(socket);
            }
            WatcherInput::SocketRemoved(socket) => {
                self.sockets.remove(&socket);
                self.retry.succeed(&socket);
                self.deregister(&socket);
            }
            WatcherInput::InfoDone { op, result } => self.info_done(op, result),
            WatcherInput::NodeInfoDone { op, result } => self.node_info_done(op, result),
            WatcherInput::NotifyDone { op } => {
                self.steps.remove(&op);
            }
            WatcherInput::Watch(Watch::Applied(o)) => {
                self.cache.apply(o);
            }
            WatcherInput::Watch(Watch::Deleted(o)) => {
                self.cache.delete(&o);
            }
            WatcherInput::ApiDone { op, result } => self.written(op, result),
        }
    }

    /// The plugins registered from `socket` go: their CSINode entries and
    /// node annotation keys are removed next.
    fn deregister(&mut self, socket: &str) {
        let found: Vec<String> = self
            .plugins
            .iter()
            .filter(|(_, p)| p.socket == socket)
            .map(|(n, _)| n.clone())
            .collect();
        for driver in found {
            self.plugins.remove(&driver);
            self.removing.insert(driver, ());
        }
    }

    /// E5.4, E5.5: the handler's checks (kubelet's ValidatePlugin).
    fn validate(&self, socket: &str, info: &PluginInfo) -> Result<(u64, u64, u64), String> {
        if info.type_ != CSI_PLUGIN {
            return Err(format!(
                "no handler registered for plugin type: {}",
                info.type_
            ));
        }
        if info.supported_versions.is_empty() {
            return Err(format!(
                "kubernetes.io/csi: ValidatePlugin for CSI driver {:?} failed. Plugin returned an empty list for supported versions",
                info.name
            ));
        }
        let version = highest_v1(&info.supported_versions).ok_or_else(|| {
            format!(
                "kubernetes.io/csi: ValidatePlugin for CSI driver {:?} failed. None of the versions specified {:?} are supported",
                info.name, info.supported_versions
            )
        })?;
        if let Some(old) = self.holder(&info.name)
            && old.0 != socket
            && old.1 >= version
        {
            let (a, b, c) = old.1;
            return Err(format!(
                "kubernetes.io/csi: ValidatePlugin for CSI driver {:?} failed. Another driver with the same name is already registered with a higher supported version: \"{a}.{b}.{c}\"",
                info.name
            ));
        }
        Ok(version)
    }

    /// The socket and version that hold driver `name`: registered, being
    /// written, or asking NodeGetInfo. Upstream's RegisterPlugin records the
    /// driver before its NodeGetInfo, so the first of two racing sockets
    /// holds the name and the second is checked against it.
    fn holder(&self, name: &str) -> Option<(&str, (u64, u64, u64))> {
        fn known(r: &Registered) -> (&str, (u64, u64, u64)) {
            (r.socket.as_str(), r.version)
        }
        self.plugins
            .get(name)
            .map(known)
            .into_iter()
            .chain(self.pending.get(name).map(known))
            .chain(self.steps.values().filter_map(|s| match s {
                Step::NodeInfo {
                    socket,
                    info,
                    version,
                } if info.name == name => Some((socket.as_str(), *version)),
                _ => None,
            }))
            .max_by_key(|(_, v)| *v)
    }

    fn node(&self) -> Option<Node> {
        match self.cache.find(Kind::Node, "", &self.node) {
            Some(Object::Node(n)) => Some(n.clone()),
            _ => None,
        }
    }

    fn csinode(&self) -> Option<CsiNode> {
        match self.cache.find(Kind::CsiNode, "", &self.node) {
            Some(Object::CsiNode(n)) => Some(n.clone()),
            _ => None,
        }
    }

    fn write(&mut self, step: Step, call: ApiCall) {
        let op = self.op(step);
        self.writing = true;
        self.queue.push_back(WatcherEffect::Api { op, call });
    }

    /// The next node or CSINode write a registration or removal needs; when a
    /// registration needs none, it is notified.
    /// The next write a registration or a removal needs, one at a time:
    /// registrations first, in driver order.
    fn next_write(&mut self) {
        if self.pending.is_empty() && self.removing.is_empty() {
            return;
        }
        let Some(node) = self.node() else { return };
        if let Some((driver, reg)) = self
            .pending
            .iter()
            .next()
            .map(|(d, r)| (d.clone(), r.clone()))
        {
            return self.register_next(&node, driver, &reg);
        }
        if let Some(driver) = self.removing.keys().next().cloned() {
            self.remove_next(&node, driver);
        }
    }

    /// One step of registering `driver`: the node's annotation and
    /// labels (E5.6), then its CSINode entry (E5.7), then the plugin is
    /// told it is registered.
    fn register_next(&mut self, node: &Node, driver: String, reg: &Registered) {
        let step = Step::Write {
            socket: reg.socket.clone(),
            driver: driver.clone(),
        };
        let mut n = node.clone();
        let mut ids = node_ids(&n);
        ids.insert(driver.clone(), reg.node_id.clone());
        n.metadata.annotations.insert(
            names::ANN_NODE_ID.into(),
            serde_json::to_string(&ids).expect("map serialises"),
        );
        for (k, v) in &reg.topology {
            match n.metadata.labels.get(k) {
                Some(old) if old != v => {
                    self.pending.remove(&driver);
                    let msg = format!(
                        "error registering CSI driver: node label {k} is {old:?}, topology wants {v:?}"
                    );
                    self.notify(&reg.socket, false, msg);
                    return;
                }
                _ => {
                    n.metadata.labels.insert(k.clone(), v.clone());
                }
            }
        }
        if n != *node {
            return self.write(step, ApiCall::Update(Object::Node(n)));
        }
        let mut keys: Vec<String> = reg.topology.keys().cloned().collect();
        keys.sort();
        let entry = CsiNodeDriver {
            name: driver.clone(),
            node_id: reg.node_id.clone(),
            topology_keys: keys,
            allocatable: (reg.max_volumes > 0).then(|| VolumeNodeResources {
                count: Some(reg.max_volumes.min(i32::MAX as u64) as i32),
            }),
        };
        match self.csinode() {
            None => {
                let mut c = CsiNode::new(&self.node);
                c.metadata.owner_references.push(OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node.clone(),
                    controller: None,
                    uid: node.metadata.uid.clone(),
                });
                c.spec.drivers.push(entry);
                self.write(step, ApiCall::Create(Object::CsiNode(c)));
            }
            Some(c) if c.driver(&driver) != Some(&entry) => {
                let mut c2 = c.clone();
                c2.spec.drivers.retain(|d| d.name != driver);
                c2.spec.drivers.push(entry);
                self.write(step, ApiCall::Update(Object::CsiNode(c2)));
            }
            Some(_) => {
                self.pending.remove(&driver);
                self.plugins.insert(driver, reg.clone());
                self.notify(&reg.socket, true, String::new());
            }
        }
    }

    /// One step of removing `driver`: out of the node's annotation, then
    /// out of its CSINode.
    fn remove_next(&mut self, node: &Node, driver: String) {
        let step = Step::Remove;
        let mut n = node.clone();
        let mut ids = node_ids(&n);
        ids.remove(&driver);
        if ids.is_empty() {
            n.metadata.annotations.remove(names::ANN_NODE_ID);
        } else {
            n.metadata.annotations.insert(
                names::ANN_NODE_ID.into(),
                serde_json::to_string(&ids).expect("map serialises"),
            );
        }
        if n != *node {
            return self.write(step, ApiCall::Update(Object::Node(n)));
        }
        if let Some(c) = self.csinode()
            && c.driver(&driver).is_some()
        {
            let mut c2 = c.clone();
            c2.spec.drivers.retain(|d| d.name != driver);
            return self.write(step, ApiCall::Update(Object::CsiNode(c2)));
        }
        self.removing.remove(&driver);
    }

    fn written(&mut self, op: OpId, result: ApiResult) {
        let Some(step) = self.steps.remove(&op) else {
            return;
        };
        self.writing = false;
        match result {
            ApiResult::Ok(Some(o)) => {
                self.cache.apply(o);
            }
            ApiResult::Ok(None) | ApiResult::Conflict | ApiResult::Listed(_) => {}
            ApiResult::NotFound | ApiResult::AlreadyExists | ApiResult::Failed(_) => {
                if let Step::Write { socket, driver } = step
                    && let ApiResult::Failed(e) = result
                {
                    self.pending.remove(&driver);
                    self.notify(&socket, false, format!("error updating node objects: {e}"));
                }
            }
        }
    }
}

impl Machine for PluginWatcher {
    type Input = WatcherInput;
    type Effect = WatcherEffect;

    fn handle(&mut self, now: Tick, input: WatcherInput) {
        self.on_input(now, input)
    }

    fn poll(&mut self) -> Option<WatcherEffect> {
        if self.queue.is_empty() && !self.writing {
            self.next_write();
        }
        self.queue.pop_front()
    }

    /// GetInfo calls to retry after nobody answered on a socket.
    fn poll_timeout(&self) -> Option<Tick> {
        self.retry.next_timer()
    }

    fn handle_timeout(&mut self, now: Tick) {
        self.now = self.now.max(now);
        for socket in self.retry.fire_due(self.now) {
            if self.sockets.contains(&socket) {
                self.get_info(socket);
            }
        }
    }

    /// A driver is registered only with a 1.x version and a node id.
    fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        for (name, r) in &self.plugins {
            if r.node_id.is_empty() {
                return Err(format!("plugin watcher: {name} registered without a node id").into());
            }
            if r.version.0 != 1 {
                return Err(format!(
                    "plugin watcher: {name} registered with version {:?}",
                    r.version
                )
                .into());
            }
        }
        Ok(())
    }
}

/// The node's `csi.volume.kubernetes.io/nodeid` annotation as a map.
pub fn node_ids(node: &Node) -> BTreeMap<String, String> {
    node.metadata
        .annotation(names::ANN_NODE_ID)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
