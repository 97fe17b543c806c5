//! Attach and detach: the attach/detach controller and external-attacher as
//! one sans-IO machine (SEMANTICS.md C).
//!
//! The controller half turns scheduled pods into VolumeAttachments, applies
//! the multi-attach rule, waits for unmount before detaching (forcing only
//! after the timeout on an unhealthy or out-of-service node) and keeps
//! `node.status.volumesAttached` in step. The attacher half carries
//! VolumeAttachments out with ControllerPublish/ControllerUnpublish and
//! reports in their status.
//!
//! Guarantees:
//! * A volume whose access modes contain neither RWX nor ROX is never
//!   attached to a second node (C3.3, C3.4).
//! * Nothing is detached while the node reports it in `volumesInUse`, unless
//!   forced after `max_wait_for_unmount` on a not-Ready node, or the node has
//!   the out-of-service taint (C3.6).
//! * A volume leaves `volumesAttached` before its detach starts (C3.7).

mod attacher;
mod keys;
#[cfg(test)]
mod tests;

use crate::control::Users;
pub use keys::AttachKey;

use std::collections::{BTreeMap, BTreeSet};

use crate::Tick;
use crate::control::csi_map::DriverModes;
use crate::control::{ApiCall, ApiResult, Controller, CsiResult, Cx, Engine, Event, Watch};
use crate::machine::TimerTable;
use crate::model::names::{self, reason};
use crate::model::*;

/// How the attach machine runs.
#[derive(Debug, Clone, Hash)]
pub struct AttachConfig {
    /// The CSI driver whose volumes and VolumeAttachments this machine handles.
    pub driver: String,
    /// What the driver supports (SINGLE_NODE_MULTI_WRITER).
    pub modes: DriverModes,
    /// The driver has PUBLISH_READONLY.
    pub publish_readonly: bool,
    /// The driver has no PUBLISH_UNPUBLISH_VOLUME: attach is bookkeeping only (C2.9).
    pub trivial: bool,
    /// Run the attach/detach controller half (VolumeAttachments from
    /// scheduled pods, `volumesAttached`). Off, the machine is
    /// external-attacher alone, for clusters whose kube-controller-manager
    /// runs the attach/detach controller.
    pub attach_detach: bool,
    /// How long to wait for unmount on an unhealthy node before forcing (C3.6).
    pub max_wait_for_unmount: Tick,
    /// The first retry delay after a failure.
    pub retry_start: Tick,
    /// The longest retry delay.
    pub retry_max: Tick,
    /// `--node-deployment`: only the VolumeAttachments of this node are
    /// carried out here (an attacher runs on every node).
    pub node: Option<String>,
    /// Simulation only: a planted mistake.
    pub plant: crate::plant::Planted,
}

impl AttachConfig {
    /// The attach/detach controller and attacher for `driver`, with Kubernetes' defaults.
    pub fn new(driver: &str) -> AttachConfig {
        AttachConfig {
            driver: driver.into(),
            modes: DriverModes::default(),
            publish_readonly: true,
            trivial: false,
            attach_detach: true,
            max_wait_for_unmount: 6 * 60 * 1000,
            retry_start: 1_000,
            retry_max: 300_000,
            node: None,
            plant: crate::plant::Planted::default(),
        }
    }
}

/// What attach/detach has in flight.
#[derive(Debug, Clone, Hash)]
pub enum Call {
    /// An API write; `key` is the lock it holds, `object` what it writes.
    Api {
        /// The VolumeAttachment (or node status) held busy.
        key: String,
        /// The object written.
        object: ObjectKey,
        /// The incarnation written ("" for a delete by name).
        uid: String,
        /// The passes to run again when it completes (or, after a
        /// failure, when its retry comes).
        marks: Vec<AttachKey>,
    },
    /// ControllerPublishVolume for the VolumeAttachment `va`.
    Publish {
        /// The VolumeAttachment's name.
        va: String,
    },
    /// ControllerUnpublishVolume for the VolumeAttachment `va`.
    Unpublish {
        /// The VolumeAttachment's name.
        va: String,
    },
    /// The read of the PV's `controllerPublishSecretRef` for the
    /// VolumeAttachment `va`'s publish (or, `publish` false, unpublish).
    GetSecret {
        /// The VolumeAttachment's name.
        va: String,
        /// Publish (true) or unpublish.
        publish: bool,
        /// The Secret read.
        secret: SecretReference,
    },
}

/// The attach/detach controller and external-attacher. See the module docs.
pub type Attach = Engine<AttachReconciler>;

