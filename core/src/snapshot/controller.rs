//! The snapshot controller (external-snapshotter's common controller,
//! pkg/common-controller) as a sans-IO machine.
//!
//! For a VolumeSnapshot it:
//! * checks exactly one source is set (`SnapshotValidationError`);
//! * keeps the `volumesnapshot-as-source-protection` finalizer on it, and
//!   `volumesnapshot-bound-protection` once bound to a content whose policy
//!   is Delete;
//! * dynamic (`source.persistentVolumeClaimName`): puts
//!   `pvc-as-source-protection` on the claim, then creates the content
//!   `snapcontent-<uid>` (the bound PV's CSI volume handle, the class's
//!   driver and deletion policy; the class is the one named, or the default
//!   class of the PV's driver, written back to the snapshot), with a Normal
//!   `CreatingSnapshot` event;
//! * pre-provisioned (`source.volumeSnapshotContentName`): binds the named
//!   content (its `volumeSnapshotRef.uid`);
//! * copies the content's status up (bound name, readyToUse, creationTime,
//!   restoreSize, error), with `SnapshotCreated` and `SnapshotReady` events
//!   the first time;
//! * when deleted: waits while a Pending claim restores from it
//!   (`SnapshotDeletePending`), marks its content
//!   `volumesnapshot-being-deleted`, deletes the content if its policy is
//!   Delete (and keeps the bound finalizer until the content is gone), then
//!   removes its finalizers.
//!
//! For a content it keeps `volumesnapshotcontent-bound-protection` while it
//! is bound and not being deleted. A claim keeps `pvc-as-source-protection`
//! while a snapshot of it is not ready.

mod deletion;
mod group;
mod kinds;

use kinds::Bound;

use crate::control::{ApiCall, ApiResult, Controller, Cx, Engine, Event, Watch};
use crate::model::names::{
    ANN_DEFAULT_SNAPSHOT_CLASS, ANN_SNAPSHOT_BEING_DELETED, FINALIZER_CONTENT_BOUND,
    FINALIZER_PVC_AS_SNAPSHOT_SOURCE, FINALIZER_SNAPSHOT_AS_SOURCE, FINALIZER_SNAPSHOT_BOUND,
    FINALIZER_SNAPSHOT_IN_GROUP, reason, snapshot_content_name,
};
use crate::model::*;

/// The snapshot controller. See the module documentation. Its writes in
/// flight are kept with the object synced when each was issued (busy until
/// it completes), the object written and its incarnation.
pub type SnapshotController = Engine<SnapshotReconciler>;

/// What the snapshot controller keeps of its own; the engine keeps the
/// rest.
#[derive(Debug, Clone, Default, Hash)]
pub struct SnapshotReconciler {
    /// The group snapshot kinds are served too.
    groups: bool,
    /// The object being synced now.
    syncing: Option<ObjectKey>,
}

/// Why a snapshot cannot go on, for its status and a warning.
struct Blocked {
    reason: &'static str,
    message: String,
    /// Set readyToUse false too.
    unready: bool,
}

fn blocked(reason: &'static str, message: impl Into<String>) -> Blocked {
    Blocked {
        reason,
        message: message.into(),
        unready: true,
    }
}

impl SnapshotController {
    /// A snapshot controller with empty memory.
    pub fn new() -> SnapshotController {
        SnapshotController::default()
    }

    /// Serves the group snapshot kinds too (their CRDs must exist).
    pub fn with_groups(mut self, on: bool) -> SnapshotController {
        self.controller_mut().groups = on;
        self
    }
}

impl SnapshotReconciler {
    /// The kinds its informers watch.
    pub fn watches(&self, kind: Kind) -> bool {
        match kind {
            Kind::VolumeSnapshot
            | Kind::VolumeSnapshotContent
            | Kind::VolumeSnapshotClass
            | Kind::PersistentVolumeClaim
            | Kind::PersistentVolume => true,
            Kind::VolumeGroupSnapshot
            | Kind::VolumeGroupSnapshotContent
            | Kind::VolumeGroupSnapshotClass => self.groups,
            _ => false,
        }
    }

