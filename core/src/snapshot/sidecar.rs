//! csi-snapshotter, external-snapshotter's sidecar controller, as a sans-IO
//! machine (pkg/sidecar-controller). For each VolumeSnapshotContent of its
//! driver it:
//!
//! * cuts the storage snapshot of a dynamic content (`source.volumeHandle`,
//!   no status yet): the `volumesnapshot-being-created` annotation first,
//!   then CreateSnapshot named `snapshot-<VolumeSnapshot uid>` with the
//!   class's parameters (`csi.storage.k8s.io/` keys stripped), then the
//!   answer in `status` (snapshotHandle, readyToUse, creationTime in
//!   nanoseconds, restoreSize), then the annotation removed. A failure is
//!   `status.error` with a `SnapshotCreationFailed` warning; a final one
//!   (not DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED or
//!   CANCELLED) also removes the annotation, since nothing is being cut.
//! * asks again (with backoff) while a snapshot is not ready: CreateSnapshot
//!   again for a dynamic one, ListSnapshots by id for a pre-provisioned one.
//! * when a content is being deleted and the snapshot controller has marked
//!   it `volumesnapshot-being-deleted` (or it is a pre-provisioned content
//!   never bound), and no cut is in flight: DeleteSnapshot when the policy
//!   is Delete, the status cleared, then the
//!   `volumesnapshotcontent-bound-protection` finalizer removed.
//!
//! Secrets: see the `credentials` module. A deliberate difference: `status.error.time`
//! is left unset (the core has no wall clock).

mod content;
mod credentials;
mod cut;
mod group;

pub use credentials::Purpose;

use std::collections::{BTreeMap, BTreeSet};

use super::csi_parameters;
use crate::Status;
use crate::control::{ApiCall, ApiResult, Controller, CsiResult, Cx, Engine, Event, Watch};
use crate::driver::{self, Request, Response};
use crate::model::names::{
    ANN_GROUP_SNAPSHOT_HANDLE, ANN_SNAPSHOT_BEING_CREATED, ANN_SNAPSHOT_BEING_DELETED,
    FINALIZER_CONTENT_BOUND, PARAM_SNAPSHOT_CONTENT_NAME, PARAM_SNAPSHOT_NAME,
    PARAM_SNAPSHOT_NAMESPACE, reason,
};
use crate::model::*;

/// What a write settles once it succeeds.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Settles {
    /// Nothing.
    Nothing,
    /// The driver's answer is in the status.
    Cut,
    /// The error is in the status: tell the user.
    Failed(Event),
}

/// An operation in flight, by the content it is for.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Call {
    /// An update of the content (metadata or status).
    Write {
        /// The content.
        content: ObjectKey,
        /// The incarnation written.
        uid: String,
        /// The version written against.
        rv: String,
        /// What it settles once it succeeds.
        settles: Settles,
    },
    /// CreateSnapshot (CreateVolumeGroupSnapshot for a group content).
    Create {
        /// The content.
        content: ObjectKey,
    },
    /// ListSnapshots for a pre-provisioned snapshot (GetVolumeGroupSnapshot
    /// for a group).
    Check {
        /// The content.
        content: ObjectKey,
    },
    /// DeleteSnapshot (DeleteVolumeGroupSnapshot).
    Delete {
        /// The content.
        content: ObjectKey,
    },
    /// The get of the Secret a content's call needs.
    GetSecret {
        /// The content.
        content: ObjectKey,
        /// The Secret.
        secret: SecretReference,
        /// The call it is for.
        purpose: Purpose,
    },
}

/// What the driver answered, not yet in a content's status.
#[derive(Debug, Clone, PartialEq, Hash)]
enum Cut {
    One(driver::Snapshot),
    Group(driver::GroupSnapshot),
}

impl Call {
    fn content(&self) -> &ObjectKey {
        match self {
            Call::Write { content, .. }
            | Call::Create { content }
            | Call::Check { content }
            | Call::Delete { content }
            | Call::GetSecret { content, .. } => content,
        }
    }
}

/// The csi-snapshotter machine for one driver. See the module documentation.
pub type Snapshotter = Engine<SnapshotterReconciler>;

