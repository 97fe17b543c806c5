//! The API server's vocabulary: what a watch delivers, the calls a
//! controller makes and what the server answers. Below both the store
//! (which serves these calls in the simulator and the lab) and the
//! controllers (which make them).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Kind, Object, ObjectKey};

/// An object as a watch delivers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub enum Watch {
    /// Added or modified.
    Applied(Arc<Object>),
    /// Deleted (the object's last state).
    Deleted(Arc<Object>),
}

impl Watch {
    /// The kind of the object delivered.
    pub fn kind(&self) -> Kind {
        match self {
            Watch::Applied(o) | Watch::Deleted(o) => o.kind(),
        }
    }
}

/// A request to the API server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub enum ApiCall {
    /// Creates the object.
    Create(Object),
    /// Replaces spec and metadata; `metadata.resourceVersion` is the precondition.
    Update(Object),
    /// Replaces status; `metadata.resourceVersion` is the precondition.
    UpdateStatus(Object),
    /// Takes one finalizer off the object's incarnation `uid`, whatever
    /// else changed since it was seen: no resourceVersion precondition,
    /// as the sidecars remove theirs (a strategic merge patch). Another
    /// incarnation, or none, is `NotFound`; an object being deleted whose
    /// last finalizer it was goes (`Ok(None)`).
    RemoveFinalizer {
        /// The object.
        key: ObjectKey,
        /// Its incarnation.
        uid: String,
        /// The finalizer taken off.
        finalizer: String,
    },
    /// Deletes (or, with finalizers, marks for deletion).
    Delete(ObjectKey),
    /// Reads one object, bypassing the watch cache (A6.2).
    Get(ObjectKey),
    /// Lists the objects of one kind in a namespace, bypassing the watch
    /// cache (what pvc-protection asks before it lets a claim go).
    List {
        /// The kind listed.
        kind: Kind,
        /// The namespace listed.
        namespace: String,
    },
}

impl ApiResult {
    /// The object an `Ok` answer carries, owned (copied only when it is
    /// still shared).
    pub fn into_object(self) -> Option<Object> {
        match self {
            ApiResult::Ok(Some(o)) => Some(Arc::unwrap_or_clone(o)),
            _ => None,
        }
    }
}

impl ApiCall {
    /// The kind of object the call is about.
    pub fn kind(&self) -> Kind {
        match self {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => o.kind(),
            ApiCall::Delete(k) | ApiCall::Get(k) | ApiCall::RemoveFinalizer { key: k, .. } => {
                k.kind
            }
            ApiCall::List { kind, .. } => *kind,
        }
    }

    /// The object the call is about (for a list, the kind and namespace).
    pub fn key(&self) -> ObjectKey {
        match self {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => o.key(),
            ApiCall::Delete(k) | ApiCall::Get(k) | ApiCall::RemoveFinalizer { key: k, .. } => {
                k.clone()
            }
            ApiCall::List { kind, namespace } => ObjectKey::new(*kind, namespace, ""),
        }
    }

    /// The UID of the object the call writes ("" for a delete, get or
    /// list, which name an object but not its incarnation).
    pub fn uid(&self) -> &str {
        match self {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => &o.meta().uid,
            ApiCall::RemoveFinalizer { uid, .. } => uid,
            ApiCall::Delete(_) | ApiCall::Get(_) | ApiCall::List { .. } => "",
        }
    }

    /// The resourceVersion the call was made against: a write's
    /// precondition ("" for a create, finalizer removal, delete, get or list).
    pub fn version(&self) -> &str {
        match self {
            ApiCall::Update(o) | ApiCall::UpdateStatus(o) => &o.meta().resource_version,
            ApiCall::Create(_)
            | ApiCall::RemoveFinalizer { .. }
            | ApiCall::Delete(_)
            | ApiCall::Get(_)
            | ApiCall::List { .. } => "",
        }
    }

    /// The verb, as a log line says it.
    pub fn verb(&self) -> &'static str {
        match self {
            ApiCall::Create(_) => "create",
            ApiCall::Update(_) => "update",
            ApiCall::UpdateStatus(_) => "update status",
            ApiCall::RemoveFinalizer { .. } => "remove a finalizer of",
            ApiCall::Delete(_) => "delete",
            ApiCall::Get(_) => "get",
            ApiCall::List { .. } => "list",
        }
    }
}

/// What the API server answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub enum ApiResult {
    /// The object as stored now (`None` after a delete that removed it),
    /// shared with the watch event the write produced.
    Ok(Option<Arc<Object>>),
    /// What a list found.
    Listed(Vec<Object>),
    /// The resourceVersion precondition failed.
    Conflict,
    /// The object does not exist.
    NotFound,
    /// The object already exists.
    AlreadyExists,
    /// Any other failure, by what retrying can do about it.
    Failed(ApiFailure),
}

impl ApiResult {
    /// The failure, when the call failed that way.
    pub fn failure(&self) -> Option<&ApiFailure> {
        match self {
            ApiResult::Failed(f) => Some(f),
            _ => None,
        }
    }
}

