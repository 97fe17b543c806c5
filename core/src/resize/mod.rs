//! The resizer: kubernetes-csi's external-resizer as a sans-IO machine.
//!
//! Its [`expand`] half grows volumes: a bound claim whose request exceeds
//! its status capacity is expanded controller side (ControllerExpandVolume),
//! the PV's capacity follows, and then either the node finishes (the claim
//! gets `NodeResizePending`, and the kubelet runs NodeExpandVolume, then
//! writes the claim's capacity) or, when the driver needs no node step, the
//! claim's status capacity is written here, last. A user may take back a
//! request that proved infeasible (RecoverVolumeExpansionFailure).
//!
//! Guarantees: the claim's status capacity only ever moves to a size the
//! volume really has; a failed expansion is reported (`VolumeResizeFailed`)
//! and retried with backoff, and the claim keeps its previous size.
//!
//! Its [`modify`] half changes a volume's VolumeAttributesClass.

pub mod expand;
pub mod modify;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::Tick;
use crate::control::csi_map::DriverModes;
use crate::control::{ApiCall, ApiResult, Controller, CsiResult, Cx, Engine, Event, Watch};
use crate::driver::{self, Request};
use crate::machine::TimerTable;
use crate::model::names::{self, reason};
use crate::model::*;

pub use crate::model::names::expansion::{FS_RESIZE_PENDING, RESIZING};

/// How the resizer runs.
#[derive(Debug, Clone, Hash)]
pub struct ResizeConfig {
    /// The driver whose volumes it resizes.
    pub driver: String,
    /// What the driver supports.
    pub modes: DriverModes,
    /// The driver has EXPAND_VOLUME: claims that ask for more are expanded.
    pub expand: bool,
    /// The driver has MODIFY_VOLUME: claims that name another
    /// VolumeAttributesClass are modified.
    pub modify: bool,
    /// `--extra-modify-metadata`: ControllerModifyVolume's parameters also
    /// name the claim and the PV.
    pub extra_modify_metadata: bool,
    /// The first retry delay after a failure.
    pub retry_start: Tick,
    /// The longest retry delay.
    pub retry_max: Tick,
    /// `--node-deployment`: this node's segment; only volumes it reaches
    /// are resized and modified here (a resizer runs on every node).
    pub node_topology: Option<crate::provision::topology::Term>,
    /// Simulation only: a planted mistake.
    pub plant: crate::plant::Planted,
}

impl ResizeConfig {
    /// An external-resizer for `driver`, with the sidecar's defaults.
    pub fn new(driver: &str) -> ResizeConfig {
        ResizeConfig {
            driver: driver.into(),
            modes: DriverModes::default(),
            expand: true,
            modify: false,
            extra_modify_metadata: false,
            retry_start: 1_000,
            retry_max: 300_000,
            node_topology: None,
            plant: crate::plant::Planted::default(),
        }
    }
}

/// What the resizer has in flight.
#[derive(Debug, Clone, Hash)]
pub enum Call {
    /// ControllerExpandVolume of the PV `pv`, for the claim `claim`.
    Expand {
        /// The claim.
        claim: ObjectKey,
        /// The PV's name.
        pv: String,
    },
    /// ControllerModifyVolume of the claim `claim`'s volume, to the
    /// VolumeAttributesClass `target`.
    Modify {
        /// The claim.
        claim: ObjectKey,
        /// The PV's name.
        pv: String,
        /// The class the volume is being modified to.
        target: String,
    },
    /// An API write about the claim `claim`.
    Api {
        /// The claim.
        claim: ObjectKey,
    },
    /// The read of a Secret the PV `pv` names, for the claim `claim`'s
    /// ControllerExpandVolume or ControllerModifyVolume.
    GetSecret {
        /// The claim.
        claim: ObjectKey,
        /// The PV's name.
        pv: String,
        /// The Secret read.
        secret: SecretReference,
        /// The call it is for.
        purpose: SecretFor,
    },
}

/// The call a Secret is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretFor {
    /// ControllerExpandVolume.
    Expand,
    /// ControllerModifyVolume.
    Modify,
}

/// The external resizer. See the module documentation.
pub type Resizer = Engine<ResizeReconciler>;

