//! volplane's sans-IO core: the Kubernetes volume lifecycle as pure,
//! deterministic state machines.
//!
//! # The one contract every machine follows
//!
//! Every machine in this crate — binder, provisioner, attach/detach,
//! resizer, kubelet, pvc- and pv-protection, plugin watcher, registrar and
//! driver — implements [`machine::Machine`], and one loop
//! ([`machine::drain`]) drives any of them, in the tests, the simulator, the
//! service's pump, the lab and the Kubernetes adapter alike:
//!
//! * **Inputs** — `handle(now, input)`: something was observed (a request
//!   arrived, a watch delivered an object, the node's mounts were read, the
//!   process restarted) or an effect completed, named by its [`OpId`].
//! * **Outputs** — `poll() -> Option<Effect>`: the next thing to do, carried
//!   out **in the order polled** (the driver's `Persist` comes before what
//!   depends on it, and nothing follows it until its completion arrives).
//! * **Timers** — `poll_timeout()` and `handle_timeout(now)`: deadlines kept
//!   as data in a [`machine::TimerTable`]; no clock.
//! * **Invariants** — `check_invariants()`: a function over the machine's
//!   state, checked after every step by the rig, the properties, the
//!   simulator and the fuzz targets.
//!
//! Rules that keep the machines checkable:
//!
//! * `now` is passed in and never goes backwards; no machine reads a clock,
//!   spawns a thread, touches a file or holds global state. Randomness, where
//!   a machine needs any, is a seed passed in.
//! * Iteration order that can reach an output is deterministic (`BTreeMap`).
//! * A machine never assumes an effect succeeded until its completion
//!   arrives; effects may fail, be repeated, or complete out of order.
//! * State is plain `serde` data: it can be persisted, restored, diffed and
//!   printed in a trace.
//! * Errors are typed; a rejected request carries the gRPC status [`Code`]
//!   the CSI specification names for it and a message a person can act on.
//! * Invariants are functions over a machine's state, written once and used
//!   by unit tests, properties, the simulator and the fuzzers alike.

#![deny(missing_docs)]

pub mod api;
pub mod attach;
pub mod binder;
pub mod capacity;
pub mod check;
pub mod control;
pub mod driver;
pub(crate) mod hasher;
pub mod kubelet;
pub mod lab;
pub mod lease;
pub mod machine;
pub mod model;
pub mod mountinfo;
pub mod path;
pub mod plant;
pub mod protection;
pub mod provision;
pub mod registration;
pub mod resize;
pub mod rng;
pub mod roles;
pub mod sim;
pub mod snapshot;
pub mod status;
pub mod store;

pub use status::{Code, Status};

/// Time as the machines see it: milliseconds, passed in, never read. The
/// adapters count them since 1970 (`volplane_service::Clock`), so a time a
/// machine writes into an object ([`store::timestamp`]) is real; tests and
/// the simulator start wherever they like.
pub type Tick = u64;

/// Identifies one effect handed to an adapter; its completion comes back
/// with the same id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct OpId(pub u64);

/// Through `hasher::canon::op`: the explorer counts states equal up to
/// renumbered ops as one.
impl std::hash::Hash for OpId {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        hasher::canon::op(h, self.0);
    }
}

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "op-{}", self.0)
    }
}
