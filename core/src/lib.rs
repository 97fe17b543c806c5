//! volplane's sans-IO core: the Kubernetes volume lifecycle as pure,
//! deterministic state machines.
//!
//! # The one contract every machine follows
//!
//! Every machine in this crate has the same face, so that the runtime
//! adapters, the simulator and the fuzz targets drive all of them alike:
//!
//! * **Inputs** — `handle(&mut self, now: Tick, input: Input)`: something was
//!   observed (a request arrived, an object was delivered by a watch, the
//!   mounts on the node were read) or an effect completed
//!   (`Input::Done { op, outcome }`).
//! * **Outputs** — `poll(&mut self) -> Option<Effect>`: the next thing the
//!   adapter must do. Effects that complete carry an [`OpId`], and their
//!   completion comes back as an input. An adapter drains `poll` until it
//!   returns `None` after every `handle`, and carries the effects out **in the
//!   order they were polled** (a `Persist` before the effects that follow it is
//!   what makes the machines write-ahead).
//! * **Timers** — `poll_timeout(&self) -> Option<Tick>` and
//!   `handle_timeout(&mut self, now)`: retries and backoff without a clock.
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

pub mod attach;
pub mod binder;
pub mod control;
pub mod driver;
pub mod kubelet;
pub mod lab;
pub mod machine;
pub mod model;
pub mod mountinfo;
pub mod path;
pub mod plant;
pub mod protection;
pub mod provision;
pub mod registration;
pub mod resize;
pub mod sim;
pub mod status;
pub mod store;

pub use status::{Code, Status};

/// Time as the machines see it: milliseconds since an arbitrary origin
/// chosen by the adapter. Passed in, never read.
pub type Tick = u64;

/// Identifies one effect handed to an adapter; its completion comes back
/// with the same id.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct OpId(pub u64);

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "op-{}", self.0)
    }
}