/// What csi-snapshotter keeps of its own; the engine keeps the rest.
#[derive(Debug, Clone, Hash)]
pub struct SnapshotterReconciler {
    driver: String,
    /// The group snapshot kinds are served too.
    groups: bool,
    /// What the driver answered, not yet in the content's status.
    cut: BTreeMap<ObjectKey, Cut>,
    /// Errors not yet in the content's status, and whether they are final.
    failed: BTreeMap<ObjectKey, (String, bool)>,
    /// Contents whose storage snapshot DeleteSnapshot removed.
    deleted: BTreeSet<ObjectKey>,
    /// The Secret data read for a content's calls, until the content goes.
    credentials: BTreeMap<(ObjectKey, Purpose), driver::Secrets>,
    /// `--snapshot-name-prefix` and `--snapshot-name-uuid-length`.
    naming: (String, Option<usize>),
    /// `--extra-create-metadata`: CreateSnapshot's parameters also name
    /// the snapshot and the content.
    extra_create_metadata: bool,
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::VolumeSnapshotContent, "", name)
}

/// Upstream's isCSIFinalError: these codes may still see the snapshot cut.
impl Snapshotter {
    /// csi-snapshotter for `driver`, with empty memory.
    pub fn new(driver: &str) -> Snapshotter {
        let reconciler = SnapshotterReconciler {
            driver: driver.into(),
            groups: false,
            cut: BTreeMap::new(),
            failed: BTreeMap::new(),
            deleted: BTreeSet::new(),
            credentials: BTreeMap::new(),
            naming: ("snapshot".into(), None),
            extra_create_metadata: false,
        };
        Engine::driving(reconciler, 1_000, 300_000)
    }

    /// Storage snapshots named `<prefix>-<VolumeSnapshot UID>`, the UID cut
    /// to `uuid_length` characters without its dashes when given.
    pub fn with_naming(mut self, prefix: &str, uuid_length: Option<usize>) -> Snapshotter {
        self.controller_mut().naming = (prefix.to_string(), uuid_length);
        self
    }

    /// CreateSnapshot's parameters also name the snapshot and the content.
    pub fn with_extra_create_metadata(mut self, on: bool) -> Snapshotter {
        self.controller_mut().extra_create_metadata = on;
        self
    }
}

impl SnapshotterReconciler {
    /// The storage snapshot's name for the VolumeSnapshot `uid`.
    fn snapshot_name(&self, uid: &str) -> String {
        let (prefix, length) = &self.naming;
        match length {
            None => format!("{prefix}-{uid}"),
            Some(n) => {
                let plain: String = uid.chars().filter(|c| *c != '-').take(*n).collect();
                format!("{prefix}-{plain}")
            }
        }
    }

    fn mark(&mut self, cx: &mut Cx<Self>, o: &Object) {
        match o {
            Object::Content(_) | Object::GroupContent(_) => {
                cx.mark(o.key());
            }
            // A class appearing may unblock the contents that name it.
            Object::SnapshotClass(class) => {
                Self::mark_naming::<VolumeSnapshotContent>(cx, &class.metadata.name);
            }
            Object::GroupSnapshotClass(class) => {
                Self::mark_naming::<VolumeGroupSnapshotContent>(cx, &class.metadata.name);
            }
            _ => {}
        }
    }

    fn written(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        let Call::Write {
            content,
            uid,
            rv,
            settles,
        } = call
        else {
            return;
        };
        match result {
            ApiResult::Ok(Some(o)) => {
                cx.cache_mut().apply(o);
                match settles {
                    Settles::Nothing => {}
                    Settles::Cut => {
                        self.cut.remove(&content);
                    }
                    Settles::Failed(event) => {
                        self.failed.remove(&content);
                        cx.event(event);
                    }
                }
            }
            ApiResult::Ok(None) | ApiResult::NotFound => {
                cx.cache_mut().gone(&content, &uid);
                self.forget(cx, &content);
            }
            // Changed meanwhile, and the change is already here.
            _ if cx.cache().newer_than(&content, &rv) => {}
            // A status write is not gated by the backoff (what the driver
            // answered goes in first): it waits for the timer or for news,
            // not for the next drain.
            _ => {
                cx.fail(content);
                return;
            }
        }
        cx.mark(content);
    }

    fn forget(&mut self, cx: &mut Cx<Self>, content: &ObjectKey) {
        self.drop_credentials(content);
        self.cut.remove(content);
        self.failed.remove(content);
        self.deleted.remove(content);
        cx.succeed(content);
    }