/// How long a retry of a call the API server forbids or finds invalid
/// waits at least: nothing changes until a person changes the RBAC rules
/// or the object, so retrying sooner only loads the server.
pub const RETRY_REFUSED_AFTER: crate::Tick = 300_000;
/// How long a retry after a 429 without Retry-After waits at least.
pub const RETRY_THROTTLED_AFTER: crate::Tick = 1_000;

/// Why the API server refused a call or could not be reached, grouped by
/// fault — what retrying can do about it — each with the message a person
/// reads. The adapter names the fault; the core decides what is retried
/// and when ([`ApiFailure::retry_at_least`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum ApiFailure {
    /// 401 or 403: the controller's credentials or RBAC rules do not allow
    /// the call. Retrying changes nothing until they do.
    Forbidden(String),
    /// 400 or 422: the server refuses the object as written.
    Invalid(String),
    /// 410: what was asked for is gone (an expired resourceVersion).
    Gone(String),
    /// 429: the server asks clients to slow down.
    TooManyRequests {
        /// The server's message.
        message: String,
        /// Its Retry-After, in milliseconds, if it gave one.
        retry_after: Option<crate::Tick>,
    },
    /// Another status the server answered (5xx, 408…).
    Server {
        /// The HTTP status.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// 504, or no answer within the client's timeout.
    Timeout(String),
    /// The connection failed: refused, reset, TLS, DNS.
    Transport(String),
    /// The adapter could not write or read the object (an object volplane
    /// cannot represent): a bug to report.
    Local(String),
}

impl ApiFailure {
    /// The fault of an answer with HTTP status `code` (not 404 or 409,
    /// which are [`ApiResult`]'s own), the server's `message` and its
    /// Retry-After in seconds (0: none).
    pub fn from_status(code: u16, message: String, retry_after_secs: u32) -> ApiFailure {
        match code {
            401 | 403 => ApiFailure::Forbidden(message),
            400 | 422 => ApiFailure::Invalid(message),
            410 => ApiFailure::Gone(message),
            429 => ApiFailure::TooManyRequests {
                message,
                retry_after: (retry_after_secs > 0).then(|| u64::from(retry_after_secs) * 1_000),
            },
            504 => ApiFailure::Timeout(message),
            code => ApiFailure::Server { code, message },
        }
    }

    /// What the server (or the connection) said.
    pub fn message(&self) -> &str {
        match self {
            ApiFailure::Forbidden(m)
            | ApiFailure::Invalid(m)
            | ApiFailure::Gone(m)
            | ApiFailure::Timeout(m)
            | ApiFailure::Transport(m)
            | ApiFailure::Local(m)
            | ApiFailure::TooManyRequests { message: m, .. }
            | ApiFailure::Server { message: m, .. } => m,
        }
    }

    /// How long a retry waits at least (`None`: the usual backoff):
    /// forbidden and invalid calls [`RETRY_REFUSED_AFTER`]; a 429 what
    /// the server asked, else [`RETRY_THROTTLED_AFTER`].
    pub fn retry_at_least(&self) -> Option<crate::Tick> {
        match self {
            ApiFailure::Forbidden(_) | ApiFailure::Invalid(_) => Some(RETRY_REFUSED_AFTER),
            ApiFailure::TooManyRequests { retry_after, .. } => {
                Some(retry_after.unwrap_or(RETRY_THROTTLED_AFTER))
            }
            _ => None,
        }
    }
}

/// The message, with the fault and what retrying does about it.
impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let minutes = RETRY_REFUSED_AFTER / 60_000;
        match self {
            ApiFailure::Forbidden(m) => write!(
                f,
                "forbidden: {m} (the RBAC rules of volplane's service account must allow it; retried every {minutes} min until they do)"
            ),
            ApiFailure::Invalid(m) => write!(
                f,
                "invalid: {m} (the API server refuses the object as written; retried every {minutes} min)"
            ),
            ApiFailure::Gone(m) => write!(f, "gone: {m}"),
            ApiFailure::TooManyRequests {
                message,
                retry_after,
            } => {
                let after = retry_after.unwrap_or(RETRY_THROTTLED_AFTER) as f64 / 1e3;
                write!(
                    f,
                    "too many requests: {message} (retried after {after} s, as the server asks)"
                )
            }
            ApiFailure::Server { code, message } => write!(f, "{message} ({code})"),
            ApiFailure::Timeout(m) => write!(f, "timed out: {m}"),
            ApiFailure::Transport(m) => write!(f, "cannot reach the API server: {m}"),
            ApiFailure::Local(m) => write!(f, "{m}"),
        }
    }
}

/// What a machine that calls the API server is told about it: the answer
/// to one of its calls, and a watch event. One carrier (the in-memory
/// store's `serve`) feeds any such machine: the control-plane machines
/// and the plugin watcher.
pub trait ApiInput {
    /// The answer to the call polled as `op`.
    fn answer(op: crate::OpId, result: ApiResult) -> Self;
    /// An object as a watch delivered it.
    fn watch(watch: Watch) -> Self;
}
