//! The kubelet's volume manager for one node, with the CSI volume plugin
//! (SEMANTICS.md D), as a sans-IO machine.
//!
//! Desired state is the pods bound to this node and their claims; actual
//! state is what was staged and published. Each pass of the reconciler
//! (D1.1) first unpublishes what no pod wants any more, then makes desired
//! volumes ready — report in use, wait for attach, stage once per volume,
//! publish once per pod, expand when the PV outgrew the claim — and last
//! unstages volumes no pod uses.
//!
//! Guarantees:
//! * NodeStage once per volume at kubelet's global mount path; NodePublish
//!   per pod at kubelet's pod path (D3.1, D3.2).
//! * No NodeUnstage while any publish of that volume remains on this node.
//! * One operation per volume at a time.
//! * A call that timed out leaves its volume "uncertain": it is retried or
//!   cleaned up, never forgotten (D2.3). After a restart,
//!   [`Input::Reconstruct`](crate::control::Input::Reconstruct) hands it what
//!   is mounted on the node, taken as uncertain.
//! * Deliberately stricter than upstream: a final error on the *retry* of an
//!   uncertain stage or publish keeps it uncertain (and the volume in use)
//!   until an unstage or unpublish succeeds. Upstream's
//!   `markDeviceErrorState` marks it unmounted, and the volume can then be
//!   detached while the first, timed-out attempt left it staged.

mod keys;
mod reconcile;
mod secrets;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::control::csi_map::DriverModes;
use crate::control::{ApiCall, ApiResult, Controller, CsiResult, Cx, Engine, Users, Watch};
use crate::model::*;
use crate::{Code, Tick};

/// How a node's kubelet runs.
#[derive(Debug, Clone, Hash)]
pub struct KubeletConfig {
    /// The node this kubelet runs on.
    pub node: String,
    /// The CSI driver whose volumes it manages.
    pub driver: String,
    /// The kubelet root directory (`/var/lib/kubelet`).
    pub root: String,
    /// The driver has STAGE_UNSTAGE_VOLUME.
    pub stage_unstage: bool,
    /// The driver has node EXPAND_VOLUME.
    pub node_expand: bool,
    /// What the driver supports (SINGLE_NODE_MULTI_WRITER).
    pub modes: DriverModes,
    /// The first retry delay after a failed operation.
    pub retry_start: Tick,
    /// The longest retry delay.
    pub retry_max: Tick,
    /// Simulation only: a planted mistake.
    pub plant: crate::plant::Planted,
}

impl KubeletConfig {
    /// A volume manager for `driver` on `node`, with the kubelet's defaults.
    pub fn new(node: &str, driver: &str, root: &str) -> KubeletConfig {
        KubeletConfig {
            node: node.into(),
            driver: driver.into(),
            root: root.into(),
            stage_unstage: true,
            node_expand: true,
            modes: DriverModes::default(),
            retry_start: 500,
            retry_max: 120_000,
            plant: crate::plant::Planted::default(),
        }
    }
}

/// How sure the kubelet is about a stage or publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum Certainty {
    /// The call succeeded.
    Done,
    /// The call timed out, or the state was reconstructed: it may or may not
    /// have happened. Retried when wanted, cleaned up when not.
    Uncertain,
}

/// A staged volume (global mount).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Device {
    /// The volume handle.
    pub handle: String,
    /// The global mount path.
    pub staging_path: String,
    /// Done or uncertain.
    pub state: Certainty,
}

/// A volume published to a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct PodMount {
    /// The volume handle.
    pub handle: String,
    /// The pod's UID.
    pub pod: String,
    /// The pod's target path.
    pub target: String,
    /// Done or uncertain.
    pub state: Certainty,
}

/// What the kubelet believes is on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct ActualState {
    /// By PV name.
    pub devices: BTreeMap<String, Device>,
    /// By (pod UID, PV name).
    pub mounts: BTreeMap<(String, String), PodMount>,
}

pub use crate::control::Observed;
pub use keys::KubeletKey;
pub use secrets::NodeSecret;

/// What the kubelet has in flight.
#[derive(Debug, Clone, Hash)]
pub enum Call {
    /// NodeStageVolume of the PV `pv`.
    Stage {
        /// The PV's name.
        pv: String,
        /// An uncertain stage was already recorded when this one was sent
        /// (an earlier attempt timed out, or it was reconstructed).
        retry: bool,
    },
    /// NodeUnstageVolume of the PV `pv`.
    Unstage {
        /// The PV's name.
        pv: String,
    },
    /// NodePublishVolume of the PV `pv` for the pod `pod`.
    Publish {
        /// The PV's name.
        pv: String,
        /// The pod's UID.
        pod: String,
        /// An uncertain publish was already recorded when this one was sent.
        retry: bool,
    },
    /// NodeUnpublishVolume of the PV `pv` for the pod `pod`.
    Unpublish {
        /// The PV's name.
        pv: String,
        /// The pod's UID.
        pod: String,
    },
    /// NodeExpandVolume of the PV `pv` to `bytes`, for the claim `claim`.
    Expand {
        /// The PV's name.
        pv: String,
        /// The claim whose status capacity follows.
        claim: ObjectKey,
        /// The size asked for.
        bytes: u64,
    },
    /// The read of a Secret the PV `pv` names, for its `purpose` call.
    GetSecret {
        /// The PV's name.
        pv: String,
        /// The Secret read.
        secret: SecretReference,
        /// The call it is for.
        purpose: NodeSecret,
    },
    /// An API write, holding `key` busy.
    Api {
        /// What is held busy (`node:…` or `claim:…`).
        key: String,
        /// The object written.
        object: ObjectKey,
    },
}