    fn answered(&mut self, cx: &mut Cx<Self>, call: Call, result: Result<Response, Status>) {
        let content = call.content().clone();
        match (call, result) {
            (Call::Create { .. } | Call::Check { .. }, Ok(Response::GroupSnapshot(g))) => {
                self.failed.remove(&content);
                self.cut.insert(content.clone(), Cut::Group(g));
            }
            (Call::Create { .. }, Ok(Response::Snapshot(s))) => {
                self.failed.remove(&content);
                self.cut.insert(content.clone(), Cut::One(s));
            }
            (Call::Check { .. }, Ok(Response::Snapshots { entries, .. })) => {
                match entries.into_iter().next() {
                    Some(s) => {
                        self.failed.remove(&content);
                        self.cut.insert(content.clone(), Cut::One(s));
                    }
                    None => {
                        let msg = format!(
                            "can not find snapshot for snapshotID {:?}: the driver lists no such snapshot; check the content's source.snapshotHandle",
                            self.snapshot_handle(cx, &content)
                        );
                        self.fail(cx, &content, msg, false)
                    }
                }
            }
            (Call::Delete { .. }, Ok(_)) => {
                cx.succeed(&content);
                self.deleted.insert(content.clone());
            }
            (Call::Delete { .. }, Err(_)) => {
                let (why, what) = if content.kind == Kind::VolumeGroupSnapshotContent {
                    (
                        reason::GROUP_SNAPSHOT_DELETE_ERROR,
                        "Failed to delete group snapshot",
                    )
                } else {
                    (reason::SNAPSHOT_DELETE_ERROR, "Failed to delete snapshot")
                };
                cx.event(Event::warning(content.clone(), why, what));
                cx.fail(content.clone());
            }
            (Call::Create { .. }, Err(e)) => {
                let msg = if content.kind == Kind::VolumeGroupSnapshotContent {
                    format!(
                        "failed to take group snapshot of the volumes {:?}: {:?}",
                        self.group_volume_handles(cx, &content),
                        e.go_error()
                    )
                } else {
                    format!(
                        "failed to take snapshot of the volume {}: {:?}",
                        self.volume_handle(cx, &content),
                        e.go_error()
                    )
                };
                self.fail(cx, &content, msg, e.is_final());
            }
            (Call::Check { .. }, Err(e)) => self.fail(cx, &content, e.go_error(), false),
            (_, Ok(other)) => self.fail(
                cx,
                &content,
                format!("the driver answered with {other:?}"),
                false,
            ),
            (Call::Write { .. } | Call::GetSecret { .. }, Err(_)) => {}
        }
        cx.mark(content);
    }

    fn snapshot_handle(&self, cx: &Cx<Self>, content: &ObjectKey) -> String {
        match cx.cache().get(content) {
            Some(Object::Content(c)) => c.snapshot_handle().unwrap_or_default().to_string(),
            _ => String::new(),
        }
    }

    fn volume_handle(&self, cx: &Cx<Self>, content: &ObjectKey) -> String {
        match cx.cache().get(content) {
            Some(Object::Content(c)) => c.spec.source.volume_handle.clone().unwrap_or_default(),
            _ => String::new(),
        }
    }

    /// A failure the driver reported: in the status, and asked again
    /// with backoff.
    fn fail(&mut self, cx: &mut Cx<Self>, content: &ObjectKey, message: String, final_error: bool) {
        self.failed.insert(content.clone(), (message, final_error));
        cx.fail(content.clone());
    }

    /// A content that cannot be cut as its class stands: in the status,
    /// and looked at again when the class changes (no timer).
    fn blocked(&mut self, cx: &mut Cx<Self>, content: &ObjectKey, message: String) {
        self.failed.insert(content.clone(), (message, false));
        cx.mark(content.clone());
    }

    /// A class appearing may unblock the contents of kind `T` that name it.
    fn mark_naming<T: cut::CutContent + crate::model::Variant>(cx: &mut Cx<Self>, class: &str) {
        let naming: Vec<ObjectKey> = cx
            .cache()
            .of_kind(T::KIND)
            .filter_map(T::of)
            .filter(|c| c.class_name() == Some(class))
            .map(T::key)
            .collect();
        cx.mark_all(naming);
    }

    /// An API call that holds its content busy until it completes.
    fn api(cx: &mut Cx<Self>, call: ApiCall, what: Call) {
        cx.api_holding([what.content().clone()], call, what);
    }

    /// A CSI call that holds its content busy until it completes.
    fn csi(cx: &mut Cx<Self>, call: Request, what: Call) {
        cx.csi_holding([what.content().clone()], None, call, what);
    }