    /// What an object's change may move on: itself, the snapshot a content
    /// names, the snapshots of (or restoring into) a claim, the snapshots
    /// of a volume's claim, the snapshots a class may serve.
    fn mark(&mut self, cx: &mut Cx<Self>, o: &Object) {
        let snapshots = |ns: &str| -> Vec<&VolumeSnapshot> {
            cx.cache()
                .of_kind(Kind::VolumeSnapshot)
                .filter_map(|o| match o {
                    Object::Snapshot(s) if s.metadata.namespace == ns => Some(s),
                    _ => None,
                })
                .collect()
        };
        let mut marked: Vec<ObjectKey> = Vec::new();
        match o {
            Object::Snapshot(s) => {
                marked.push(o.key());
                if let Some(claim) = &s.spec.source.persistent_volume_claim_name {
                    marked.push(ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        &s.metadata.namespace,
                        claim,
                    ));
                }
            }
            Object::Content(c) => {
                marked.push(o.key());
                let r = &c.spec.volume_snapshot_ref;
                marked.push(ObjectKey::new(Kind::VolumeSnapshot, &r.namespace, &r.name));
            }
            Object::Pvc(claim) => {
                let ns = &claim.metadata.namespace;
                let restoring = claim.spec.data_source.as_ref().map(|d| d.name.as_str());
                marked.push(o.key());
                for s in snapshots(ns) {
                    if s.spec.source.persistent_volume_claim_name.as_deref()
                        == Some(claim.metadata.name.as_str())
                        || restoring == Some(s.metadata.name.as_str())
                    {
                        marked.push(snapshot_key(s));
                    }
                }
            }
            Object::Pv(pv) => {
                if let Some(r) = &pv.spec.claim_ref {
                    for s in snapshots(&r.namespace) {
                        if s.spec.source.persistent_volume_claim_name.as_deref()
                            == Some(r.name.as_str())
                        {
                            marked.push(snapshot_key(s));
                        }
                    }
                }
            }
            Object::SnapshotClass(_) => {
                for s in cx.cache().of_kind(Kind::VolumeSnapshot) {
                    if let Object::Snapshot(s) = s
                        && s.bound_content().is_none()
                    {
                        marked.push(snapshot_key(s));
                    }
                }
            }
            _ => {}
        }
        if self.groups {
            marked.extend(self.mark_group(cx, o));
        }
        cx.mark_all(marked);
    }

    fn write(&mut self, cx: &mut Cx<Self>, call: ApiCall) {
        let (key, uid) = match &call {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => {
                (o.key(), o.meta().uid.clone())
            }
            ApiCall::RemoveFinalizer { key, uid, .. } => (key.clone(), uid.clone()),
            ApiCall::Delete(k) | ApiCall::Get(k) => (k.clone(), String::new()),
            ApiCall::List { .. } => return,
        };
        let owner = self.syncing.clone().unwrap_or_else(|| key.clone());
        cx.api_holding([owner.clone()], call, (owner, key, uid));
    }

    fn event(
        &mut self,
        cx: &mut Cx<Self>,
        s: &VolumeSnapshot,
        normal: bool,
        reason: &str,
        message: String,
    ) {
        let key = snapshot_key(s);
        let e = if normal {
            Event::normal(key, reason, message)
        } else {
            Event::warning(key, reason, message)
        };
        cx.event(e);
    }

    fn content(&self, cx: &Cx<Self>, name: &str) -> Option<VolumeSnapshotContent> {
        match cx.cache().find(Kind::VolumeSnapshotContent, "", name) {
            Some(Object::Content(c)) => Some(c.clone()),
            _ => None,
        }
    }

    fn snapshots_of<'a>(
        &'a self,
        cx: &'a Cx<Self>,
        ns: &str,
    ) -> impl Iterator<Item = &'a VolumeSnapshot> {
        let ns = ns.to_string();
        cx.cache()
            .of_kind(Kind::VolumeSnapshot)
            .filter_map(move |o| match o {
                Object::Snapshot(s) if s.metadata.namespace == ns => Some(s),
                _ => None,
            })
    }

    /// upstream's syncSnapshot.
    fn sync_snapshot(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot) {
        if s.metadata.deleting() {
            return self.sync_deleted_snapshot(cx, s);
        }
        let source = &s.spec.source;
        if source.persistent_volume_claim_name.is_some()
            == source.volume_snapshot_content_name.is_some()
        {
            let b = blocked(
                reason::SNAPSHOT_VALIDATION_ERROR,
                "Exactly one of PersistentVolumeClaimName and VolumeSnapshotContentName should be specified",
            );
            return self.block(cx, s, b);
        }
        if self.add_finalizers(cx, s) {
            return;
        }
        let result = if !s.ready() || s.bound_content().is_none() {
            self.sync_unready(cx, s)
        } else {
            self.sync_ready(cx, s)
        };
        if let Err(b) = result {
            self.block(cx, s, b);
        }
    }

    /// The source finalizer always, the bound one once bound to a content
    /// with policy Delete. True when a write was issued.
    fn add_finalizers(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot) -> bool {
        let content = self.matching_content(cx, s);
        let need_source = !s.metadata.has_finalizer(FINALIZER_SNAPSHOT_AS_SOURCE);
        let need_bound = !s.metadata.has_finalizer(FINALIZER_SNAPSHOT_BOUND)
            && s.bound_content().is_some()
            && content.is_some_and(|c| c.spec.deletion_policy == DeletionPolicy::Delete);
        if !need_source && !need_bound {
            return false;
        }
        let mut next = s.clone();
        if need_source {
            next.metadata.add_finalizer(FINALIZER_SNAPSHOT_AS_SOURCE);
        }
        if need_bound {
            next.metadata.add_finalizer(FINALIZER_SNAPSHOT_BOUND);
        }
        self.write(cx, ApiCall::Update(Object::Snapshot(next)));
        true
    }

    /// The content a snapshot has, if it points back at it.
    fn matching_content(&self, cx: &Cx<Self>, s: &VolumeSnapshot) -> Option<VolumeSnapshotContent> {
        let name = match &s.spec.source.volume_snapshot_content_name {
            Some(n) => n.clone(),
            None if group::group_of(s).is_some() => s.bound_content()?.to_string(),
            None => snapshot_content_name(&s.metadata.uid),
        };
        self.content(cx, &name).filter(|c| refers_to(c, s))
    }

    fn sync_unready(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot) -> Result<(), Blocked> {
        if group::group_of(s).is_some() {
            // A member of a group snapshot: its group makes and binds its
            // content; it follows the content's status.
            if let Some(c) = s.bound_content().and_then(|n| self.content(cx, n)) {
                self.update_status(cx, s, &c);
            }
            return Ok(());
        }
        if let Some(name) = &s.spec.source.volume_snapshot_content_name {
            if let Bound::Follow(c) = self.bind_named(cx, s, name, self.content(cx, name))? {
                self.update_status(cx, s, &c);
            }
            return Ok(());
        }
        let name = snapshot_content_name(&s.metadata.uid);
        if let Some(c) = self.content(cx, &name) {
            self.check_made::<VolumeSnapshot>(&name, &c, refers_to(&c, s))?;
            self.update_status(cx, s, &c);
            return Ok(());
        }
        self.create_content(cx, s)
    }

    /// upstream's createSnapshotContent, after ensurePVCFinalizer and the
    /// default class.
    fn create_content(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot) -> Result<(), Blocked> {
        let ns = &s.metadata.namespace;
        let claim_name = s
            .spec
            .source
            .persistent_volume_claim_name
            .clone()
            .unwrap_or_default();
        let failed = |why: String| {
            blocked(
                reason::SNAPSHOT_CONTENT_CREATION_FAILED,
                format!("Failed to create snapshot content with error {why}"),
            )
        };
        let claim = match cx
            .cache()
            .find(Kind::PersistentVolumeClaim, ns, &claim_name)
        {
            Some(Object::Pvc(c)) => c.clone(),
            _ => {
                return Err(failed(format!(
                    "failed to retrieve PVC {claim_name} from the lister: \"persistentvolumeclaim \\\"{claim_name}\\\" not found\""
                )));
            }
        };
        if !claim
            .metadata
            .has_finalizer(FINALIZER_PVC_AS_SNAPSHOT_SOURCE)
        {
            if claim.metadata.deleting() {
                return Err(failed(format!(
                    "cannot add finalizer on claim {claim_name} because it is being deleted"
                )));
            }
            let mut next = claim.clone();
            next.metadata
                .add_finalizer(FINALIZER_PVC_AS_SNAPSHOT_SOURCE);
            self.write(cx, ApiCall::Update(Object::Pvc(next)));
            return Ok(());
        }
        let pv = match cx
            .cache()
            .find(Kind::PersistentVolume, "", claim.volume_name())
        {
            Some(Object::Pv(pv)) if !claim.volume_name().is_empty() => pv.clone(),
            _ => {
                return Err(failed(format!(
                    "the PVC {claim_name} is not yet bound to a PV, will not attempt to take a snapshot"
                )));
            }
        };
        let Some(csi) = pv.spec.csi.clone() else {
            return Err(failed(format!(
                "cannot find CSI PersistentVolumeSource for volume {}",
                pv.metadata.name
            )));
        };
        let class = match &s.spec.volume_snapshot_class_name {
            Some(name) => match cx.cache().find(Kind::VolumeSnapshotClass, "", name) {
                Some(Object::SnapshotClass(c)) => c.clone(),
                _ => {
                    return Err(failed(format!(
                        "failed to retrieve snapshot class {name} from the informer: \"volumesnapshotclass.snapshot.storage.k8s.io \\\"{name}\\\" not found\""
                    )));
                }
            },
            None => return self.set_default_class(cx, s, &csi.driver),
        };
        let content = dynamic_content(s, &class, &pv, &csi.volume_handle).map_err(failed)?;
        self.write(cx, ApiCall::Create(Object::Content(content)));
        let msg = format!(
            "Waiting for a snapshot {ns}/{} to be created by the CSI driver.",
            s.metadata.name
        );
        self.event(cx, s, true, reason::CREATING_SNAPSHOT, msg);
        Ok(())
    }

    /// upstream's SetDefaultSnapshotClass: the one default class of the
    /// volume's driver, written to the snapshot.
    fn set_default_class(
        &mut self,
        cx: &mut Cx<Self>,
        s: &VolumeSnapshot,
        driver: &str,
    ) -> Result<(), Blocked> {
        let defaults: Vec<&VolumeSnapshotClass> = cx
            .cache()
            .of_kind(Kind::VolumeSnapshotClass)
            .filter_map(|o| match o {
                Object::SnapshotClass(c)
                    if c.driver == driver
                        && c.metadata.annotation(ANN_DEFAULT_SNAPSHOT_CLASS) == Some("true") =>
                {
                    Some(c)
                }
                _ => None,
            })
            .collect();
        let class = match defaults[..] {
            [one] => one.metadata.name.clone(),
            [] => {
                return Err(blocked(
                    reason::SNAPSHOT_CONTENT_CREATION_FAILED,
                    format!(
                        "Failed to create snapshot content with error cannot find default snapshot class for snapshot {}/{}",
                        s.metadata.namespace, s.metadata.name
                    ),
                ));
            }
            _ => {
                return Err(blocked(
                    reason::SNAPSHOT_CONTENT_CREATION_FAILED,
                    format!(
                        "Failed to create snapshot content with error {} default snapshot classes were found for driver {driver}",
                        defaults.len()
                    ),
                ));
            }
        };
        let mut next = s.clone();
        next.spec.volume_snapshot_class_name = Some(class);
        self.write(cx, ApiCall::Update(Object::Snapshot(next)));
        Ok(())
    }

    fn sync_ready(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot) -> Result<(), Blocked> {
        let name = s.bound_content().unwrap_or_default().to_string();
        let Some(c) = self.content(cx, &name) else {
            return Err(blocked(
                reason::SNAPSHOT_CONTENT_MISSING,
                "VolumeSnapshotContent is missing",
            ));
        };
        if !refers_to(&c, s) {
            return Err(blocked(
                reason::SNAPSHOT_MISBOUND,
                "VolumeSnapshotContent is not bound to the VolumeSnapshot correctly",
            ));
        }
        self.update_status(cx, s, &c);
        Ok(())
    }

    /// upstream's updateSnapshotStatus: the content's status copied up.
    fn update_status(&mut self, cx: &mut Cx<Self>, s: &VolumeSnapshot, c: &VolumeSnapshotContent) {
        let was = s.status.clone();
        let mut status = was.clone().unwrap_or_default();
        let cs = c.status.clone().unwrap_or_default();
        let ready = cs.ready_to_use.unwrap_or(false);
        if status.bound_volume_snapshot_content_name.is_none() {
            status.bound_volume_snapshot_content_name = Some(c.metadata.name.clone());
        }
        if status.creation_time.is_none() {
            status.creation_time = cs.creation_time.map(rfc3339);
        }
        if status.ready_to_use != Some(ready) {
            status.ready_to_use = Some(ready);
            if ready {
                status.error = None;
            }
        }
        let zero = status.restore_size.as_ref().is_some_and(|q| q.bytes() == 0);
        if let Some(size) = cs.restore_size
            && (status.restore_size.is_none() || (zero && size > 0))
        {
            status.restore_size = Some(Quantity::from_bytes(u64::try_from(size).unwrap_or(0)));
        }
        if cs.error.is_some() && status.error != cs.error {
            status.error = cs.error.clone();
        }
        if was.as_ref() == Some(&status) {
            return;
        }
        let key = format!("{}/{}", s.metadata.namespace, s.metadata.name);
        let created =
            |st: Option<&VolumeSnapshotStatus>| st.is_some_and(|st| st.creation_time.is_some());
        if !created(was.as_ref()) && created(Some(&status)) {
            let msg = format!("Snapshot {key} was successfully created by the CSI driver.");
            self.event(cx, s, true, reason::SNAPSHOT_CREATED, msg);
        }
        if !s.ready() && ready {
            self.event(
                cx,
                s,
                true,
                reason::SNAPSHOT_READY,
                format!("Snapshot {key} is ready to use."),
            );
        }
        let mut next = s.clone();
        next.status = Some(status);
        self.write(cx, ApiCall::UpdateStatus(Object::Snapshot(next)));
    }

    /// A snapshot that cannot go on: the error in its status (once per
    /// message) with a warning. What blocks it is in objects this machine
    /// watches, so it is looked at again when they change (and at each
    /// resync), not on a timer.
    /// upstream's syncContent: the bound finalizer while bound and not
    /// being deleted; a snapshot being deleted marks its content.
    fn sync_content(&mut self, cx: &mut Cx<Self>, c: &VolumeSnapshotContent) {
        let source = &c.spec.source;
        if source.volume_handle.is_some() == source.snapshot_handle.is_some() {
            cx.event(Event::warning(
                content_key(&c.metadata.name),
                "ContentValidationError",
                "Exactly one of VolumeHandle and SnapshotHandle should be specified",
            ));
            return;
        }
        if c.spec.volume_snapshot_ref.uid.is_empty() {
            return;
        }
        if !c.metadata.deleting() && !c.metadata.has_finalizer(FINALIZER_CONTENT_BOUND) {
            let mut next = c.clone();
            next.metadata.add_finalizer(FINALIZER_CONTENT_BOUND);
            self.write(cx, ApiCall::Update(Object::Content(next)));
        }
        // The snapshot follows what changed on its content.
        let r = &c.spec.volume_snapshot_ref;
        cx.mark(ObjectKey::new(Kind::VolumeSnapshot, &r.namespace, &r.name));
    }

    /// checkandRemovePVCFinalizer: a claim keeps its finalizer while a
    /// snapshot of it is not ready (or it is not being deleted).
    fn sync_claim(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim) {
        if !claim
            .metadata
            .has_finalizer(FINALIZER_PVC_AS_SNAPSHOT_SOURCE)
        {
            return;
        }
        let in_use = self.snapshots_of(cx, &claim.metadata.namespace).any(|s| {
            s.spec.source.persistent_volume_claim_name.as_deref()
                == Some(claim.metadata.name.as_str())
                && !s.ready()
                && !s.metadata.deleting()
        });
        if in_use {
            return;
        }
        let mut next = claim.clone();
        next.metadata
            .remove_finalizer(FINALIZER_PVC_AS_SNAPSHOT_SOURCE);
        self.write(cx, ApiCall::Update(Object::Pvc(next)));
    }
}

