//! The machines' API calls, carried out against a real API server.
//!
//! Writes never lose what the core does not model: an update is a JSON
//! merge patch between the object as last seen (the watch's view, through
//! the model) and the machine's new version, with the machine's
//! `resourceVersion` in it as the precondition — the API server answers 409
//! if the object changed since. Fields, labels, annotations and finalizers
//! the machine did not change are never sent. Every write carries the
//! field manager `volplane`. Taking a finalizer off is the one write without
//! the precondition: a strategic merge patch that removes it by value from
//! the incarnation its uid names, as the sidecars do, so that the
//! controllers that all write a volume as it goes never conflict.
//!
//! The adapter decides nothing: every update is sent, and only the API
//! server says whether it conflicts. What was last seen is kept by the
//! core's [`Cache`] rule (a version never replaces a newer one), so a late
//! answer cannot hide what the watch already brought: the base of a patch
//! is never older than what the machine wrote against. When it is newer,
//! the machine's precondition is stale and the server answers 409.

use std::sync::{Arc, Mutex};

use kube::Client;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use volplane_core::control::{ApiCall, ApiFailure, ApiResult, Cache};
use volplane_core::model::patch::merge_patch;
use volplane_core::model::{Object, ObjectKey};

use crate::convert::{to_core, to_json};
use crate::resources::api;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "volplane";

/// The objects as last seen (from watches and from the answers to writes),
/// each at the newest version seen: the base every update's patch is
/// computed from, and the UIDs events name.
#[derive(Debug, Clone, Default)]
pub struct Seen(Arc<Mutex<Cache>>);

impl Seen {
    /// Records `o` unless a newer version of it was seen, and answers the
    /// copy to hand on: the one seen already when `o` is the same version
    /// read again ([`Cache::intern`]).
    pub fn intern(&self, o: Arc<Object>) -> Arc<Object> {
        self.lock().intern(o)
    }

    /// A watch said `o` was deleted.
    pub fn deleted(&self, o: &Object) {
        self.lock().delete(o);
    }

    /// An answer said the incarnation `uid` of `key` is gone ("" for
    /// whichever is known).
    pub fn gone(&self, key: &ObjectKey, uid: &str) {
        self.lock().gone(key, uid);
    }

    /// The newest version seen of `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<Object> {
        self.lock().get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Carries out the machines' API calls on one client.
#[derive(Clone)]
pub struct ApiCaller {
    client: Client,
    seen: Seen,
}

impl std::fmt::Debug for ApiCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiCaller").finish_non_exhaustive()
    }
}

impl ApiCaller {
    /// Calls through `client`, patching against what `seen` holds.
    pub fn new(client: Client, seen: Seen) -> ApiCaller {
        ApiCaller { client, seen }
    }

    /// Carries out `call` and says what the API server answered.
    pub async fn call(&self, call: ApiCall) -> ApiResult {
        let (key, uid) = (call.key(), call.uid().to_string());
        let result = match call {
            ApiCall::Create(o) => self.create(&o).await,
            ApiCall::Update(o) => gone_if_finalized(self.update(&o, false).await),
            ApiCall::UpdateStatus(o) => gone_if_finalized(self.update(&o, true).await),
            ApiCall::RemoveFinalizer {
                key,
                uid,
                finalizer,
            } => gone_if_finalized(self.remove_finalizer(&key, &uid, &finalizer).await),
            ApiCall::Delete(k) => self.delete(&k).await,
            ApiCall::Get(k) => self.get(&k).await,
            ApiCall::List { kind, namespace } => self.list(kind, &namespace).await,
        };
        match &result {
            // A Secret read is handed to the one call that needs it; it is
            // never kept to patch against (nothing writes Secrets).
            ApiResult::Ok(Some(o)) if o.kind() == volplane_core::model::Kind::Secret => {}
            ApiResult::Ok(Some(o)) => {
                // The answer's copy, unless its watch event came first.
                let o = self.seen.intern(o.clone());
                return ApiResult::Ok(Some(o));
            }
            ApiResult::Ok(None) | ApiResult::NotFound => self.seen.gone(&key, &uid),
            _ => {}
        }
        result
    }

    async fn create(&self, o: &Object) -> ApiResult {
        let mut doc = to_json(o);
        if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("uid");
            meta.remove("creationTimestamp");
        }
        let object = match serde_json::from_value(doc) {
            Ok(d) => d,
            Err(e) => {
                let why = format!("{} does not serialise: {e}", o.key());
                return ApiResult::Failed(ApiFailure::Local(why));
            }
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let k = o.key();
        answer(
            api(&self.client, k.kind, &k.namespace)
                .create(&params, &object)
                .await,
            true,
        )
    }