    fn sync(&mut self, cx: &mut Cx<Self>, name: &ObjectKey) {
        let Some(shared) = cx.cache().get_shared(name) else {
            return;
        };
        let Object::Content(c) = &*shared else {
            return;
        };
        if c.spec.driver != self.driver || cx.busy(name) {
            return;
        }
        if should_delete(c) {
            return self.sync_deleted(cx, c);
        }
        // What the driver answered goes into the status first, even while
        // backing off (it is not an attempt).
        if let Some(Cut::One(s)) = self.cut.get(name).cloned() {
            return self.write_status(cx, c, &s);
        }
        if let Some((message, final_error)) = self.failed.get(name).cloned() {
            return self.write_error(cx, c, message, final_error);
        }
        if cx.waiting(name) {
            return;
        }
        if c.ready() {
            if c.metadata
                .annotations
                .contains_key(ANN_SNAPSHOT_BEING_CREATED)
            {
                let mut next = c.clone();
                next.metadata.annotations.remove(ANN_SNAPSHOT_BEING_CREATED);
                self.write(cx, c, ApiCall::Update(Object::Content(next)));
            }
            return;
        }
        // A group member's snapshot is cut with its group; it is only
        // asked after.
        let member = c.metadata.has_annotation(ANN_GROUP_SNAPSHOT_HANDLE);
        let handle = c.snapshot_handle().map(str::to_string);
        match (&c.spec.source.volume_handle, &handle) {
            (Some(volume), _) if !member => self.create(cx, c, volume),
            (Some(_), None) => {}
            (_, Some(handle)) => {
                let secrets = match self.credentials_for(cx, c, Purpose::Check) {
                    Ok(Some(secrets)) => secrets,
                    Ok(None) => return,
                    Err(e) => return self.blocked(cx, name, e),
                };
                Self::csi(
                    cx,
                    Request::ListSnapshots(driver::ListSnapshots {
                        max_entries: 0,
                        starting_token: String::new(),
                        source_volume_id: String::new(),
                        snapshot_id: handle.clone(),
                        secrets,
                    }),
                    Call::Check {
                        content: name.clone(),
                    },
                );
            }
            (None, None) => {}
        }
    }

