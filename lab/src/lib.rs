//! volplane-lab, the engine of `volplane lab`: a whole cluster's storage
//! lifecycle on one machine, for real. An in-memory object store and the core's control-plane machines
//! ([`world`]) drive real `volplane serve` processes — one for the
//! controller, one per node — over real unix sockets, with real mounts and
//! loop devices under the lab root. Registration goes exactly as kubelet and
//! node-driver-registrar do it ([`registration`]).
//!
//! Layout under the root (default `/var/lib/volplane-lab`):
//!
//! ```text
//! controller/csi.sock                   the controller driver
//! volumes/                              volume images and directories
//! nodes/<node>/kubelet/                 that node's kubelet root
//!   plugins/volplane.csi.io/csi.sock    its driver
//!   plugins_registry/                   registration sockets
//! nodes/<node>/state/                   its driver's state
//! lab.sock, lab.log, pids               the running lab
//! ```

#![deny(missing_docs)]

pub mod cleanup;
pub mod daemon;
pub mod demo;
pub mod engine;
pub mod processes;
pub mod registration;
pub mod shared;

pub use engine::{Lab, LabConfig, LabError};

/// The driver the lab's processes serve (`volplane serve`'s default name).
pub const DRIVER_NAME: &str = "volplane.csi.io";
pub use volplane_core::lab::{Layout, node_names, status, world};

/// The lab mounts, formats and attaches loop devices: it needs root.
pub fn require_root(what: &str) -> Result<(), LabError> {
    if rustix::process::geteuid().is_root() {
        Ok(())
    } else {
        Err(LabError::Setup(format!(
            "`volplane lab {what}` mounts filesystems and attaches loop devices, so it must run as \
             root (try: sudo volplane lab {what}); nothing was touched"
        )))
    }
}
