//! What the snapshot controller does the same way to a VolumeSnapshot and
//! a VolumeGroupSnapshot: a refusal written into the status with its
//! event, and the checks that bind a snapshot to its content — a named
//! (pre-provisioned) content bound to it, a dynamic one made for it. The
//! traits say where the two kinds differ (names, reasons, fields).

use super::*;

/// A snapshot or a group snapshot, as the controller syncs it.
pub(super) trait Taken: Clone {
    /// Its content's kind.
    type Content: BoundContent;
    /// The content kind as messages name it.
    const CONTENT: &'static str;
    /// What a message calls it ("snapshot", "group snapshot").
    const WHAT: &'static str;
    /// The reasons of its binding failures: content missing, of the wrong
    /// provenance, bound to another.
    const MISSING: &'static str;
    /// See [`Taken::MISSING`].
    const MISMATCH: &'static str;
    /// See [`Taken::MISSING`].
    const MISBOUND: &'static str;
    /// Its key.
    fn key(&self) -> ObjectKey;
    /// Its metadata.
    fn meta(&self) -> &ObjectMeta;
    /// As an API object.
    fn object(self) -> Object;
    /// The class it asks for.
    fn class(&self) -> Option<&String>;
    /// The status's error.
    fn error(&self) -> Option<&VolumeSnapshotError>;
    /// The status's readyToUse and error, to change.
    fn error_mut(&mut self) -> (&mut Option<bool>, &mut Option<VolumeSnapshotError>);
}

/// A content as the snapshot controller binds it.
pub(super) trait BoundContent: Clone + PartialEq {
    /// True when it names storage that exists (pre-provisioned).
    fn pre_provisioned(&self) -> bool;
    /// True when it names what to cut (dynamic).
    fn dynamic(&self) -> bool;
    /// Its class.
    fn class(&self) -> Option<&String>;
    /// The snapshot it is bound to.
    fn reference(&self) -> &ObjectReference;
    /// The snapshot it is bound to, to change.
    fn reference_mut(&mut self) -> &mut ObjectReference;
    /// Its class, to change.
    fn class_mut(&mut self) -> &mut Option<String>;
    /// As an API object.
    fn object(self) -> Object;
}

impl Taken for VolumeSnapshot {
    type Content = VolumeSnapshotContent;
    const CONTENT: &'static str = "VolumeSnapshotContent";
    const WHAT: &'static str = "snapshot";
    const MISSING: &'static str = reason::SNAPSHOT_CONTENT_MISSING;
    const MISMATCH: &'static str = reason::SNAPSHOT_CONTENT_MISMATCH;
    const MISBOUND: &'static str = reason::SNAPSHOT_CONTENT_MISBOUND;

    fn key(&self) -> ObjectKey {
        snapshot_key(self)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn object(self) -> Object {
        Object::Snapshot(self)
    }

    fn class(&self) -> Option<&String> {
        self.spec.volume_snapshot_class_name.as_ref()
    }

    fn error(&self) -> Option<&VolumeSnapshotError> {
        self.status.as_ref()?.error.as_ref()
    }

    fn error_mut(&mut self) -> (&mut Option<bool>, &mut Option<VolumeSnapshotError>) {
        let status = self.status.get_or_insert_with(Default::default);
        (&mut status.ready_to_use, &mut status.error)
    }
}

impl BoundContent for VolumeSnapshotContent {
    fn pre_provisioned(&self) -> bool {
        self.spec.source.snapshot_handle.is_some()
    }

    fn dynamic(&self) -> bool {
        self.spec.source.volume_handle.is_some()
    }

    fn class(&self) -> Option<&String> {
        self.spec.volume_snapshot_class_name.as_ref()
    }

    fn reference(&self) -> &ObjectReference {
        &self.spec.volume_snapshot_ref
    }

    fn reference_mut(&mut self) -> &mut ObjectReference {
        &mut self.spec.volume_snapshot_ref
    }

    fn class_mut(&mut self) -> &mut Option<String> {
        &mut self.spec.volume_snapshot_class_name
    }

    fn object(self) -> Object {
        Object::Content(self)
    }
}

impl Taken for VolumeGroupSnapshot {
    type Content = VolumeGroupSnapshotContent;
    const CONTENT: &'static str = "VolumeGroupSnapshotContent";
    const WHAT: &'static str = "group snapshot";
    const MISSING: &'static str = reason::GROUP_SNAPSHOT_CONTENT_MISSING;
    const MISMATCH: &'static str = reason::GROUP_SNAPSHOT_CONTENT_MISMATCH;
    const MISBOUND: &'static str = reason::GROUP_SNAPSHOT_CONTENT_MISBOUND;

