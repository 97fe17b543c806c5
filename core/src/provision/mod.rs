//! The provisioner: kubernetes-csi's external-provisioner as a sans-IO
//! machine (SEMANTICS.md B). It creates volumes for claims annotated for its
//! driver and PV objects for them, and deletes Released volumes whose policy
//! is Delete.
//!
//! Guarantees:
//! * A claim is provisioned under the deterministic name `pvc-<uid>`, for
//!   both CreateVolume and the PV, so a retry never makes a second volume.
//! * A CreateVolume that may still be running (timeouts, UNAVAILABLE,
//!   ABORTED, CANCELLED) is retried with the same request until it settles,
//!   even if the claim is deleted meanwhile, so no volume leaks (B4.5).
//!   Stricter than upstream: a final error of such a retry does not start
//!   over with a rebuilt request while the claim is there (the first
//!   attempt may have made the volume, which only the same request finds).
//! * A volume is never deleted while a VolumeAttachment references its PV.
//! * A clone's source claim and a restore's snapshot carry the finalizer
//!   that keeps them while CreateVolume may still read them (B5.6).
//! * Failures back off per claim or volume, 1 s doubling to 5 min.

mod create;
mod delete;
pub mod node;
mod request;
mod secrets;
mod source;
#[cfg(test)]
mod tests;
pub mod topology;

use std::collections::{BTreeMap, BTreeSet};

use crate::control::csi_map::DriverModes;
use crate::control::{ApiCall, ApiResult, Controller, CsiResult, Cx, Engine, Event, Watch};
use crate::driver::{self, Request, Response};
use crate::model::names::{self, reason};
use crate::model::*;
use crate::{Code, Status, Tick};

/// How the provisioner runs.
#[derive(Debug, Clone, Hash)]
pub struct ProvisionerConfig {
    /// The driver name (the provisioner name claims are annotated with).
    pub driver: String,
    /// This provisioner instance, written in each PV's
    /// `storage.kubernetes.io/csiProvisionerIdentity` attribute: upstream
    /// makes it `<start time in ms>-<random>-<driver>` at start (the
    /// adapter does so too); `volplane-<driver>` unless set.
    pub identity: String,
    /// What the driver supports (SINGLE_NODE_MULTI_WRITER…).
    pub modes: DriverModes,
    /// The driver has VOLUME_ACCESSIBILITY_CONSTRAINTS.
    pub topology: bool,
    /// `--strict-topology`: a claim with a selected node gets that node's
    /// segment alone as its requisite.
    pub strict_topology: bool,
    /// `--immediate-topology`: a claim without a selected node gets the
    /// cluster's segments as its requisite (else none).
    pub immediate_topology: bool,
    /// `--prevent-volume-mode-conversion`: a claim may restore a snapshot
    /// in another volume mode than its source's only when the content
    /// allows it.
    pub prevent_volume_mode_conversion: bool,
    /// `--volume-name-prefix`: volumes (and their PVs) are named
    /// `<prefix>-<claim UID>`.
    pub volume_name_prefix: String,
    /// `--volume-name-uuid-length`: the claim's UID in the name without its
    /// dashes, cut to this many characters (`None`: whole, as it is).
    pub volume_name_uuid_length: Option<usize>,
    /// `--extra-create-metadata`: CreateVolume's parameters also name the
    /// claim and the PV (`csi.storage.k8s.io/pvc/name`, `…/pvc/namespace`,
    /// `…/pv/name`).
    pub extra_create_metadata: bool,
    /// `--controller-publish-readonly`: a volume whose only access mode is
    /// ReadOnlyMany gets a read-only PV (`csi.readOnly`), so
    /// ControllerPublishVolume is asked for read-only access.
    pub controller_publish_readonly: bool,
    /// Filesystem when the class names none (`--default-fstype`).
    pub default_fs_type: String,
    /// The first retry delay after a failure.
    pub retry_start: Tick,
    /// The longest retry delay.
    pub retry_max: Tick,
    /// The snapshot kinds exist (their CRDs are installed): claims may be
    /// restored from a VolumeSnapshot.
    pub snapshots: bool,
    /// `--node-deployment`: the one node this provisioner serves.
    pub node: Option<node::NodeScope>,
    /// The driver has MODIFY_VOLUME: claims may name a
    /// VolumeAttributesClass (whose parameters CreateVolume gets as
    /// `mutable_parameters`); the provisioner watches those classes.
    pub modify_volume: bool,
    /// Simulation only: a planted mistake.
    pub plant: crate::plant::Planted,
}