/// What Attach keeps of its own; the engine keeps the rest.
#[derive(Debug, Clone, Hash)]
pub struct AttachReconciler {
    config: AttachConfig,
    users: Users,
    /// (pod key, pv) pairs already told about multi-attach.
    multi_attach_told: BTreeSet<(String, String)>,
    /// VolumeAttachment → when its detach was first wanted.
    detach_wanted: BTreeMap<String, Tick>,
    /// When each wanted detach stops waiting for the node (its
    /// maxWaitForUnmountDuration), by VolumeAttachment.
    force_at: TimerTable<String>,
    /// VolumeAttachments this machine asked to delete (the detach is under
    /// way, whatever its cache still shows): never reported attached again.
    detaching: BTreeSet<String>,
    /// VolumeAttachments created but not yet seen back: name → (PV, node).
    /// Counted by the multi-attach rule, like the controller's actual state.
    creating: BTreeMap<String, (String, String)>,
    /// VolumeAttachment → the controller-publish Secret's data read for
    /// its next ControllerPublish or ControllerUnpublish (never printed).
    credentials: BTreeMap<String, crate::driver::Secrets>,
}

/// One desired attachment.
#[derive(Debug, Clone, Hash)]
struct Desired {
    pv: Shared<PersistentVolume>,
    node: String,
    /// The pods that want it: (namespace, name).
    pods: Vec<(String, String)>,
}

impl Attach {
    /// A machine with empty memory (a process that just started).
    pub fn new(config: AttachConfig) -> Attach {
        let (retry_start, retry_max) = (config.retry_start, config.retry_max);
        let reconciler = AttachReconciler {
            users: Users::default(),
            config,
            multi_attach_told: BTreeSet::new(),
            detach_wanted: BTreeMap::new(),
            force_at: TimerTable::default(),
            creating: BTreeMap::new(),
            credentials: BTreeMap::new(),
            detaching: BTreeSet::new(),
        };
        Engine::driving(reconciler, retry_start, retry_max)
    }
}

impl AttachReconciler {
    fn api(&mut self, cx: &mut Cx<Self>, key: String, call: ApiCall) {
        let (object, uid) = (call.key(), call.uid().to_string());
        let marks = self.keys_of_call(cx, &call);
        let what = Call::Api {
            key: key.clone(),
            object,
            uid,
            marks,
        };
        cx.api_holding([key], call, what);
    }

    fn ready(&self, cx: &Cx<Self>, key: &str) -> bool {
        cx.idle(key)
    }

    fn get<T>(
        &self,
        cx: &Cx<Self>,
        kind: Kind,
        ns: &str,
        name: &str,
        f: impl Fn(&Object) -> Option<&T>,
    ) -> Option<T>
    where
        T: Clone,
    {
        cx.cache().find(kind, ns, name).and_then(f).cloned()
    }

    fn pv(&self, cx: &Cx<Self>, name: &str) -> Option<Shared<PersistentVolume>> {
        cx.cache().shared("", name)
    }

    fn node(&self, cx: &Cx<Self>, name: &str) -> Option<Shared<Node>> {
        cx.cache().shared("", name)
    }

    /// This driver's VolumeAttachments of `volume`, shared with the cache.
    fn vas_of(&self, cx: &Cx<Self>, volume: &str) -> Vec<Shared<VolumeAttachment>> {
        self.vas_where(cx, |v| v.pv_name() == volume)
    }

    /// This driver's VolumeAttachments on `node`.
    fn vas_on(&self, cx: &Cx<Self>, node: &str) -> Vec<Shared<VolumeAttachment>> {
        self.vas_where(cx, |v| v.spec.node_name == node)
    }

    fn vas_where(
        &self,
        cx: &Cx<Self>,
        f: impl Fn(&VolumeAttachment) -> bool,
    ) -> Vec<Shared<VolumeAttachment>> {
        cx.cache()
            .shared_all::<VolumeAttachment>()
            .filter(|v| v.spec.attacher == self.config.driver && f(v))
            .collect()
    }

    /// C1.8: attach required unless the CSIDriver says attachRequired=false.
    fn attach_required(&self, cx: &Cx<Self>) -> bool {
        self.get(cx, Kind::CsiDriver, "", &self.config.driver, |o| match o {
            Object::CsiDriver(d) => Some(d),
            _ => None,
        })
        .is_none_or(|d| d.attach_required())
    }

