//! The concurrent part of volplane's adapters, in a crate with no async
//! runtime so that loom can model-check it (`--cfg volplane_loom`):
//!
//! * [`mailbox`] — the many-senders, one-receiver queue RPC handlers use to
//!   reach the pump, with an async receive and its wake-up;
//! * [`reply`] — the one-shot slot a handler waits on for its answer;
//! * [`core`] — the pump's core: it owns the driver machine, takes requests
//!   with their reply slots, feeds completions, and answers.
//!
//! Both runtimes' pump (`volplane-service`) is built on these, and
//! `tests/loom.rs` checks them under every interleaving loom explores.

#![deny(missing_docs)]

pub mod core;
mod loom;
pub mod mailbox;
pub mod reply;