/// The content upstream's createSnapshotContent makes for `s` of `class`,
/// cut from `pv` (its CSI volume `volume_handle`); an error when the
/// class's deletion secret cannot be named.
fn dynamic_content(
    s: &VolumeSnapshot,
    class: &VolumeSnapshotClass,
    pv: &PersistentVolume,
    volume_handle: &str,
) -> Result<VolumeSnapshotContent, String> {
    let content_name = snapshot_content_name(&s.metadata.uid);
    let mut content = VolumeSnapshotContent::new(&content_name);
    let tokens = crate::control::secrets::SnapshotTokens {
        kind: "volumesnapshot",
        content: &content_name,
        snapshot: Some((&s.metadata.namespace, &s.metadata.name)),
    };
    super::name_deletion_secret(
        &mut content.metadata,
        &crate::control::secrets::SNAPSHOTTER,
        &class.parameters,
        tokens,
        (
            crate::model::names::ANN_SNAPSHOT_DELETION_SECRET_NAME,
            crate::model::names::ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE,
        ),
    )?;
    content.spec = VolumeSnapshotContentSpec {
        volume_snapshot_ref: ObjectReference {
            kind: "VolumeSnapshot".into(),
            api_version: SNAPSHOT_API_VERSION.into(),
            namespace: s.metadata.namespace.clone(),
            name: s.metadata.name.clone(),
            uid: s.metadata.uid.clone(),
            resource_version: s.metadata.resource_version.clone(),
        },
        deletion_policy: class.deletion_policy.clone(),
        driver: class.driver.clone(),
        volume_snapshot_class_name: Some(class.metadata.name.clone()),
        source: VolumeSnapshotContentSource {
            volume_handle: Some(volume_handle.to_string()),
            snapshot_handle: None,
        },
        // What a restore may not change without the content's
        // allow-volume-mode-change annotation.
        source_volume_mode: pv.spec.volume_mode.as_ref().map(|m| m.to_string()),
    };
    Ok(content)
}