    /// A merge patch from the object as last seen to `o`: the main resource
    /// (metadata and spec) or, with `status`, the status subresource. Sent
    /// whatever was seen: the server judges the precondition.
    async fn update(&self, o: &Object, status: bool) -> ApiResult {
        let key = o.key();
        let base = match self.seen.get(&key) {
            Some(b) => b,
            None => match self.get(&key).await {
                ApiResult::Ok(Some(b)) => std::sync::Arc::unwrap_or_clone(b),
                other => return other,
            },
        };
        let patch = update_patch(&base, o, status);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let api = api(&self.client, key.kind, &key.namespace);
        let patch = Patch::Merge(&patch);
        let result = if status {
            api.patch_status(&key.name, &params, &patch).await
        } else {
            api.patch(&key.name, &params, &patch).await
        };
        answer(result, false)
    }

    /// A strategic merge patch that takes `finalizer` off incarnation
    /// `uid` of `key`, whatever else changed: no resourceVersion, so no
    /// conflict with the other controllers writing the object, as the
    /// sidecars do. The uid in it is the precondition: the API server
    /// refuses to change it (422), which means this incarnation is gone.
    /// A kind a CRD brings takes no strategic merge patch: its finalizer
    /// is taken off the version last seen, under that precondition.
    async fn remove_finalizer(&self, key: &ObjectKey, uid: &str, finalizer: &str) -> ApiResult {
        if crate::roles::from_crd(key.kind) {
            let base = match self.seen.get(key) {
                Some(b) => b,
                None => match self.get(key).await {
                    ApiResult::Ok(Some(b)) => std::sync::Arc::unwrap_or_clone(b),
                    other => return other,
                },
            };
            if !uid.is_empty() && base.meta().uid != uid {
                return ApiResult::NotFound;
            }
            let mut next = base;
            next.meta_mut().remove_finalizer(finalizer);
            return self.update(&next, false).await;
        }
        let patch = finalizer_patch(uid, finalizer);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let api = api(&self.client, key.kind, &key.namespace);
        match api
            .patch(&key.name, &params, &Patch::Strategic(&patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("metadata.uid") => {
                ApiResult::NotFound
            }
            result => answer(result, false),
        }
    }

    async fn delete(&self, k: &ObjectKey) -> ApiResult {
        let api = api(&self.client, k.kind, &k.namespace);
        match api.delete(&k.name, &DeleteParams::default()).await {
            // The API server answers with the object either way: finalizers
            // hold it (it stays, marked for deletion) or it is gone.
            Ok(either::Either::Left(o)) => match convert(o) {
                ApiResult::Ok(Some(o)) if o.meta().finalizers.is_empty() => {
                    self.seen.gone(k, &o.meta().uid);
                    ApiResult::Ok(None)
                }
                other => other,
            },
            Ok(either::Either::Right(_)) => ApiResult::Ok(None),
            Err(e) => failure(e, false),
        }
    }

    async fn get(&self, k: &ObjectKey) -> ApiResult {
        answer(
            api(&self.client, k.kind, &k.namespace).get(&k.name).await,
            false,
        )
    }

    async fn list(&self, kind: volplane_core::model::Kind, namespace: &str) -> ApiResult {
        match api(&self.client, kind, namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                let mut objects = Vec::new();
                for item in list.items {
                    match convert(item) {
                        ApiResult::Ok(Some(o)) => objects.push(std::sync::Arc::unwrap_or_clone(o)),
                        other => return other,
                    }
                }
                ApiResult::Listed(objects)
            }
            Err(e) => failure(e, false),
        }
    }
}

/// A write that removed the last finalizer of an object being deleted
/// removed the object: the API server answers with its final state, but it
/// is gone (`Ok(None)`, as the machines expect of a write that removed it).
/// Pods are left alone: a pod being deleted gracefully has no finalizers
/// and still exists.
fn gone_if_finalized(result: ApiResult) -> ApiResult {
    match result {
        ApiResult::Ok(Some(o))
            if o.kind() != volplane_core::model::Kind::Pod
                && o.meta().deleting()
                && o.meta().finalizers.is_empty() =>
        {
            ApiResult::Ok(None)
        }
        other => other,
    }
}

/// The patch that takes `base` to `new`: the metadata and spec (or, with
/// `status`, the status) the machine changed, and the machine's
/// resourceVersion as the precondition (alone when nothing changed: the
/// server still judges it).
pub fn update_patch(base: &Object, new: &Object, status: bool) -> Value {
    let rv = json!({ "metadata": { "resourceVersion": new.meta().resource_version } });
    changes(base, new, status).unwrap_or(rv)
}

/// The strategic merge patch that takes `finalizer` off incarnation
/// `uid` ("": whichever there is).
pub fn finalizer_patch(uid: &str, finalizer: &str) -> Value {
    let mut meta = json!({ "$deleteFromPrimitiveList/finalizers": [finalizer] });
    if !uid.is_empty() {
        meta["uid"] = json!(uid);
    }
    json!({ "metadata": meta })
}