    /// The nodes scheduled, live pods want `volume` on ((pv, node) → the
    /// pods), found through the claims bound to it.
    fn desired_of(&self, cx: &Cx<Self>, volume: &str) -> BTreeMap<(String, String), Desired> {
        let mut out: BTreeMap<(String, String), Desired> = BTreeMap::new();
        let Some(pv) = self.pv(cx, volume) else {
            return out;
        };
        if pv
            .spec
            .csi
            .as_ref()
            .is_none_or(|s| s.driver != self.config.driver)
        {
            return out;
        }
        for (namespace, claim) in self.users.claims_of(volume) {
            for name in self.users.pods_of(namespace, claim) {
                let Some(Object::Pod(pod)) = cx.cache().find(Kind::Pod, namespace, name) else {
                    continue;
                };
                let Some(node) = pod.node() else { continue };
                if pod.terminated() || pod.metadata.deleting() {
                    continue;
                }
                out.entry((volume.to_string(), node.to_string()))
                    .or_insert_with(|| Desired {
                        pv: pv.clone(),
                        node: node.to_string(),
                        pods: vec![],
                    })
                    .pods
                    .push((namespace.clone(), name.clone()));
            }
        }
        out
    }

    /// True when this machine runs the attach/detach controller half now.
    fn controlling(&self, cx: &Cx<Self>) -> bool {
        self.config.attach_detach && self.attach_required(cx)
    }

    /// One volume: detach what is no longer wanted, attach what is, carry
    /// its VolumeAttachments out.
    fn sync_volume(&mut self, cx: &mut Cx<Self>, volume: &str) {
        if self.controlling(cx) {
            let desired = self.desired_of(cx, volume);
            self.detach_pass(cx, &desired, &self.vas_of(cx, volume));
            self.attach_pass(cx, &desired, &self.vas_of(cx, volume));
        }
        self.attacher_pass(cx, volume);
    }

    /// One node: its `status.volumesAttached`.
    fn sync_node(&mut self, cx: &mut Cx<Self>, node: &str) {
        if !self.controlling(cx) {
            return;
        }
        let vas = self.vas_on(cx, node);
        let mut desired = BTreeMap::new();
        for volume in vas.iter().map(|v| v.pv_name()).collect::<BTreeSet<_>>() {
            desired.extend(self.desired_of(cx, volume));
        }
        self.node_status_pass(cx, node, &desired, &vas);
    }

    /// C3.6, C3.7: detach what is no longer wanted, once it is safe.
    fn detach_pass(
        &mut self,
        cx: &mut Cx<Self>,
        desired: &BTreeMap<(String, String), Desired>,
        vas: &[Shared<VolumeAttachment>],
    ) {
        let wanted: BTreeSet<String> = vas
            .iter()
            .filter(|va| {
                desired.contains_key(&(va.pv_name().to_string(), va.spec.node_name.clone()))
            })
            .map(|va| va.metadata.name.clone())
            .collect();
        self.detach_wanted.retain(|name, _| !wanted.contains(name));
        for name in &wanted {
            self.force_at.stop(name);
        }
        for va in vas {
            let name = va.metadata.name.clone();
            if wanted.contains(&name) || va.metadata.deleting() || !self.ready(cx, &name) {
                continue;
            }
            let since = *self.detach_wanted.entry(name.clone()).or_insert_with(|| {
                self.force_at
                    .set(name.clone(), cx.now() + self.config.max_wait_for_unmount);
                cx.now()
            });
            let node = self.node(cx, &va.spec.node_name);
            let unique = self.pv(cx, va.pv_name()).and_then(|pv| {
                pv.spec
                    .csi
                    .as_ref()
                    .map(|c| names::unique_volume_name(&c.driver, &c.volume_handle))
            });
            let in_use = match (&node, &unique) {
                (Some(n), Some(u)) => n.status.volumes_in_use.contains(u),
                _ => false,
            };
            let force = node.as_ref().is_some_and(|n| {
                n.out_of_service()
                    || (!n.ready() && cx.now() >= since + self.config.max_wait_for_unmount)
            });
            let careless = self
                .config
                .plant
                .is(crate::plant::Plant::DetachWithoutWaitingForUnmount);
            if in_use && !force && !careless {
                continue;
            }
            // Out of volumesAttached first; the detach waits for that write.
            if let (Some(n), Some(u)) = (&node, &unique)
                && n.status.volumes_attached.iter().any(|a| &a.name == u)
            {
                if self.ready(cx, &n.metadata.name) {
                    let mut n = Node::clone(n);
                    n.status.volumes_attached.retain(|a| &a.name != u);
                    self.api(
                        cx,
                        n.metadata.name.clone(),
                        ApiCall::UpdateStatus(Object::Node(n)),
                    );
                }
                continue;
            }
            self.detach_wanted.remove(&name);
            self.force_at.stop(&name);
            self.detaching.insert(name.clone());
            self.api(
                cx,
                name.clone(),
                ApiCall::Delete(ObjectKey::new(Kind::VolumeAttachment, "", &name)),
            );
        }
    }

