//! The lab's cluster as a pure machine: an object store, the control-plane
//! machines, a kubelet and plugin watcher per node, and the user's commands
//! ([`world`]); its paths ([`Layout`]) and `kubectl get`-style status
//! ([`status`]). The `volplane lab` command drives it with real driver
//! processes, sockets and mounts; here it is deterministic and testable.

pub mod status;
pub mod world;

use std::path::{Path, PathBuf};

/// Where everything of one lab lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The lab's root directory.
    pub root: PathBuf,
    /// The driver's name.
    pub driver: String,
}

impl Layout {
    /// The layout under `root` for `driver`.
    pub fn new(root: impl Into<PathBuf>, driver: &str) -> Layout {
        Layout {
            root: root.into(),
            driver: driver.into(),
        }
    }

    fn s(p: PathBuf) -> String {
        p.display().to_string()
    }

    /// The controller driver's directory.
    pub fn controller_dir(&self) -> PathBuf {
        self.root.join("controller")
    }

    /// The controller driver's CSI endpoint.
    pub fn controller_endpoint(&self) -> String {
        format!("unix://{}", Self::s(self.controller_dir().join("csi.sock")))
    }

    /// Where volume images and directories live.
    pub fn volumes_dir(&self) -> PathBuf {
        self.root.join("volumes")
    }

    /// A node's directory.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join("nodes").join(node)
    }

    /// A node's kubelet root.
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

    /// A node's plugin registry.
    pub fn registry_dir(&self, node: &str) -> PathBuf {
        Path::new(&self.kubelet_dir(node)).join("plugins_registry")
    }

    /// Where a registrar keeps its socket when the registry holds a symlink to it.
    pub fn registrar_dir(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("registrar")
    }

    /// A node's driver state directory.
    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("state")
    }

    /// The running lab's control socket.
    pub fn control_socket(&self) -> PathBuf {
        self.root.join("lab.sock")
    }

    /// The running lab's log.
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