impl ProvisionerConfig {
    /// An external-provisioner for `driver`, with the sidecar's defaults.
    pub fn new(driver: &str) -> ProvisionerConfig {
        ProvisionerConfig {
            driver: driver.into(),
            identity: format!("volplane-{driver}"),
            modes: DriverModes::default(),
            topology: false,
            strict_topology: false,
            immediate_topology: true,
            prevent_volume_mode_conversion: true,
            volume_name_prefix: "pvc".into(),
            volume_name_uuid_length: None,
            extra_create_metadata: false,
            controller_publish_readonly: false,
            default_fs_type: String::new(),
            retry_start: 1_000,
            retry_max: 300_000,
            snapshots: false,
            node: None,
            modify_volume: false,
            plant: crate::plant::Planted::default(),
        }
    }
}

impl ProvisionerConfig {
    /// The name of the volume (and PV) provisioned for the claim `uid`,
    /// as upstream's makeVolumeName makes it.
    pub fn volume_name(&self, uid: &str) -> String {
        match self.volume_name_uuid_length {
            None => format!("{}-{uid}", self.volume_name_prefix),
            Some(n) => {
                let plain: String = uid.chars().filter(|c| *c != '-').take(n).collect();
                format!("{}-{plain}", self.volume_name_prefix)
            }
        }
    }
}

/// B4.1: what a failed CreateVolume means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// The call may still be running: retry the same request, even without the claim.
    InBackground,
    /// Give up on the selected node: drop the annotation so the scheduler picks again.
    Reschedule,
    /// The call failed for good this time; retry with backoff.
    Finished,
}

/// B4.2: classify a CreateVolume failure.
pub fn classify(code: Code, topology: bool, has_selected_node: bool) -> FailureClass {
    match code {
        Code::DeadlineExceeded | Code::Unavailable | Code::Cancelled | Code::Aborted => {
            FailureClass::InBackground
        }
        Code::ResourceExhausted if topology && has_selected_node => FailureClass::Reschedule,
        _ => FailureClass::Finished,
    }
}

/// A claim being provisioned.
#[derive(Debug, Clone, Hash)]
struct Provisioning {
    claim: ObjectKey,
    uid: String,
    request: driver::CreateVolume,
    class: StorageClass,
    /// Retry even if the claim is gone.
    background: bool,
    /// A volume the driver created too small (B3.2): deleted before the
    /// claim is provisioned again.
    orphan: Option<String>,
    /// The claim or snapshot it copies (B5.6).
    source: Option<ObjectKey>,
    /// The Secrets its calls use, resolved with the request (B2.9).
    secrets: secrets::VolumeSecrets,
    /// The VolumeAttributesClass whose parameters the request carries: the
    /// PV names it, whatever the claim names by the time it is made.
    attributes_class: Option<String>,
}