    /// C1.1, C3.3, C3.4: create the VolumeAttachments scheduled pods need.
    fn attach_pass(
        &mut self,
        cx: &mut Cx<Self>,
        desired: &BTreeMap<(String, String), Desired>,
        vas: &[Shared<VolumeAttachment>],
    ) {
        for d in desired.values() {
            let Some(csi) = d.pv.spec.csi.clone() else {
                continue;
            };
            let name =
                names::volume_attachment_name(&csi.volume_handle, &self.config.driver, &d.node);
            if vas.iter().any(|v| v.metadata.name == name) || !self.ready(cx, &name) {
                continue;
            }
            let mut elsewhere: Vec<String> = vas
                .iter()
                .filter(|v| v.pv_name() == d.pv.name() && v.spec.node_name != d.node)
                .map(|v| v.spec.node_name.clone())
                .collect();
            elsewhere.extend(
                self.creating
                    .values()
                    .filter(|(pv, node)| pv == d.pv.name() && *node != d.node)
                    .map(|(_, node)| node.clone()),
            );
            if !elsewhere.is_empty() && !multi_attach_allowed(&d.pv) {
                self.tell_multi_attach(cx, d, &elsewhere, desired);
                continue;
            }
            let va = VolumeAttachment::new(&name, &self.config.driver, &d.node, d.pv.name());
            self.creating
                .insert(name.clone(), (d.pv.name().to_string(), d.node.clone()));
            self.api(cx, name, ApiCall::Create(Object::Va(va)));
        }
    }

    fn tell_multi_attach(
        &mut self,
        cx: &mut Cx<Self>,
        d: &Desired,
        elsewhere: &[String],
        desired: &BTreeMap<(String, String), Desired>,
    ) {
        let users: Vec<&(String, String)> = elsewhere
            .iter()
            .filter_map(|node| desired.get(&(d.pv.name().to_string(), node.clone())))
            .flat_map(|o| o.pods.iter())
            .collect();
        for (namespace, name) in &d.pods {
            let told = (format!("{namespace}/{name}"), d.pv.name().to_string());
            if !self.multi_attach_told.insert(told) {
                continue;
            }
            let same: Vec<&str> = users
                .iter()
                .filter(|(ns, _)| ns == namespace)
                .map(|(_, n)| n.as_str())
                .collect();
            let others = users.len() - same.len();
            let msg = if users.is_empty() {
                format!(
                    "Multi-Attach error for volume {:?} Volume is already exclusively attached to one node and can't be attached to another",
                    d.pv.name()
                )
            } else {
                let mut m = format!(
                    "Multi-Attach error for volume {:?} Volume is already used by pod(s) {}",
                    d.pv.name(),
                    same.join(", ")
                );
                if others > 0 {
                    m.push_str(&format!(" and {others} pod(s) in different namespaces"));
                }
                m
            };
            let key = ObjectKey::new(Kind::Pod, namespace, name);
            cx.event(Event::warning(key, reason::FAILED_ATTACH_VOLUME, msg));
        }
    }

    /// C3.8: `node.status.volumesAttached` lists what is attached there.
    fn node_status_pass(
        &mut self,
        cx: &mut Cx<Self>,
        node: &str,
        desired: &BTreeMap<(String, String), Desired>,
        vas: &[Shared<VolumeAttachment>],
    ) {
        let mut per_node: BTreeMap<String, BTreeSet<AttachedVolume>> = BTreeMap::new();
        for va in vas {
            if !va.status.attached
                || va.metadata.deleting()
                || self.detaching.contains(&va.metadata.name)
            {
                continue;
            }
            if !desired.contains_key(&(va.pv_name().to_string(), va.spec.node_name.clone())) {
                continue;
            }
            let Some(csi) = self.pv(cx, va.pv_name()).and_then(|pv| pv.spec.csi.clone()) else {
                continue;
            };
            per_node
                .entry(va.spec.node_name.clone())
                .or_default()
                .insert(AttachedVolume {
                    name: names::unique_volume_name(&csi.driver, &csi.volume_handle),
                    device_path: va.metadata.name.clone(),
                });
        }
        if per_node.is_empty() {
            return;
        }
        if let Some(n) = self.node(cx, node) {
            let ours = per_node.remove(&n.metadata.name).unwrap_or_default();
            // Additions only here: removals happen in the detach pass, before the detach.
            if ours.iter().all(|a| n.status.volumes_attached.contains(a))
                || !self.ready(cx, &n.metadata.name)
            {
                return;
            }
            let mut merged: BTreeSet<AttachedVolume> =
                n.status.volumes_attached.iter().cloned().collect();
            merged.extend(ours);
            let mut n2 = Node::clone(&n);
            n2.status.volumes_attached = merged.into_iter().collect();
            self.api(
                cx,
                n.metadata.name.clone(),
                ApiCall::UpdateStatus(Object::Node(n2)),
            );
        }
    }
}

