//! `volplane lab`: a whole cluster's storage lifecycle on one machine, for
//! real. An in-memory object store and the core's control-plane machines
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

pub mod cleanup;
pub mod cli;
pub mod daemon;
pub mod demo;
pub mod engine;
pub mod processes;
pub mod registration;
pub mod status;
pub mod world;

use std::path::{Path, PathBuf};

pub use engine::{Lab, LabConfig, LabError};

/// Where everything of one lab lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub root: PathBuf,
    pub driver: String,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>, driver: &str) -> Layout {
        Layout {
            root: root.into(),
            driver: driver.into(),
        }
    }

    fn s(p: PathBuf) -> String {
        p.display().to_string()
    }

    pub fn controller_dir(&self) -> PathBuf {
        self.root.join("controller")
    }

    pub fn controller_endpoint(&self) -> String {
        format!("unix://{}", Self::s(self.controller_dir().join("csi.sock")))
    }

    pub fn volumes_dir(&self) -> PathBuf {
        self.root.join("volumes")
    }

    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join("nodes").join(node)
    }

    pub fn kubelet_dir(&self, node: &str) -> String {
        Self::s(self.node_dir(node).join("kubelet"))
    }

    /// The driver's socket, where kubelet expects it.
    pub fn csi_socket(&self, node: &str) -> PathBuf {
        Path::new(&self.kubelet_dir(node))
            .join("plugins")
            .join(&self.driver)
            .join("csi.sock")
    }

    pub fn registry_dir(&self, node: &str) -> PathBuf {
        Path::new(&self.kubelet_dir(node)).join("plugins_registry")
    }

    /// Where a registrar keeps its socket when the registry holds a symlink to it.
    pub fn registrar_dir(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("registrar")
    }

    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("state")
    }

    pub fn control_socket(&self) -> PathBuf {
        self.root.join("lab.sock")
    }

    pub fn log_file(&self) -> PathBuf {
        self.root.join("lab.log")
    }

    /// One line per process the lab started: `<pid> <role>`.
    pub fn pids_file(&self) -> PathBuf {
        self.root.join("pids")
    }
}

/// Node names: node-a, node-b, …, node-z, node-26, …
pub fn node_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match u8::try_from(i).ok().filter(|i| *i < 26) {
            Some(i) => format!("node-{}", char::from(b'a' + i)),
            None => format!("node-{i}"),
        })
        .collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_lettered() {
        assert_eq!(node_names(3), ["node-a", "node-b", "node-c"]);
        assert_eq!(node_names(27)[26], "node-26");
    }

    #[test]
    fn the_layout_is_kubelets() {
        let l = Layout::new("/lab", "volplane.csi.io");
        assert_eq!(
            l.csi_socket("node-a"),
            Path::new("/lab/nodes/node-a/kubelet/plugins/volplane.csi.io/csi.sock")
        );
        assert_eq!(
            l.registry_dir("node-a"),
            Path::new("/lab/nodes/node-a/kubelet/plugins_registry")
        );
        assert_eq!(l.controller_endpoint(), "unix:///lab/controller/csi.sock");
    }
}