/// What the provisioner has in flight.
#[derive(Debug, Clone, Hash)]
pub enum Call {
    /// DeleteVolume of a volume created too small, for the claim `uid`.
    Cleanup {
        /// The claim's UID.
        uid: String,
    },
    /// CreateVolume for the claim `uid`.
    Create {
        /// The claim's UID.
        uid: String,
    },
    /// The creation of the PV object for the claim `uid`.
    SavePv {
        /// The claim's UID.
        uid: String,
    },
    /// The removal of the selected-node annotation from the claim `uid`
    /// (rescheduling).
    DropSelectedNode {
        /// The claim's UID.
        uid: String,
    },
    /// The read of the provisioner Secret `secret` for the claim `uid`
    /// (B2.10): its data goes into CreateVolume, and nowhere else.
    GetSecret {
        /// The claim's UID.
        uid: String,
        /// The claim.
        claim: ObjectKey,
        /// The Secret read.
        secret: SecretReference,
    },
    /// The read of the Secret `secret` the DeleteVolume of the PV `pv`
    /// uses (B5.4).
    GetDeletionSecret {
        /// The PV's name.
        pv: String,
        /// The Secret read.
        secret: SecretReference,
    },
    /// DeleteVolume of the PV `pv`'s storage.
    Delete {
        /// The PV's name.
        pv: String,
    },
    /// The deletion of the PV object `pv`.
    DeletePvObject {
        /// The PV's name.
        pv: String,
        /// The incarnation of the PV object deleted or written.
        uid: String,
    },
    /// A write of the provisioner's finalizer on the PV `pv`.
    Finalizer {
        /// The PV's name.
        pv: String,
        /// The incarnation written.
        uid: String,
        /// The version of the PV the write was made against ("" for a
        /// removal, which is made against none).
        rv: String,
    },
    /// The finalizer on the source of the claim `uid` (B5.6), written
    /// against the source's version `rv`.
    Protect {
        /// The claim's UID.
        uid: String,
        /// The claim.
        claim: ObjectKey,
        /// The source's version written against.
        rv: String,
    },
    /// GetCapacity of this node for the claim `uid` it may take
    /// (`--node-deployment`).
    CheckCapacity {
        /// The claim's UID.
        uid: String,
        /// The claim.
        claim: ObjectKey,
    },
    /// The write of this node as the selected node of the claim `uid`.
    TakeClaim {
        /// The claim's UID.
        uid: String,
        /// The claim.
        claim: ObjectKey,
    },
    /// The finalizer's removal from a source whose UID is `uid`, written
    /// against its version `rv`.
    Release {
        /// The source's UID.
        uid: String,
        /// The source.
        source: ObjectKey,
        /// The source's version written against.
        rv: String,
    },
}

/// The external provisioner. See the module documentation.
impl Call {
    /// What the call holds busy: the claim's UID or the PV's name.
    fn key(&self) -> &str {
        match self {
            Call::Create { uid }
            | Call::Cleanup { uid }
            | Call::SavePv { uid }
            | Call::DropSelectedNode { uid }
            | Call::Protect { uid, .. }
            | Call::Release { uid, .. }
            | Call::CheckCapacity { uid, .. }
            | Call::TakeClaim { uid, .. }
            | Call::GetSecret { uid, .. } => uid,
            Call::Delete { pv }
            | Call::DeletePvObject { pv, .. }
            | Call::Finalizer { pv, .. }
            | Call::GetDeletionSecret { pv, .. } => pv,
        }
    }
}

/// The external-provisioner. See the module documentation.
pub type Provisioner = Engine<ProvisionerReconciler>;

/// What Provisioner keeps of its own; the engine keeps the rest.
#[derive(Debug, Clone, Hash)]
pub struct ProvisionerReconciler {
    config: ProvisionerConfig,
    provisioning: BTreeMap<String, Provisioning>,
    /// Volumes whose storage DeleteVolume removed; their PV objects go next.
    deleted: BTreeSet<String>,
    /// Claim UIDs waiting out a backoff → the claim to sync when it ends.
    retry: BTreeMap<String, ObjectKey>,
    /// Claim UIDs left to an external populator (B1.8), told once.
    populated: BTreeSet<String>,
    /// Claim UIDs → the provisioner Secret's data read for their
    /// CreateVolume, until the request takes it (never printed).
    credentials: BTreeMap<String, driver::Secrets>,
    /// PV names → what their DeleteVolume's Secret held (empty when it
    /// could not be read: deletion goes on without), until it is sent.
    deletion_credentials: BTreeMap<String, driver::Secrets>,
    /// Claim UIDs this node is trying to take (`--node-deployment`).
    taking: BTreeMap<String, node::Taking>,
}

