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
    /// Any other failure, with the server's message.
    Failed(String),
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
