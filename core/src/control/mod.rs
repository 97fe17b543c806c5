//! What the control-plane machines share: watch inputs, API writes and their
//! results, events, the object cache, per-key backoff.
//!
//! Every control-plane machine (binder, provision, attach, kubelet, resize,
//! registration) follows the crate's one contract: `handle(now, input)`,
//! `poll() -> Option<Effect>`, `poll_timeout()`, `handle_timeout(now)`. They
//! are level-triggered: an input updates the machine's cache and marks keys
//! dirty; `poll` re-syncs dirty keys and emits at most one write per object
//! at a time, so a write's completion (or its failure) is seen before the
//! next write to the same object is decided.

pub mod backoff;
pub mod cache;
pub mod csi_map;
pub mod rig;

use serde::{Deserialize, Serialize};

use crate::model::{Kind, Object, ObjectKey};
use crate::{OpId, Status};

pub use backoff::Backoff;
pub use cache::Cache;

/// An object as a watch delivers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Watch {
    /// Added or modified.
    Applied(Object),
    Deleted(Object),
}

/// A request to the API server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ApiCall {
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
        kind: Kind,
        namespace: String,
    },
}

impl ApiCall {
    pub fn key(&self) -> ObjectKey {
        match self {
            ApiCall::Create(o) | ApiCall::Update(o) | ApiCall::UpdateStatus(o) => o.key(),
            ApiCall::Delete(k) | ApiCall::Get(k) => k.clone(),
            ApiCall::List { kind, namespace } => ObjectKey::new(*kind, namespace, ""),
        }
    }

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ApiResult {
    /// The object as stored now (`None` after a delete that removed it).
    Ok(Option<Object>),
    /// What a list found.
    Listed(Vec<Object>),
    /// The resourceVersion precondition failed.
    Conflict,
    NotFound,
    AlreadyExists,
    Failed(String),
}

/// Normal or Warning, as in Kubernetes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event for the user, with Kubernetes' reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub object: ObjectKey,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

impl Event {
    pub fn normal(object: ObjectKey, reason: &str, message: impl Into<String>) -> Event {
        Event {
            object,
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

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
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Api {
        op: OpId,
        call: ApiCall,
    },
    /// A CSI call to the driver; `node` names the node plugin for node calls.
    Csi {
        op: OpId,
        node: Option<String>,
        call: CsiCall,
    },
    Event(Event),
}

/// What any control-plane machine is told.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Watch(Watch),
    /// The initial list of every watched kind has been delivered: a machine
    /// that was told to [`Machine::await_sync`] starts acting now (as
    /// Kubernetes controllers wait for their informers' caches to sync).
    Synced,
    ApiDone {
        op: OpId,
        result: ApiResult,
    },
    CsiDone {
        op: OpId,
        result: CsiResult,
    },
}

/// The shared face of every control-plane machine (see the crate docs).
pub trait Machine {
    fn handle(&mut self, now: crate::Tick, input: Input);
    fn poll(&mut self) -> Option<Effect>;
    fn poll_timeout(&self) -> Option<crate::Tick>;
    fn handle_timeout(&mut self, now: crate::Tick);
    /// Do nothing until [`Input::Synced`] arrives (a restarted process
    /// re-listing its watches must not act on a partial cache).
    fn await_sync(&mut self);
}

/// Implements [`Machine`] by the inherent methods of the same names.
#[macro_export]
macro_rules! impl_machine {
    ($t:ty) => {
        impl $crate::control::Machine for $t {
            fn handle(&mut self, now: $crate::Tick, input: $crate::control::Input) {
                <$t>::handle(self, now, input)
            }
            fn poll(&mut self) -> Option<$crate::control::Effect> {
                <$t>::poll(self)
            }
            fn poll_timeout(&self) -> Option<$crate::Tick> {
                <$t>::poll_timeout(self)
            }
            fn handle_timeout(&mut self, now: $crate::Tick) {
                <$t>::handle_timeout(self, now)
            }
            fn await_sync(&mut self) {
                self.unsynced = true;
            }
        }
    };
}

/// Hands out operation ids.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ops {
    next: u64,
}

impl Ops {
    pub fn issue(&mut self) -> OpId {
        self.next += 1;
        OpId(self.next)
    }
}