impl Call {
    /// The volume a node call is about (None for an API call).
    fn volume(&self) -> Option<&String> {
        match self {
            Call::Stage { pv, .. }
            | Call::Unstage { pv }
            | Call::Publish { pv, .. }
            | Call::Unpublish { pv, .. }
            | Call::Expand { pv, .. } => Some(pv),
            Call::Api { .. } | Call::GetSecret { .. } => None,
        }
    }

    /// What the call holds busy: the volume, or the object an API call writes.
    fn key(&self) -> &str {
        match self {
            Call::Stage { pv, .. }
            | Call::Unstage { pv }
            | Call::Publish { pv, .. }
            | Call::Unpublish { pv, .. }
            | Call::Expand { pv, .. }
            | Call::GetSecret { pv, .. } => pv,
            Call::Api { key, .. } => key,
        }
    }
}

/// One node's volume manager. See the module documentation.
pub type Kubelet = Engine<KubeletReconciler>;

/// What Kubelet keeps of its own; the engine keeps the rest.
#[derive(Debug, Clone, Hash)]
pub struct KubeletReconciler {
    config: KubeletConfig,
    /// The claims bound to each volume and the pods naming each claim.
    users: Users,
    actual: ActualState,
    last_event: BTreeMap<ObjectKey, String>,
    /// (PV, call) → the Secret data read for that call's next attempt
    /// (never printed; dropped when used or when the PV goes).
    credentials: BTreeMap<(String, NodeSecret), crate::driver::Secrets>,
}

impl Kubelet {
    /// A volume manager with empty memory (reconstruction comes as an input).
    pub fn new(config: KubeletConfig) -> Kubelet {
        let (retry_start, retry_max) = (config.retry_start, config.retry_max);
        let reconciler = KubeletReconciler {
            config,
            users: Users::default(),
            actual: ActualState::default(),
            last_event: BTreeMap::new(),
            credentials: BTreeMap::new(),
        };
        Engine::driving(reconciler, retry_start, retry_max)
    }
}

impl KubeletReconciler {
    /// What the kubelet believes is staged and published.
    pub fn actual(&self) -> &ActualState {
        &self.actual
    }

    /// Its configuration.
    pub fn config(&self) -> &KubeletConfig {
        &self.config
    }

    /// Takes what a restarted kubelet finds mounted as uncertain actual state (D3.10).
    fn reconstructed(&mut self, cx: &mut Cx<Self>, observed: Observed) {
        for (pv, handle) in observed.staged {
            let staging_path =
                crate::model::names::staging_path(&self.config.root, &self.config.driver, &handle);
            self.actual.devices.insert(
                pv,
                Device {
                    handle,
                    staging_path,
                    state: Certainty::Uncertain,
                },
            );
        }
        for (pod, pv, handle) in observed.published {
            let target = crate::model::names::publish_path(&self.config.root, &pod, &pv);
            self.actual.mounts.insert(
                (pod.clone(), pv),
                PodMount {
                    handle,
                    pod,
                    target,
                    state: Certainty::Uncertain,
                },
            );
        }
        self.mark_everything(cx);
    }

    /// Pods of other nodes are not this kubelet's business.
    fn relevant(&self, o: &Object) -> bool {
        match o {
            Object::Pod(p) => p.node() == Some(self.config.node.as_str()),
            Object::Node(n) => n.metadata.name == self.config.node,
            _ => true,
        }
    }