    fn key(&self) -> ObjectKey {
        group::group_key(self)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn object(self) -> Object {
        Object::GroupSnapshot(self)
    }

    fn class(&self) -> Option<&String> {
        self.spec.volume_group_snapshot_class_name.as_ref()
    }

    fn error(&self) -> Option<&VolumeSnapshotError> {
        self.status.as_ref()?.error.as_ref()
    }

    fn error_mut(&mut self) -> (&mut Option<bool>, &mut Option<VolumeSnapshotError>) {
        let status = self.status.get_or_insert_with(Default::default);
        (&mut status.ready_to_use, &mut status.error)
    }
}

impl BoundContent for VolumeGroupSnapshotContent {
    fn pre_provisioned(&self) -> bool {
        self.spec.source.group_snapshot_handles.is_some()
    }

    fn dynamic(&self) -> bool {
        self.spec.source.group_snapshot_handles.is_none()
    }

    fn class(&self) -> Option<&String> {
        self.spec.volume_group_snapshot_class_name.as_ref()
    }

    fn reference(&self) -> &ObjectReference {
        &self.spec.volume_group_snapshot_ref
    }

    fn reference_mut(&mut self) -> &mut ObjectReference {
        &mut self.spec.volume_group_snapshot_ref
    }

    fn class_mut(&mut self) -> &mut Option<String> {
        &mut self.spec.volume_group_snapshot_class_name
    }

    fn object(self) -> Object {
        Object::GroupContent(self)
    }
}

/// What to do next with a content the checks passed.
pub(super) enum Bound<C> {
    /// Its binding was just written: wait for it.
    Writing,
    /// Bound: the snapshot's status follows it.
    Follow(C),
}

impl SnapshotReconciler {
    /// A refusal: the status's error (and readyToUse false when it says
    /// so) with a warning, once per message.
    pub(super) fn block<S: Taken>(&mut self, cx: &mut Cx<Self>, s: &S, b: Blocked) {
        if s.error().and_then(|e| e.message.as_deref()) == Some(b.message.as_str()) {
            return;
        }
        let mut next = s.clone();
        let (ready, error) = next.error_mut();
        *error = Some(VolumeSnapshotError {
            time: None,
            message: Some(b.message.clone()),
        });
        if b.unready {
            *ready = Some(false);
        }
        cx.event(Event::warning(s.key(), b.reason, b.message));
        self.write(cx, ApiCall::UpdateStatus(next.object()));
    }

    /// A snapshot naming its content (`name`, pre-provisioned): the content
    /// must exist, be pre-provisioned and be bound to it; an unbound
    /// reference (no UID, or no class) is completed here
    /// (checkandBindSnapshotContent).
    pub(super) fn bind_named<S: Taken>(
        &mut self,
        cx: &mut Cx<Self>,
        s: &S,
        name: &str,
        content: Option<S::Content>,
    ) -> Result<Bound<S::Content>, Blocked> {
        let Some(c) = content else {
            return Err(blocked(S::MISSING, format!("{} is missing", S::CONTENT)));
        };
        if !c.pre_provisioned() {
            return Err(blocked(
                S::MISMATCH,
                format!(
                    "{} is dynamically provisioned while expecting a pre-provisioned one",
                    S::CONTENT
                ),
            ));
        }
        let (meta, r) = (s.meta(), c.reference());
        if r.name != meta.name
            || r.namespace != meta.namespace
            || (!r.uid.is_empty() && r.uid != meta.uid)
        {
            return Err(blocked(
                S::MISBOUND,
                format!(
                    "{} [{name}] is bound to a different {}",
                    S::CONTENT,
                    S::WHAT
                ),
            ));
        }
        if r.uid.is_empty() || c.class().is_none() {
            let mut next = c.clone();
            next.reference_mut().uid = meta.uid.clone();
            if let Some(class) = s.class() {
                *next.class_mut() = Some(class.clone());
            }
            if next != c {
                self.write(cx, ApiCall::Update(next.object()));
                return Ok(Bound::Writing);
            }
        }
        Ok(Bound::Follow(c))
    }

    /// A snapshot whose content is made for it (`name`, dynamic): the
    /// content found must be a dynamic one made for it.
    pub(super) fn check_made<S: Taken>(
        &self,
        name: &str,
        c: &S::Content,
        made_for: bool,
    ) -> Result<(), Blocked> {
        if !c.dynamic() {
            return Err(blocked(
                S::MISMATCH,
                format!(
                    "{} {name} is pre-provisioned while expecting a dynamically provisioned one",
                    S::CONTENT
                ),
            ));
        }
        if !made_for {
            return Err(blocked(
                S::MISBOUND,
                format!(
                    "{} [{name}] is bound to a different {}",
                    S::CONTENT,
                    S::WHAT
                ),
            ));
        }
        Ok(())
    }
}