/// What the external resizer keeps of its own.
#[derive(Debug, Clone, Hash)]
pub struct ResizeReconciler {
    config: ResizeConfig,
    /// What ControllerExpand answered, by claim: (the PV, capacity, node
    /// expansion required).
    expanded: BTreeMap<ObjectKey, (String, u64, bool)>,
    told: BTreeMap<ObjectKey, String>,
    /// Claim → the controller-expand Secret's data read for its next
    /// ControllerExpandVolume (never printed).
    credentials: BTreeMap<ObjectKey, driver::Secrets>,
    /// Claim → the Secret's data read for its next ControllerModifyVolume.
    modify_credentials: BTreeMap<ObjectKey, driver::Secrets>,
    /// Claims whose last modify may still be running (or that were
    /// InProgress when first seen): carried on to the class it was for.
    uncertain: BTreeSet<ObjectKey>,
    /// Claims Infeasible for the class they name: not tried again before
    /// (the engine's backoff wakes them then).
    slow: TimerTable<ObjectKey>,
    /// Claims whose volume (this PV) was modified to this class; the PV
    /// and the claim's status are still to say so.
    modified: BTreeMap<ObjectKey, (String, String)>,
    /// Claims whose last ControllerExpandVolume failed for good.
    final_errors: BTreeSet<ObjectKey>,
}

impl Resizer {
    /// A resizer with empty memory.
    pub fn new(config: ResizeConfig) -> Resizer {
        let (start, max) = (config.retry_start, config.retry_max);
        let reconciler = ResizeReconciler {
            config,
            expanded: BTreeMap::new(),
            told: BTreeMap::new(),
            credentials: BTreeMap::new(),
            modify_credentials: BTreeMap::new(),
            uncertain: BTreeSet::new(),
            slow: TimerTable::default(),
            modified: BTreeMap::new(),
            final_errors: BTreeSet::new(),
        };
        Engine::driving(reconciler, start, max)
    }
}

impl ResizeReconciler {
    fn mark(&mut self, cx: &mut Cx<Self>, o: &Object) {
        match o {
            Object::Pvc(c) => {
                // Found InProgress before this resizer touched it: a call
                // of an earlier life may still be running.
                let first_sight = cx.cache().get(&o.key()).is_none();
                let in_progress = c
                    .status
                    .modify_volume_status
                    .as_ref()
                    .is_some_and(|s| s.status == modify::IN_PROGRESS);
                if first_sight && in_progress {
                    self.uncertain.insert(o.key());
                }
                // A changed spec (a new size or class asked) ends a
                // backoff's wait, as upstream's update handlers requeue
                // it; the echo of a status write does not.
                let spec_changed = match cx.cache().get(&o.key()) {
                    Some(Object::Pvc(old)) => old.spec != c.spec,
                    _ => true,
                };
                if spec_changed {
                    cx.news(&o.key());
                }
                cx.mark(o.key());
            }
            // The claims that name a class that came or changed.
            Object::AttributesClass(vac) => {
                let name = vac.metadata.name.as_str();
                let claims: Vec<ObjectKey> = cx
                    .cache()
                    .of_kind(Kind::PersistentVolumeClaim)
                    .filter(|c| {
                        c.as_pvc()
                            .is_some_and(|c| c.volume_attributes_class() == Some(name))
                    })
                    .map(Object::key)
                    .collect();
                cx.mark_all(claims);
            }
            Object::Pv(pv) => {
                if let Some(r) = &pv.spec.claim_ref {
                    cx.mark(ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        &r.namespace,
                        &r.name,
                    ));
                }
            }
            _ => {}
        }
    }

    fn api(&mut self, cx: &mut Cx<Self>, claim: &ObjectKey, call: ApiCall) {
        cx.api_holding(
            [claim.clone()],
            call,
            Call::Api {
                claim: claim.clone(),
            },
        );
    }

    fn tell(&mut self, cx: &mut Cx<Self>, claim: &ObjectKey, e: Event) {
        if self.told.get(claim) == Some(&e.message) {
            return;
        }
        self.told.insert(claim.clone(), e.message.clone());
        cx.event(e);
    }

    /// One claim: a bound claim of this driver's whose request outgrew
    /// its status capacity is marked Resizing, expanded, its PV's capacity
    /// follows, and its status is finished (or left to the node).
    fn sync(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        if !cx.idle(key) {
            return;
        }
        let Some(shared) = cx.cache().get_shared(key) else {
            return;
        };
        let Object::Pvc(claim) = &*shared else {
            return;
        };
        let Some(pv) = self.volume_of(cx, claim) else {
            return;
        };
        if self.sync_modify(cx, key, claim, &pv) || !self.config.expand {
            return;
        }
        self.sync_expand(cx, key, claim, &pv);
    }

    /// The claim `claim` is still bound to the PV `pv` (an answer about the
    /// volume of a claim deleted and made again under its name is not
    /// about its namesake).
    fn still_bound(&self, cx: &Cx<Self>, claim: &ObjectKey, pv: &str) -> bool {
        matches!(cx.cache().get(claim), Some(Object::Pvc(c)) if c.volume_name() == pv)
    }

    /// The volume of a bound claim, when it is one of this driver's.
    fn volume_of(&self, cx: &Cx<Self>, claim: &PersistentVolumeClaim) -> Option<PersistentVolume> {
        if claim.phase() != PvcPhase::Bound {
            return None;
        }
        let pv = match cx
            .cache()
            .find(Kind::PersistentVolume, "", claim.volume_name())
        {
            Some(Object::Pv(pv)) => pv.clone(),
            _ => return None,
        };
        pv.spec
            .csi
            .as_ref()
            .filter(|c| c.driver == self.config.driver)?;
        let here = self
            .config
            .node_topology
            .as_ref()
            .is_none_or(|t| crate::provision::node::reaches(t, pv.spec.node_affinity.as_ref()));
        here.then_some(pv)
    }

    /// Reads `secret`, which the PV names, for the claim's `purpose` call.
    fn get_secret(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        pv: &PersistentVolume,
        secret: SecretReference,
        purpose: SecretFor,
    ) {
        let get = crate::control::secrets::get(&secret);
        let call = Call::GetSecret {
            claim: key.clone(),
            pv: pv.name().to_string(),
            secret,
            purpose,
        };
        cx.api_holding([key.clone()], get, call);
    }

    /// A Secret was read, or not: its data waits for the call it is for,
    /// or that call fails as a failed call would.
    fn secret_read(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        let Call::GetSecret {
            claim,
            pv,
            secret,
            purpose,
        } = call
        else {
            return;
        };
        let present = cx.cache().get(&claim).is_some();
        match (crate::control::secrets::read(&secret, result), purpose) {
            // Kept only while the claim is there.
            (Ok(data), SecretFor::Expand) if present => {
                self.credentials.insert(claim.clone(), data);
            }
            (Ok(data), SecretFor::Modify) if present => {
                self.modify_credentials.insert(claim.clone(), data);
            }
            (Ok(_), _) => {}
            (Err(e), SecretFor::Expand) => self.resize_failed(cx, &claim, &pv, &e.to_string()),
            (Err(message), SecretFor::Modify) => {
                cx.fail(claim.clone());
                let message = message.to_string();
                let e = Event::warning(claim.clone(), reason::VOLUME_MODIFY_FAILED, message);
                self.tell(cx, &claim, e);
            }
        }
        cx.mark(claim);
    }
}

