//! volplane's reference CSI driver and command line.
//!
//! `volplane serve` is built on the public API exactly as a driver author
//! would use it: a [`reference::Reference`] backend, a
//! [`volplane_core::driver::DriverConfig`], and `volplane_tokio::serve`.

#![deny(missing_docs)]

pub mod bench;
pub mod check;
pub mod cli;
pub mod controller;
#[cfg(feature = "crash-hooks")]
pub mod crash;
pub mod knobs;
pub mod lab;
pub mod probe;
pub mod reference;
pub mod registrar;
pub mod serve;
pub mod sim;
pub mod upstream;