    /// A node call completed: what the node now has (or may have), and a
    /// backoff after a failure.
    fn csi_completed(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        let uncertain = matches!(&result, Err(e) if matches!(e.code, Code::DeadlineExceeded | Code::Unavailable | Code::Cancelled | Code::Aborted));
        if let Some(pv) = call.volume()
            && result.is_ok()
        {
            cx.succeed(pv);
        }
        match (call, result) {
            (Call::Stage { pv, .. }, Ok(_)) => {
                if let Some(d) = self.actual.devices.get_mut(&pv) {
                    d.state = Certainty::Done;
                }
            }
            (Call::Stage { pv, retry }, Err(e)) => {
                // A final error proves this attempt did nothing, not that
                // an earlier uncertain one did nothing: a retried stage
                // stays uncertain until an unstage succeeds. (Upstream's
                // markDeviceErrorState marks it unmounted, so the volume
                // can be detached while still staged.)
                let was_uncertain = self
                    .actual
                    .devices
                    .get(&pv)
                    .is_some_and(|d| d.state == Certainty::Uncertain);
                if !uncertain && !retry && was_uncertain {
                    self.actual.devices.remove(&pv);
                }
                self.failed_mount(cx, &pv, "MountVolume.MountDevice", &e);
            }
            (Call::Unstage { pv }, Ok(_)) => {
                self.actual.devices.remove(&pv);
            }
            (Call::Unstage { pv }, Err(_)) => {
                if let Some(d) = self.actual.devices.get_mut(&pv) {
                    d.state = Certainty::Uncertain;
                }
                cx.fail(pv);
            }
            (Call::Publish { pv, pod, .. }, Ok(_)) => {
                if let Some(m) = self.actual.mounts.get_mut(&(pod, pv)) {
                    m.state = Certainty::Done;
                }
            }
            (Call::Publish { pv, pod, retry }, Err(e)) => {
                // As for stages: only a first attempt's final error
                // forgets the mount.
                if !uncertain && !retry {
                    self.actual.mounts.remove(&(pod, pv.clone()));
                }
                self.failed_mount(cx, &pv, "MountVolume.SetUp", &e);
            }
            (Call::Unpublish { pv, pod }, Ok(_)) => {
                self.actual.mounts.remove(&(pod, pv.clone()));
                if self
                    .config
                    .plant
                    .is(crate::plant::Plant::UnstageAfterFirstUnpublish)
                {
                    self.unstage_now(cx, &pv);
                }
            }
            (Call::Unpublish { pv, pod }, Err(_)) => {
                if let Some(m) = self.actual.mounts.get_mut(&(pod, pv.clone())) {
                    m.state = Certainty::Uncertain;
                }
                cx.fail(pv);
            }
            (Call::Expand { claim, bytes, .. }, Ok(_)) => self.expanded(cx, &claim, bytes),
            (Call::Expand { pv, claim, .. }, Err(e)) => {
                self.failed_mount(cx, &pv, "MountVolume.NodeExpandVolume", &e);
                self.expand_failed(cx, &claim, &e);
            }
            (Call::Api { .. } | Call::GetSecret { .. }, _) => {}
        }
    }
}

impl Controller for KubeletReconciler {
    type Key = KubeletKey;
    type Call = Call;
    type Retry = String;

    fn retry(&mut self, cx: &mut Cx<Self>, key: String) {
        self.mark_name(cx, &key);
    }

    /// What the volume manager hears of: everything but the snapshot
    /// kinds, VolumeAttributesClasses and CSIStorageCapacities.
    fn watches(&self, kind: Kind) -> bool {
        !matches!(
            kind,
            Kind::VolumeSnapshot
                | Kind::VolumeSnapshotContent
                | Kind::VolumeSnapshotClass
                | Kind::VolumeAttributesClass
                | Kind::CsiStorageCapacity
        )
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        if let Watch::Deleted(o) = &watch
            && o.kind() == Kind::PersistentVolume
        {
            self.drop_node_secrets(&o.meta().name);
        }
        self.observe_watch(cx, watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: KubeletKey) {
        match key {
            KubeletKey::Node => self.node_pass(cx),
            KubeletKey::Volume(pv) => self.volume_pass(cx, &pv),
        }
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        match call {
            Call::GetSecret {
                pv,
                secret,
                purpose,
            } => self.node_secret_read(cx, pv, &secret, purpose, result),
            call => self.api_completed(cx, call, result),
        }
    }

    fn csi_done(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        if let Some(pv) = call.volume() {
            let pv = pv.clone();
            self.mark_volume(cx, &pv);
        }
        self.csi_completed(cx, call, result);
    }

    fn resync(&mut self, cx: &mut Cx<Self>) {
        self.mark_everything(cx);
    }

    fn reconstruct(&mut self, cx: &mut Cx<Self>, observed: Observed) {
        self.reconstructed(cx, observed);
    }

    /// One operation per volume at a time; a pod mount is recorded only
    /// for a volume whose global mount is recorded (when the driver stages).
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        crate::machine::one_at_a_time(
            "kubelet",
            cx.in_flight().map(Call::key),
            |k| cx.busy(k),
            cx.held_count(),
        )?;
        if self.config.stage_unstage {
            for ((pod, pv), m) in &self.actual.mounts {
                if m.state == Certainty::Done && !self.actual.devices.contains_key(pv) {
                    return Err(format!(
                        "kubelet: pod {pod} has {pv} mounted with no global mount recorded"
                    )
                    .into());
                }
            }
        }
        Ok(())
    }
}
