//! The Secret a content's CreateSnapshot and DeleteSnapshot (or the group
//! calls) get: the one its deletion-secret annotations name — which the
//! snapshot controller wrote from the class's
//! `csi.storage.k8s.io/snapshotter-secret-*` (or `group-snapshotter-…`)
//! parameters, or the admin wrote on a pre-provisioned content. It is read
//! with a `get` before the call, kept for the content until the content
//! goes, and shown nowhere but in the call.
//!
//! A pre-provisioned content's check (ListSnapshots, GetVolumeGroupSnapshot)
//! gets its class's `csi.storage.k8s.io/snapshotter-list-secret-*` (or
//! `group-snapshotter-get-secret-*`) instead, `${volumesnapshotcontent.name}`
//! (or `${volumegroupsnapshotcontent.name}`) its only template; a group
//! member's check gets its annotations' Secret.
//!
//! As upstream: an annotation pair with an empty half is an error; a
//! Secret that cannot be read fails the create or the check; a delete whose
//! Secret is gone (its namespace deleted first, say) goes on without it.

use super::cut::CutContent;
use super::*;
use crate::control::secrets;

/// What a Secret is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Purpose {
    /// CreateSnapshot (CreateVolumeGroupSnapshot).
    Create,
    /// DeleteSnapshot (DeleteVolumeGroupSnapshot).
    Delete,
    /// ListSnapshots (GetVolumeGroupSnapshot) of a snapshot that exists.
    Check,
}

/// The Secret `c`'s annotations name, if any; an error when one half of
/// the pair is empty.
fn annotated<C: CutContent>(c: &C) -> Result<Option<SecretReference>, String> {
    let (name_key, namespace_key) = C::DELETION_SECRET;
    let ann = &c.meta().annotations;
    match (ann.get(name_key), ann.get(namespace_key)) {
        (Some(name), Some(namespace)) if secrets::valid_ref(name, namespace).is_some() => {
            Ok(secrets::valid_ref(name, namespace))
        }
        (Some(name), Some(namespace)) if !name.is_empty() && !namespace.is_empty() => Err(format!(
            "snapshot content {:?} names Secret {name:?} in namespace {namespace:?} in its {name_key} / {namespace_key} annotations, which is no valid Secret name and namespace; correct the annotations",
            c.meta().name
        )),
        (Some(_), Some(_)) => Err(format!(
            "cannot retrieve secrets for snapshot content {:?}, err: secret name or namespace not specified",
            c.meta().name
        )),
        _ => Ok(None),
    }
}

impl SnapshotterReconciler {
    /// The Secret `c`'s check gets: its class's list (get) Secret, or, for
    /// a group member, the one its annotations name; upstream's messages
    /// when the class is missing or its parameters are wrong.
    fn checked<C: CutContent>(
        &self,
        cx: &Cx<Self>,
        c: &C,
    ) -> Result<Option<SecretReference>, String> {
        if c.group_member() {
            return annotated(c);
        }
        let Some(class) = c.class_name() else {
            return Ok(None);
        };
        let name = &c.meta().name;
        let parameters = match cx.cache().find(C::CLASS_KIND, "", class) {
            Some(Object::SnapshotClass(k)) => &k.parameters,
            Some(Object::GroupSnapshotClass(k)) => &k.parameters,
            _ => {
                return Err(format!(
                    "failed to get {noun} class {class} for {noun} content {name}: {resource} {class:?} not found",
                    noun = C::NOUN,
                    resource = C::CLASS_RESOURCE,
                ));
            }
        };
        let tokens = secrets::SnapshotTokens {
            kind: C::TOKEN_KIND,
            content: name,
            snapshot: None,
        };
        secrets::secret_ref(&C::CHECK_SECRET, parameters, tokens).map_err(|e| {
            format!(
                "failed to get secret reference for {} content {name}: {e}",
                C::NOUN
            )
        })
    }

    /// The secrets `c`'s call for `purpose` gets: `Ok(Some)` when known
    /// (empty when the content names no Secret), `Ok(None)` when a read of
    /// the Secret is now under way, `Err` when the annotations are wrong.
    pub(super) fn credentials_for<C: CutContent>(
        &mut self,
        cx: &mut Cx<Self>,
        c: &C,
        purpose: Purpose,
    ) -> Result<Option<driver::Secrets>, String> {
        let secret = match purpose {
            Purpose::Check => self.checked(cx, c)?,
            Purpose::Create | Purpose::Delete => annotated(c)?,
        };
        let Some(secret) = secret else {
            return Ok(Some(driver::Secrets::default()));
        };
        let key = c.key();
        if let Some(known) = self.credentials.get(&(key.clone(), purpose)) {
            return Ok(Some(known.clone()));
        }
        Self::api(
            cx,
            secrets::get(&secret),
            Call::GetSecret {
                content: key,
                secret,
                purpose,
            },
        );
        Ok(None)
    }

    /// The read of `secret` for `content` answered.
    pub(super) fn secret_read(
        &mut self,
        cx: &mut Cx<Self>,
        content: ObjectKey,
        secret: &SecretReference,
        purpose: Purpose,
        result: ApiResult,
    ) {
        if cx.cache().get(&content).is_none() {
            // The content went meanwhile: nothing to keep.
            return;
        }
        let gone = matches!(result, ApiResult::NotFound);
        match (secrets::read(secret, result), purpose) {
            (Ok(data), _) => {
                self.credentials.insert((content.clone(), purpose), data);
            }
            // A delete goes on without a Secret that is gone.
            (Err(_), Purpose::Delete) if gone => {
                self.credentials
                    .insert((content.clone(), purpose), driver::Secrets::default());
            }
            (Err(_), Purpose::Delete) => {
                let why = if content.kind == Kind::VolumeGroupSnapshotContent {
                    reason::GROUP_SNAPSHOT_DELETE_ERROR
                } else {
                    reason::SNAPSHOT_DELETE_ERROR
                };
                cx.event(Event::warning(
                    content.clone(),
                    why,
                    "Failed to get snapshot class or credentials",
                ));
                cx.fail(content.clone());
            }
            (Err(e), Purpose::Create) => {
                let msg = format!(
                    "failed to get input parameters to create snapshot for content {}: {:?}",
                    content.name,
                    e.to_string()
                );
                self.fail(cx, &content, msg, false);
            }
            (Err(e), Purpose::Check) => {
                let noun = if content.kind == Kind::VolumeGroupSnapshotContent {
                    "group snapshot"
                } else {
                    "snapshot"
                };
                let msg = format!(
                    "failed to get credentials for {noun} content {}: {e}",
                    content.name
                );
                self.fail(cx, &content, msg, false);
            }
        }
        cx.mark(content);
    }
}

impl SnapshotterReconciler {
    /// Forgets every Secret read for `content`.
    pub(super) fn drop_credentials(&mut self, content: &ObjectKey) {
        self.credentials.retain(|(k, _), _| k != content);
    }
}
