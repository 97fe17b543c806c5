//! What the snapshotter does the same way to a VolumeSnapshotContent and a
//! VolumeGroupSnapshotContent: an error written into the status with its
//! event, and a content going (the storage deleted, the status cleared,
//! the bound finalizer removed). [`CutContent`] says where the two differ.

use super::credentials::Purpose;
use super::cut::CutContent;
use super::*;
use crate::model::names::reason;

/// `call` (a delete) carrying `secrets`.
fn with_secrets(call: Request, secrets: driver::Secrets) -> Request {
    match call {
        Request::DeleteSnapshot(mut d) => {
            d.secrets = secrets;
            Request::DeleteSnapshot(d)
        }
        Request::DeleteGroupSnapshot(mut d) => {
            d.secrets = secrets;
            Request::DeleteGroupSnapshot(d)
        }
        other => other,
    }
}

impl SnapshotterReconciler {
    /// A write of content `c`, settling `settles` once it succeeds.
    pub(super) fn write_content<C: CutContent>(
        &mut self,
        cx: &mut Cx<Self>,
        c: &C,
        call: ApiCall,
        settles: Settles,
    ) {
        self.write_object(cx, c.key(), &c.meta().uid, call, settles);
    }

    /// An error in the content's status (readyToUse false) with its event;
    /// a final create error also ends the being-created mark.
    pub(super) fn write_error<C: CutContent>(
        &mut self,
        cx: &mut Cx<Self>,
        c: &C,
        message: String,
        final_error: bool,
    ) {
        let key = c.key();
        if final_error && c.meta().has_annotation(C::BEING_CREATED) {
            let mut next = c.clone();
            next.meta_mut().annotations.remove(C::BEING_CREATED);
            return self.write_content(cx, c, ApiCall::Update(next.object()), Settles::Nothing);
        }
        let (reason, shown) = c.failure(&message);
        if c.shown_error() == Some(shown.as_str()) {
            self.failed.remove(&key);
            return;
        }
        let event = Event::warning(key, reason, shown.clone());
        let mut next = c.clone();
        next.set_error(shown);
        let call = ApiCall::UpdateStatus(next.object());
        self.write_content(cx, c, call, Settles::Failed(event));
    }

    /// A content going: its storage deleted (policy Delete), the status
    /// cleared, the bound finalizer removed.
    pub(super) fn sync_deleted<C: CutContent>(&mut self, cx: &mut Cx<Self>, c: &C) {
        let key = c.key();
        if let Some(call) = c.deletion() {
            if self.deleted.contains(&key) {
                let mut next = c.clone();
                next.clear_cut();
                let call = ApiCall::UpdateStatus(next.object());
                return self.write_content(cx, c, call, Settles::Nothing);
            }
            if cx.waiting(&key) {
                return;
            }
            let secrets = match self.credentials_for(cx, c, Purpose::Delete) {
                Ok(Some(secrets)) => secrets,
                Ok(None) => return,
                Err(_) => {
                    let why = if key.kind == Kind::VolumeGroupSnapshotContent {
                        reason::GROUP_SNAPSHOT_DELETE_ERROR
                    } else {
                        reason::SNAPSHOT_DELETE_ERROR
                    };
                    let e = Event::warning(
                        key.clone(),
                        why,
                        "Failed to get snapshot class or credentials",
                    );
                    cx.event(e);
                    cx.fail(key);
                    return;
                }
            };
            let call = with_secrets(call, secrets);
            Self::csi(cx, call, Call::Delete { content: key });
            return;
        }
        if c.meta().has_finalizer(C::BOUND_FINALIZER) {
            let mut next = c.clone();
            next.meta_mut().remove_finalizer(C::BOUND_FINALIZER);
            let call = ApiCall::Update(next.object());
            return self.write_content(cx, c, call, Settles::Nothing);
        }
        self.deleted.remove(&key);
    }
}