    /// CreateSnapshot for a dynamic content, after marking it being created.
    fn create(&mut self, cx: &mut Cx<Self>, c: &VolumeSnapshotContent, volume: &str) {
        let name = c.metadata.name.clone();
        let content = key(&name);
        let class = c.spec.volume_snapshot_class_name.as_deref().and_then(|n| {
            match cx.cache().find(Kind::VolumeSnapshotClass, "", n) {
                Some(Object::SnapshotClass(class)) => Some(class.clone()),
                _ => None,
            }
        });
        let Some(class) = class else {
            let why = match &c.spec.volume_snapshot_class_name {
                None => format!("failed to take snapshot {name} without a snapshot class"),
                Some(n) => format!("volumesnapshotclass.snapshot.storage.k8s.io {n:?} not found"),
            };
            let msg = format!(
                "failed to get input parameters to create snapshot for content {name}: {why:?}"
            );
            return self.blocked(cx, &content, msg);
        };
        let mut parameters = match csi_parameters(&class.parameters) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("failed to remove CSI Parameters of prefixed keys: {e}");
                return self.blocked(cx, &content, msg);
            }
        };
        if self.extra_create_metadata {
            let r = &c.spec.volume_snapshot_ref;
            parameters.insert(PARAM_SNAPSHOT_NAME.into(), r.name.clone());
            parameters.insert(PARAM_SNAPSHOT_NAMESPACE.into(), r.namespace.clone());
            parameters.insert(PARAM_SNAPSHOT_CONTENT_NAME.into(), name.clone());
        }
        let secrets = match self.credentials_for(cx, c, Purpose::Create) {
            Ok(Some(secrets)) => secrets,
            Ok(None) => return,
            Err(e) => {
                let msg = format!(
                    "failed to get input parameters to create snapshot for content {name}: {e:?}"
                );
                return self.blocked(cx, &content, msg);
            }
        };
        if !c
            .metadata
            .annotations
            .contains_key(ANN_SNAPSHOT_BEING_CREATED)
        {
            let mut next = c.clone();
            next.metadata
                .annotations
                .insert(ANN_SNAPSHOT_BEING_CREATED.into(), "yes".into());
            return self.write(cx, c, ApiCall::Update(Object::Content(next)));
        }
        Self::csi(
            cx,
            Request::CreateSnapshot(driver::CreateSnapshot {
                source_volume_id: volume.into(),
                name: self.snapshot_name(&c.spec.volume_snapshot_ref.uid),
                parameters,
                secrets,
            }),
            Call::Create { content },
        );
    }

    /// What the driver reported, merged into the content's status as
    /// upstream's updateSnapshotContentStatus does.
    fn write_status(&mut self, cx: &mut Cx<Self>, c: &VolumeSnapshotContent, s: &driver::Snapshot) {
        let mut status = c.status.clone().unwrap_or_default();
        let nanos = s
            .creation_time
            .seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(s.creation_time.nanos));
        status
            .snapshot_handle
            .get_or_insert_with(|| s.snapshot_id.clone());
        if status.ready_to_use != Some(s.ready_to_use) {
            status.ready_to_use = Some(s.ready_to_use);
            if s.ready_to_use {
                status.error = None;
            }
        }
        status.creation_time.get_or_insert(nanos);
        if status.restore_size.is_none() && s.size_bytes > 0 {
            status.restore_size = Some(i64::try_from(s.size_bytes).unwrap_or(i64::MAX));
        }
        // A snapshot the driver says belongs to a group is a member, even
        // a pre-provisioned one: it goes with its group, never alone (the
        // driver refuses a member's DeleteSnapshot).
        if status.volume_group_snapshot_handle.is_none() && !s.group_snapshot_id.is_empty() {
            status.volume_group_snapshot_handle = Some(s.group_snapshot_id.clone());
        }
        self.ask_again_unless(cx, key(&c.metadata.name), s.ready_to_use);
        let mut next = c.clone();
        next.status = Some(status);
        self.write_content(
            cx,
            c,
            ApiCall::UpdateStatus(Object::Content(next)),
            Settles::Cut,
        );
    }

    fn write<C: cut::CutContent>(&mut self, cx: &mut Cx<Self>, c: &C, call: ApiCall) {
        self.write_content(cx, c, call, Settles::Nothing);
    }

    /// A write of the content at `content` (incarnation `uid`).
    fn write_object(
        &mut self,
        cx: &mut Cx<Self>,
        content: ObjectKey,
        uid: &str,
        call: ApiCall,
        settles: Settles,
    ) {
        let what = Call::Write {
            content,
            uid: uid.to_string(),
            rv: call.version().to_string(),
            settles,
        };
        Self::api(cx, call, what);
    }

    /// A cut not yet ready is asked after again later, not at once.
    fn ask_again_unless(&mut self, cx: &mut Cx<Self>, content: ObjectKey, ready: bool) {
        if ready {
            cx.succeed(&content);
        } else {
            cx.fail(content);
        }
    }
}

/// Upstream's shouldDelete: a content being deleted that is a
/// pre-provisioned one never bound, or one the snapshot controller marked
/// being deleted, unless a cut may still be under way.
fn should_delete(c: &VolumeSnapshotContent) -> bool {
    if !c.metadata.deleting() {
        return false;
    }
    if c.spec.source.snapshot_handle.is_some() && c.spec.volume_snapshot_ref.uid.is_empty() {
        return true;
    }
    if c.metadata
        .annotations
        .contains_key(ANN_SNAPSHOT_BEING_CREATED)
    {
        return false;
    }
    c.metadata
        .annotations
        .contains_key(ANN_SNAPSHOT_BEING_DELETED)
}

impl Controller for SnapshotterReconciler {
    type Key = ObjectKey;
    type Call = Call;
    type Retry = ObjectKey;

    fn retry(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        cx.mark(key);
    }

    fn watches(&self, kind: Kind) -> bool {
        SnapshotterReconciler::watches(self, kind)
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let (Watch::Applied(o) | Watch::Deleted(o)) = &watch;
        if let Watch::Deleted(o) = &watch {
            // Secret data read for a content that went is dropped.
            self.drop_credentials(&o.key());
        }
        self.mark(cx, &o.clone());
        cx.apply(watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, content: ObjectKey) {
        if content.kind == Kind::VolumeGroupSnapshotContent {
            self.sync_group(cx, &content);
        } else {
            self.sync(cx, &content);
        }
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        if let Call::GetSecret {
            content,
            secret,
            purpose,
        } = call
        {
            return self.secret_read(cx, content, &secret, purpose, result);
        }
        self.written(cx, call, result);
    }

    fn csi_done(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        self.answered(cx, call, result);
    }

    /// One operation per content at a time.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        let busy = cx.in_flight().map(Call::content);
        crate::machine::one_at_a_time("snapshotter", busy, |k| cx.busy(k), cx.held_count())
    }
}
