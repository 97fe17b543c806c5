//! `volplane lab`: the command line over the lab engine (`volplane-lab`).

pub mod cli;

pub use volplane_lab::*;