fn content_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::VolumeSnapshotContent, "", name)
}

fn snapshot_key(s: &VolumeSnapshot) -> ObjectKey {
    ObjectKey::new(
        Kind::VolumeSnapshot,
        &s.metadata.namespace,
        &s.metadata.name,
    )
}

/// The content's ref names this very snapshot (IsVolumeSnapshotRefSet).
fn refers_to(c: &VolumeSnapshotContent, s: &VolumeSnapshot) -> bool {
    let r = &c.spec.volume_snapshot_ref;
    r.name == s.metadata.name && r.namespace == s.metadata.namespace && r.uid == s.metadata.uid
}

impl Controller for SnapshotReconciler {
    type Key = ObjectKey;
    type Call = (ObjectKey, ObjectKey, String);
    type Retry = ObjectKey;

    fn retry(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        cx.mark(key);
    }

    fn watches(&self, kind: Kind) -> bool {
        SnapshotReconciler::watches(self, kind)
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let (Watch::Applied(o) | Watch::Deleted(o)) = &watch;
        self.mark(cx, &o.clone());
        cx.apply(watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        if !cx.idle(&key) {
            return;
        }
        self.syncing = Some(key.clone());
        let shared = cx.cache().get_shared(&key);
        match shared.as_deref() {
            Some(Object::Snapshot(s)) => self.sync_snapshot(cx, s),
            Some(Object::Content(c)) => self.sync_content(cx, c),
            Some(Object::Pvc(c)) => self.sync_claim(cx, c),
            Some(Object::GroupSnapshot(g)) => self.sync_group(cx, g),
            Some(Object::GroupContent(c)) => self.sync_group_content(cx, c),
            _ => {}
        }
        self.syncing = None;
    }

    /// The object synced when the write was issued, the object written
    /// and its incarnation.
    fn api_done(&mut self, cx: &mut Cx<Self>, (owner, key, uid): Self::Call, result: ApiResult) {
        match result {
            ApiResult::Ok(Some(o)) => {
                cx.succeed(&key);
                self.mark(cx, &o);
                cx.cache_mut().apply(o);
            }
            // A content made by an earlier attempt: it is the one.
            ApiResult::AlreadyExists => {
                cx.succeed(&key);
            }
            ApiResult::Ok(None) | ApiResult::NotFound => {
                cx.succeed(&key);
                if let Some(o) = cx.cache_mut().gone(&key, &uid) {
                    self.mark(cx, &o);
                }
            }
            _ => {
                cx.fail(owner.clone());
            }
        }
        cx.mark(key);
        cx.mark(owner);
    }

    /// Every snapshot and content is looked at again.
    fn resync(&mut self, cx: &mut Cx<Self>) {
        let all: Vec<ObjectKey> = cx
            .cache()
            .of_kind(Kind::VolumeSnapshot)
            .chain(cx.cache().of_kind(Kind::VolumeSnapshotContent))
            .chain(cx.cache().of_kind(Kind::VolumeGroupSnapshot))
            .chain(cx.cache().of_kind(Kind::VolumeGroupSnapshotContent))
            .map(Object::key)
            .collect();
        cx.mark_all(all);
    }

    /// One write per object at a time.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        let writing = cx.in_flight().map(|(k, _, _)| k);
        crate::machine::one_at_a_time(
            "snapshot controller",
            writing,
            |k| cx.busy(k),
            cx.held_count(),
        )
    }
}
