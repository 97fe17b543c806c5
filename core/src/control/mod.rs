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
pub mod engine;
pub mod ratelimit;
pub mod repeats;
#[cfg(any(test, feature = "rig"))]
pub mod rig;
pub mod secrets;
pub mod users;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::model::ObjectKey;
use crate::{OpId, Status};

pub use crate::api::{ApiCall, ApiFailure, ApiResult, Watch};
pub use backoff::Backoff;
pub use cache::Cache;
pub use engine::{Action, Context, Controller, Cx, Engine};
pub use repeats::HotLoopGuard;
pub use users::Users;

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
    Reconstruct(Observed),
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

/// What a restarted kubelet finds mounted on its node (D3.10).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Observed {
    /// (PV name, volume handle) of global mounts found.
    pub staged: Vec<(String, String)>,
    /// (pod UID, PV name, volume handle) of pod mounts found.
    pub published: Vec<(String, String, String)>,
}

impl crate::api::ApiInput for Input {
    fn answer(op: OpId, result: ApiResult) -> Input {
        Input::ApiDone { op, result }
    }

    fn watch(watch: Watch) -> Input {
        Input::Watch(watch)
    }
}

/// A control-plane machine: any [`Machine`] told [`Input`]s that asks for
/// [`Effect`]s (the binder, provisioner, attacher, resizer, kubelet and the
/// protection controllers).
pub trait ControlMachine: Machine<Input = Input, Effect = Effect> {
    /// Whether its informers watch `kind` ([`Controller::watches`]).
    fn watches(&self, kind: crate::model::Kind) -> bool;
}

impl<C: Controller> ControlMachine for Engine<C> {
    fn watches(&self, kind: crate::model::Kind) -> bool {
        self.controller().watches(kind)
    }
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
