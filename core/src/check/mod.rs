//! `volplane check`: a model-based conformance checker for any CSI driver.
//!
//! It sends a driver sequences of CSI calls chosen from a seed — valid and
//! invalid, repeated as a CO retries, several in flight at once — and
//! judges every answer, and what the node's mounts show after it, against
//! an oracle of the CSI specification's rules ([`oracle`], over the
//! [`world`] it keeps). The oracle is written from the specification, not
//! from volplane's own driver machine: volplane's driver is checked by
//! something other than itself.
//!
//! The checker is a [`machine::Checker`] like every machine of this crate:
//! its adapter (`volplane::testing::check`, the `volplane check` command)
//! sends the calls, makes the directories a CO makes, reads the mounts and
//! restarts the driver; the checker decides. A run that breaks a rule ends
//! with its steps as a [`machine::Program`], which a replay sends again and
//! [`shrink`] makes small.

pub mod choose;
pub mod generate;
pub mod group;
pub mod machine;
pub mod oracle;
pub mod protocol;
pub mod render;
pub mod report;
pub mod rules;
pub mod secrets;
pub mod shrink;
pub mod step;
pub mod world;

#[cfg(test)]
mod tests;

pub use generate::Bounds;
pub use machine::{Checker, Config, Effect, Input, Outcome, Program, Record, Violation};
pub use oracle::{Answer, Breach, Facts};
pub use rules::{Level, Rule, Tally};
pub use secrets::CallSecrets;
pub use step::{Names, Shape, Slot, StatsAt, Step};
pub use world::{NodeSeen, PathSeen, device_id, loop_device, source_id};