impl Provisioner {
    /// A provisioner with empty memory.
    pub fn new(config: ProvisionerConfig) -> Provisioner {
        let (retry_start, retry_max) = (config.retry_start, config.retry_max);
        let reconciler = ProvisionerReconciler {
            config,
            provisioning: BTreeMap::new(),
            deleted: BTreeSet::new(),
            retry: BTreeMap::new(),
            populated: BTreeSet::new(),
            credentials: BTreeMap::new(),
            deletion_credentials: BTreeMap::new(),
            taking: BTreeMap::new(),
        };
        Engine::driving(reconciler, retry_start, retry_max)
    }
}

impl ProvisionerReconciler {
    /// A newer version of `o` arrived: a retry about it waiting out its
    /// backoff goes now (a write that met a conflict waits for this).
    fn news(&mut self, cx: &mut Cx<Self>, o: &Object) {
        let key = match o {
            Object::Pv(pv) => pv.name(),
            _ => &o.meta().uid,
        };
        cx.news(key);
    }

    fn dirty_for(&mut self, cx: &mut Cx<Self>, o: &Object) {
        match o {
            Object::Pvc(c) => {
                cx.mark(o.key());
                // Its source may be released (B5.6).
                cx.mark_all(source::source_key(c));
            }
            Object::Pv(_) => {
                cx.mark(o.key());
            }
            Object::Va(va) => {
                cx.mark(ObjectKey::new(Kind::PersistentVolume, "", va.pv_name()));
            }
            Object::Class(_) => {
                let claims: Vec<ObjectKey> = cx
                    .cache()
                    .of_kind(Kind::PersistentVolumeClaim)
                    .map(Object::key)
                    .collect();
                cx.mark_all(claims);
            }
            // The claims that wait for this class go on at once.
            Object::AttributesClass(vac) => {
                let claims: Vec<(ObjectKey, String)> = cx
                    .cache()
                    .of_kind(Kind::PersistentVolumeClaim)
                    .filter_map(Object::as_pvc)
                    .filter(|c| c.volume_attributes_class() == Some(vac.metadata.name.as_str()))
                    .map(|c| {
                        let key = ObjectKey::new(
                            Kind::PersistentVolumeClaim,
                            &c.metadata.namespace,
                            &c.metadata.name,
                        );
                        (key, c.metadata.uid.clone())
                    })
                    .collect();
                for (key, uid) in claims {
                    cx.news(&uid);
                    cx.mark(key);
                }
            }
            // A snapshot (or its content) that changed may let the claims
            // restoring from it go on.
            Object::Snapshot(_) | Object::Content(_) => {
                if let Object::Snapshot(_) = o {
                    cx.mark(o.key());
                }
                let claims: Vec<ObjectKey> = cx
                    .cache()
                    .of_kind(Kind::PersistentVolumeClaim)
                    .filter(|c| match c {
                        Object::Pvc(c) => {
                            c.data_source().is_some_and(|d| d.kind == "VolumeSnapshot")
                        }
                        _ => false,
                    })
                    .map(Object::key)
                    .collect();
                cx.mark_all(claims);
            }
            _ => {}
        }
    }

    /// The kinds its informers watch (the snapshot kinds only when they
    /// exist). VolumeAttachments, so that a volume still attached is never
    /// deleted (B5.4).
    pub fn watches(&self, kind: Kind) -> bool {
        match kind {
            Kind::PersistentVolumeClaim
            | Kind::PersistentVolume
            | Kind::StorageClass
            | Kind::VolumeAttachment
            | Kind::CsiNode
            | Kind::Node => true,
            Kind::VolumeSnapshot | Kind::VolumeSnapshotContent => self.config.snapshots,
            Kind::VolumeAttributesClass => self.config.modify_volume,
            _ => false,
        }
    }

    fn api(&mut self, cx: &mut Cx<Self>, what: Call, call: ApiCall) {
        cx.api_holding([what.key().to_string()], call, what);
    }

    fn csi(&mut self, cx: &mut Cx<Self>, what: Call, call: Request) {
        cx.csi_holding([what.key().to_string()], None, call, what);
    }