/// C3.3: volumes without RWX or ROX (RWO/RWOP only) attach to one node.
pub fn multi_attach_allowed(pv: &PersistentVolume) -> bool {
    pv.spec.access_modes.is_empty()
        || pv
            .spec
            .access_modes
            .iter()
            .any(|m| matches!(m, AccessMode::ReadWriteMany | AccessMode::ReadOnlyMany))
}

/// Attach/detach reconciles one volume or one node at a time (see
/// [`AttachKey`]); a failure backs off the VolumeAttachment, node or volume it
/// wrote.
impl Controller for AttachReconciler {
    type Key = AttachKey;
    type Call = Call;
    type Retry = String;

    fn retry(&mut self, cx: &mut Cx<Self>, name: String) {
        self.mark_name(cx, &name);
    }

    /// external-attacher's informers, and the pods and claims the
    /// attach/detach controller reads.
    fn watches(&self, kind: Kind) -> bool {
        match kind {
            Kind::VolumeAttachment
            | Kind::PersistentVolume
            | Kind::CsiDriver
            | Kind::CsiNode
            | Kind::Node => true,
            Kind::Pod | Kind::PersistentVolumeClaim => self.config.attach_detach,
            _ => false,
        }
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        self.observe_watch(cx, watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: AttachKey) {
        match key {
            AttachKey::Volume(v) => self.sync_volume(cx, &v),
            AttachKey::Node(n) => self.sync_node(cx, &n),
        }
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        if let Call::GetSecret {
            va,
            publish,
            secret,
        } = call
        {
            return self.secret_read(cx, va, publish, &secret, result);
        }
        let Call::Api {
            key,
            object,
            uid,
            marks,
        } = call
        else {
            return;
        };
        // A retry remembered for this key is superseded by this answer.
        cx.take_requeue(&key);
        cx.mark_all(marks.iter().cloned());
        match result {
            ApiResult::Ok(Some(o)) => {
                self.creating.remove(&o.meta().name);
                self.mark_object(cx, &o);
                let old = cx.cache().get_shared(&o.key());
                if cx.cache_mut().apply(o.clone()) {
                    if let Some(old) = old {
                        self.index(&old, false);
                    }
                    self.index(&o, true);
                }
            }
            // The write removed the object (its last finalizer
            // went), or it was gone: forget it now rather than
            // act on it again before its watch event arrives.
            ApiResult::Ok(None) | ApiResult::NotFound => {
                self.detaching.remove(&*object.name);
                if let Some(gone) = cx.cache_mut().gone(&object, &uid) {
                    self.index(&gone, false);
                }
            }
            _ => {
                self.creating.remove(&key);
                cx.fail(key.clone());
                cx.requeue(key.clone(), marks);
            }
        }
        self.mark_name(cx, &key);
    }

    fn csi_done(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        let va = match &call {
            Call::Publish { va } | Call::Unpublish { va } => va.clone(),
            Call::Api { .. } | Call::GetSecret { .. } => return,
        };
        if result.is_ok() {
            // Its backoff ends (csi_completed): no retry will come for it.
            cx.take_requeue(&va);
        }
        self.csi_completed(cx, call, result);
        self.mark_name(cx, &va);
    }

    fn resync(&mut self, cx: &mut Cx<Self>) {
        self.mark_everything(cx);
    }

    fn deadline(&self, _cx: &Cx<Self>) -> Option<Tick> {
        self.force_at.next()
    }

    /// A detach that waited long enough goes ahead.
    fn fire(&mut self, cx: &mut Cx<Self>, now: Tick) {
        for va in self.force_at.expire(now) {
            self.mark_name(cx, &va);
        }
    }

    /// One operation per VolumeAttachment (or node status) at a time.
    /// A retry is remembered only for a key still backing off.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        let keys = cx.in_flight().map(|c| match c {
            Call::Api { key, .. } => key,
            Call::Publish { va } | Call::Unpublish { va } | Call::GetSecret { va, .. } => va,
        });
        crate::machine::one_at_a_time(
            "attach/detach",
            keys,
            |k: &String| cx.busy(k),
            cx.held_count(),
        )
    }
}