fn changes(base: &Object, new: &Object, status: bool) -> Option<Value> {
    let part = |o: &Object| {
        let mut v = o.to_json();
        if let Value::Object(map) = &mut v {
            if status {
                map.retain(|k, _| k == "status");
            } else {
                map.remove("status");
            }
        }
        v
    };
    let mut patch = merge_patch(&part(base), &part(new))?;
    let rv = json!(new.meta().resource_version);
    match patch.as_object_mut()?.entry("metadata") {
        serde_json::map::Entry::Occupied(mut m) => {
            m.get_mut()
                .as_object_mut()?
                .insert("resourceVersion".into(), rv);
        }
        serde_json::map::Entry::Vacant(v) => {
            v.insert(json!({ "resourceVersion": rv }));
        }
    }
    Some(patch)
}

fn convert(o: kube::api::DynamicObject) -> ApiResult {
    match serde_json::to_value(&o).map_err(|e| e.to_string()) {
        Ok(v) => match to_core(v) {
            Ok(o) => ApiResult::Ok(Some(o.into())),
            Err(e) => ApiResult::Failed(ApiFailure::Local(e.to_string())),
        },
        Err(e) => ApiResult::Failed(ApiFailure::Local(e)),
    }
}

fn answer(result: Result<kube::api::DynamicObject, kube::Error>, create: bool) -> ApiResult {
    match result {
        Ok(o) => convert(o),
        Err(e) => failure(e, create),
    }
}

/// What an error means to the machines: 409 is a conflict (on a create,
/// that the object exists), 404 that it is gone; any other answer is
/// failure of the fault its status names, and an error without an answer
/// a timeout or a transport failure.
fn failure(e: kube::Error, create: bool) -> ApiResult {
    match &e {
        kube::Error::Api(s) if s.is_already_exists() || (create && s.code == 409) => {
            ApiResult::AlreadyExists
        }
        kube::Error::Api(s) if s.code == 409 => ApiResult::Conflict,
        kube::Error::Api(s) if s.code == 404 => ApiResult::NotFound,
        _ => ApiResult::Failed(fault(e)),
    }
}

/// The fault of a call that failed: the fault its status names, or, for
/// an error without an answer, a local, timeout or transport failure.
/// (A read's caller, to whom 404 and 409 are no answer it waits for,
/// takes them as failures with their status too.)
pub(crate) fn fault(e: kube::Error) -> ApiFailure {
    match &e {
        kube::Error::Api(s) => {
            let retry_after = s.details.as_ref().map_or(0, |d| d.retry_after_seconds);
            ApiFailure::from_status(s.code, s.message.clone(), retry_after)
        }
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => {
            ApiFailure::Local(e.to_string())
        }
        _ if timed_out(&e) => ApiFailure::Timeout(e.to_string()),
        _ => ApiFailure::Transport(e.to_string()),
    }
}

/// Whether `e`, or what caused it, is a timeout (the client's own, or the
/// connection's).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<tokio::time::error::Elapsed>()
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            || c.to_string().contains("timed out")
        {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error kube returns for an answer the API server gave.
    fn answered(status: Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value(status).expect("a Status")))
    }

    #[test]
    fn an_answer_is_a_failure_of_the_fault_its_status_names() {
        let forbidden = answered(json!({
            "code": 403, "reason": "Forbidden",
            "message": "persistentvolumes \"pv-1\" is forbidden: User \"system:serviceaccount:x:y\" cannot update"
        }));
        let ApiResult::Failed(ApiFailure::Forbidden(m)) = failure(forbidden, false) else {
            panic!("403 is forbidden")
        };
        assert!(m.contains("cannot update"), "{m}");
        let throttled = answered(json!({
            "code": 429, "reason": "TooManyRequests", "message": "slow down",
            "details": {"retryAfterSeconds": 3}
        }));
        assert_eq!(
            failure(throttled, false),
            ApiResult::Failed(ApiFailure::TooManyRequests {
                message: "slow down".into(),
                retry_after: Some(3_000)
            })
        );
        let exists = answered(json!({"code": 409, "reason": "AlreadyExists", "message": "x"}));
        assert_eq!(failure(exists, true), ApiResult::AlreadyExists);
        let conflict = answered(json!({"code": 409, "reason": "Conflict", "message": "x"}));
        assert_eq!(failure(conflict, false), ApiResult::Conflict);
        let invalid = answered(json!({"code": 422, "reason": "Invalid", "message": "bad"}));
        assert!(matches!(
            failure(invalid, false),
            ApiResult::Failed(ApiFailure::Invalid(_))
        ));
        let down = answered(json!({"code": 503, "reason": "ServiceUnavailable", "message": "x"}));
        assert!(matches!(
            failure(down, false),
            ApiResult::Failed(ApiFailure::Server { code: 503, .. })
        ));
    }

    #[test]
    fn an_error_without_an_answer_is_a_timeout_or_the_transport() {
        let elapsed = std::io::Error::new(std::io::ErrorKind::TimedOut, "operation timed out");
        let timed_out = kube::Error::Service(Box::new(elapsed));
        assert!(matches!(
            failure(timed_out, false),
            ApiResult::Failed(ApiFailure::Timeout(_))
        ));
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let down = kube::Error::Service(Box::new(refused));
        assert!(matches!(
            failure(down, false),
            ApiResult::Failed(ApiFailure::Transport(_))
        ));
    }
}