    fn event(&mut self, cx: &mut Cx<Self>, e: Event) {
        cx.event(e);
    }

    fn claim(&self, cx: &Cx<Self>, key: &ObjectKey) -> Option<PersistentVolumeClaim> {
        match cx.cache().get(key) {
            Some(Object::Pvc(c)) => Some(c.clone()),
            _ => None,
        }
    }

    fn volume(&self, cx: &Cx<Self>, name: &str) -> Option<PersistentVolume> {
        cx.cache()
            .find(Kind::PersistentVolume, "", name)
            .and_then(Object::as_pv)
            .cloned()
    }

    fn class(&self, cx: &Cx<Self>, name: &str) -> Option<StorageClass> {
        cx.cache()
            .find(Kind::StorageClass, "", name)
            .and_then(Object::as_class)
            .cloned()
    }
}

impl Controller for ProvisionerReconciler {
    type Key = ObjectKey;
    type Call = Call;
    type Retry = String;

    /// A claim UID's backoff ran out: its claim syncs again; a PV name's:
    /// the volume does.
    fn retry(&mut self, cx: &mut Cx<Self>, key: String) {
        if let Some(p) = self.provisioning.get(&key) {
            cx.mark(p.claim.clone());
        } else if let Some(claim) = self.retry.get(&key) {
            cx.mark(claim.clone());
        } else {
            cx.mark(ObjectKey::new(Kind::PersistentVolume, "", &key));
        }
    }

    fn watches(&self, kind: Kind) -> bool {
        ProvisionerReconciler::watches(self, kind)
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let o = match &watch {
            Watch::Applied(o) => {
                if cx.cache().is_news(o) {
                    self.news(cx, o);
                }
                o
            }
            Watch::Deleted(o) => {
                // Secret data read for an object that went is dropped, and
                // so is a claim's retry entry unless a create of its goes
                // on in the background (whose retry finds it by its
                // provisioning record): every claim synced has one, so
                // kept they grew with every claim the process ever saw.
                let uid = &o.meta().uid;
                match o.kind() {
                    Kind::PersistentVolumeClaim => {
                        if !self.provisioning.contains_key(uid) {
                            self.retry.remove(uid);
                        }
                        self.credentials.remove(uid);
                    }
                    Kind::PersistentVolume => {
                        self.deletion_credentials.remove(&o.meta().name);
                    }
                    _ => {}
                }
                o
            }
        };
        self.dirty_for(cx, &o.clone());
        cx.apply(watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        match key.kind {
            Kind::PersistentVolumeClaim => {
                self.sync_claim(cx, &key);
                self.release_source(cx, &key);
            }
            Kind::PersistentVolume => self.sync_volume(cx, &key),
            Kind::VolumeSnapshot => self.release_source(cx, &key),
            _ => {}
        }
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        self.api_completed(cx, call, result);
    }

    /// When a claim this node may take is next tried (`--node-deployment`).
    fn deadline(&self, _cx: &Cx<Self>) -> Option<Tick> {
        self.next_take()
    }

    fn fire(&mut self, cx: &mut Cx<Self>, now: Tick) {
        self.takes_due(cx, now);
    }

    fn csi_done(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        self.csi_completed(cx, call, result);
    }

    /// One operation per claim or volume at a time; Secret data is held
    /// only for a claim still there.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        crate::machine::one_at_a_time(
            "provisioner",
            cx.in_flight().map(Call::key),
            |k| cx.busy(k),
            cx.held_count(),
        )?;
        if self.credentials.is_empty() {
            return Ok(());
        }
        let claims: BTreeSet<&str> = cx
            .cache()
            .of_kind(Kind::PersistentVolumeClaim)
            .map(|o| o.meta().uid.as_str())
            .collect();
        match self
            .credentials
            .keys()
            .find(|uid| !claims.contains(uid.as_str()))
        {
            Some(uid) => Err(format!(
                "provisioner: holds a Secret's data for the claim {uid}, which is gone"
            )
            .into()),
            None => Ok(()),
        }
    }
}