impl Controller for ResizeReconciler {
    type Key = ObjectKey;
    type Call = Call;
    type Retry = ObjectKey;

    fn retry(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        cx.mark(key);
    }

    /// external-resizer's informers (VolumeAttributesClasses when it
    /// modifies).
    fn watches(&self, kind: Kind) -> bool {
        match kind {
            Kind::PersistentVolumeClaim | Kind::PersistentVolume | Kind::StorageClass => true,
            Kind::VolumeAttributesClass => self.config.modify,
            _ => false,
        }
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        match &watch {
            Watch::Applied(o) => self.mark(cx, o),
            // What was kept for a claim that went goes with it.
            Watch::Deleted(o) => {
                let key = o.key();
                self.credentials.remove(&key);
                self.modify_credentials.remove(&key);
                self.uncertain.remove(&key);
                self.slow.stop(&key);
                self.modified.remove(&key);
                self.final_errors.remove(&key);
            }
        }
        cx.apply(watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        self.sync(cx, &key);
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        if let Call::GetSecret { .. } = call {
            return self.secret_read(cx, call, result);
        }
        let Call::Api { claim } = call else { return };
        match result {
            ApiResult::Ok(Some(o)) => {
                cx.cache_mut().apply(o);
            }
            ApiResult::Ok(None) => {}
            _ => {
                cx.fail(claim.clone());
            }
        }
        cx.mark(claim);
    }

    fn csi_done(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        match call {
            Call::Expand { claim, pv } => self.expand_done(cx, claim, pv, result),
            Call::Modify { claim, pv, target } => self.modify_done(cx, claim, &pv, target, result),
            _ => {}
        }
    }

    /// One operation per claim at a time.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        let keys = cx.in_flight().map(|c| match c {
            Call::Expand { claim, .. }
            | Call::Modify { claim, .. }
            | Call::Api { claim }
            | Call::GetSecret { claim, .. } => claim,
        });
        crate::machine::one_at_a_time("resizer", keys, |k| cx.busy(k), cx.held_count())
    }
}
