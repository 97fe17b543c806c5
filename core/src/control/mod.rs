//! What the control-plane machines share: watch inputs, API writes and their
//! results, events, the object cache, per-key backoff.
//!
//! Every control-plane machine (binder, provision, attach, kubelet, resize,
//! protection) implements [`crate::machine::Machine`] with [`Input`] and
//! [`Effect`] as its input and effect types. They
//! are level-triggered: an input updates the machine's cache and marks keys
//! dirty; `poll` re-syncs dirty keys and emits at most one write per object
//! at a time, so a write's completion (or its failure) is seen before the
//! next write to the same object is decided.

pub mod backoff;
pub mod cache;
#[cfg(test)]
pub mod chaos;
pub mod csi_map;
pub mod repeats;
#[cfg(any(test, feature = "rig"))]
pub mod rig;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::model::{Kind, Object, ObjectKey};
use crate::{OpId, Status};

pub use backoff::Backoff;
pub use cache::Cache;
pub use repeats::HotLoopGuard;

use std::sync::Arc;

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
            ApiCall::Delete(k) | ApiCall::Get(k) => k.kind,
            ApiCall::List { kind, .. } => *kind,
        }
    }

    /// The object the call is about (for a list, the kind and namespace).
    pub fn key(&self) -> ObjectKey {
        match self {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => o.key(),
            ApiCall::Delete(k) | ApiCall::Get(k) => k.clone(),
            ApiCall::List { kind, namespace } => ObjectKey::new(*kind, namespace, ""),
        }
    }

    /// The UID of the object the call writes ("" for a delete, get or
    /// list, which name an object but not its incarnation).
    pub fn uid(&self) -> &str {
        match self {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => &o.meta().uid,
            ApiCall::Delete(_) | ApiCall::Get(_) | ApiCall::List { .. } => "",
        }
    }

    /// The resourceVersion the call was made against: a write's
    /// precondition ("" for a create, delete, get or list).
    pub fn version(&self) -> &str {
        match self {
            ApiCall::Update(o) | ApiCall::UpdateStatus(o) => &o.meta().resource_version,
            ApiCall::Create(_) | ApiCall::Delete(_) | ApiCall::Get(_) | ApiCall::List { .. } => "",
        }
    }

    /// The verb, as a log line says it.
    pub fn verb(&self) -> &'static str {
        match self {
            ApiCall::Create(_) => "create",
            ApiCall::Update(_) => "update",
            ApiCall::UpdateStatus(_) => "update status",
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

/// Normal or Warning, as in Kubernetes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// An event for the user, with Kubernetes' reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Event {
    /// The object the event is about.
    pub object: ObjectKey,
    /// Normal or Warning.
    pub type_: EventType,
    /// Kubernetes' reason (ProvisioningSucceeded, FailedAttachVolume…).
    pub reason: String,
    /// The message for the user.
    pub message: String,
}

impl Event {
    /// A Normal event.
    pub fn normal(object: ObjectKey, reason: &str, message: impl Into<String>) -> Event {
        Event {
            object,
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(object: ObjectKey, reason: &str, message: impl Into<String>) -> Event {
        Event {
            object,
            type_: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = match self.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        write!(
            f,
            "{t:<7} {:<24} {}  {}",
            self.reason, self.object, self.message
        )
    }
}

/// A CSI call a control-plane machine makes, as the driver machine's request.
pub type CsiCall = crate::driver::Request;
/// Its answer.
pub type CsiResult = Result<crate::driver::Response, Status>;

/// What any control-plane machine asks its adapter to do.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Effect {
    /// Call the API server; answer with [`Input::ApiDone`].
    Api {
        /// The operation, named again in its completion.
        op: OpId,
        /// The request.
        call: ApiCall,
    },
    /// A CSI call to the driver; `node` names the node plugin for node calls.
    Csi {
        /// The operation, named again in its completion.
        op: OpId,
        /// The node whose plugin serves the call (None: the controller).
        node: Option<String>,
        /// The request.
        call: CsiCall,
    },
    /// Record an event for the user.
    Event(Event),
}

/// What any control-plane machine is told.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Input {
    /// An object as a watch delivered it.
    Watch(Watch),
    /// The process (re)started with empty memory: its watches list every
    /// object again, and the machine does nothing until [`Input::Synced`]
    /// (a restarted controller must not act on a partial cache).
    Restarted,
    /// The initial list of every watched kind has been delivered: a machine
    /// that was [`Input::Restarted`] starts acting now (as Kubernetes
    /// controllers wait for their informers' caches to sync).
    Synced,
    /// The periodic resync: look at every cached object again (the PV
    /// controller's syncPeriod, A10.3). Machines that keep no such period
    /// ignore it.
    Resync,
    /// What a restarted kubelet finds mounted on its node, taken as
    /// uncertain actual state (D3.10). Only the kubelet reads it.
    Reconstruct(crate::kubelet::Observed),
    /// An API call completed.
    ApiDone {
        /// The operation the call was polled with.
        op: OpId,
        /// What the server answered.
        result: ApiResult,
    },
    /// A CSI call completed.
    CsiDone {
        /// The operation the call was polled with.
        op: OpId,
        /// What the driver answered.
        result: CsiResult,
    },
}

/// A control-plane machine: any [`Machine`] told [`Input`]s that asks for
/// [`Effect`]s (the binder, provisioner, attacher, resizer, kubelet and the
/// protection controllers).
pub trait ControlMachine: Machine<Input = Input, Effect = Effect> {}
impl<M: Machine<Input = Input, Effect = Effect> + ?Sized> ControlMachine for M {}

/// Implements [`crate::machine::Machine`] for a control-plane machine by
/// its private methods `on_input`, `next_effect`, `deadline`,
/// `on_timeout` and `invariants`, keeping the sync gate (`unsynced`) in one place.
#[macro_export]
macro_rules! impl_machine {
    ($t:ty) => {
        impl $crate::machine::Machine for $t {
            type Input = $crate::control::Input;
            type Effect = $crate::control::Effect;
            fn handle(&mut self, now: $crate::Tick, input: $crate::control::Input) {
                match &input {
                    $crate::control::Input::Restarted => self.unsynced = true,
                    $crate::control::Input::Synced => self.unsynced = false,
                    _ => {}
                }
                self.on_input(now, input)
            }
            fn poll(&mut self) -> Option<$crate::control::Effect> {
                if self.unsynced {
                    return None;
                }
                self.next_effect()
            }
            fn poll_timeout(&self) -> Option<$crate::Tick> {
                self.deadline()
            }
            fn handle_timeout(&mut self, now: $crate::Tick) {
                self.on_timeout(now)
            }
            fn check_invariants(&self) -> Result<(), String> {
                self.invariants()
            }
        }
    };
}

/// Hands out operation ids.
#[derive(Debug, Clone, Default, Serialize, Deserialize, Hash)]
pub struct Ops {
    next: u64,
}

impl Ops {
    /// The next operation id.
    pub fn issue(&mut self) -> OpId {
        self.next += 1;
        OpId(self.next)
    }
}
