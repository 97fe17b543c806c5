//! A driver binary run as a real process in a directory of its own,
//! killed and restarted at will; csi-sanity run against it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where a driver process under test keeps everything.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `unix://<root>/csi.sock`.
    pub endpoint: String,
    /// `<root>/state`: give it to the driver as its state directory.
    pub state_dir: PathBuf,
    /// `<root>/kubelet`: give it as the kubelet directory.
    pub kubelet_dir: PathBuf,
    /// The directory holding all of it (removed when the process goes).
    pub root: PathBuf,
}

/// A driver process. Dropping it kills the process and removes its
/// directory.
#[derive(Debug)]
pub struct DriverProcess {
    child: Child,
    layout: Layout,
    command: fn(&Layout) -> Command,
}

impl DriverProcess {
    /// Starts `command(layout)` in a fresh directory: the command names the
    /// driver's binary and passes it the layout's endpoint and directories,
    /// in its own flags.
    pub fn start(command: fn(&Layout) -> Command) -> Result<DriverProcess, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("volplane-testing-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
        let layout = Layout {
            endpoint: format!("unix://{}/csi.sock", root.display()),
            state_dir: root.join("state"),
            kubelet_dir: root.join("kubelet"),
            root,
        };
        let child = spawn(command, &layout)?;
        Ok(DriverProcess {
            child,
            layout,
            command,
        })
    }

    /// The endpoint and directories.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// SIGKILL, as a crash would, then start again on the same state.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        match spawn(self.command, &self.layout) {
            Ok(child) => self.child = child,
            Err(e) => panic!("restarting the driver: {e}"),
        }
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.layout.root);
    }
}

fn spawn(command: fn(&Layout) -> Command, layout: &Layout) -> Result<Child, String> {
    let mut cmd = command(layout);
    cmd.spawn()
        .map_err(|e| format!("start {:?}: {e}", cmd.get_program()))
}

/// True when this process may mount (it runs as root). Otherwise it says
/// that `test` is skipped — or panics when `VOLPLANE_REQUIRE_ALL=1` (CI,
/// where a skipped test is a failure).
pub fn may_mount(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false);
    if root {
        return true;
    }
    assert!(
        std::env::var("VOLPLANE_REQUIRE_ALL").as_deref() != Ok("1"),
        "{test} needs root to mount, and VOLPLANE_REQUIRE_ALL=1 forbids skipping it"
    );
    eprintln!("skipping {test}: mounting needs root");
    false
}

/// What csi-sanity said.
#[derive(Debug, Clone, Default)]
pub struct Sanity {
    /// Its last line: "SUCCESS! -- 41 Passed | 0 Failed | 1 Pending | 54 Skipped".
    pub summary: String,
    /// Why specs were skipped ("GetCapacity not supported"…), each once.
    pub skipped_because: Vec<String>,
}

/// Runs csi-sanity (the binary `VOLPLANE_TEST_CSI_SANITY` names) against
/// `layout`'s driver with `extra` flags; `None` when that variable is not
/// set. Fails with csi-sanity's whole output when a spec fails.
pub fn csi_sanity(layout: &Layout, extra: &[&str]) -> Option<Result<Sanity, String>> {
    let binary = std::env::var_os("VOLPLANE_TEST_CSI_SANITY")?;
    Some(run_sanity(Path::new(&binary), layout, extra))
}

fn run_sanity(binary: &Path, layout: &Layout, extra: &[&str]) -> Result<Sanity, String> {
    let kubelet = &layout.kubelet_dir;
    for dir in [kubelet.join("plugins"), kubelet.join("pods/sanity")] {
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let out = Command::new(binary)
        .arg(format!(
            "--csi.endpoint={}",
            layout.endpoint.trim_start_matches("unix://")
        ))
        .arg(format!(
            "--csi.mountdir={}",
            kubelet.join("pods/sanity/mount").display()
        ))
        .arg(format!(
            "--csi.stagingdir={}",
            kubelet.join("plugins/stage").display()
        ))
        .args(["--ginkgo.v", "--ginkgo.no-color"])
        .args(extra)
        .output()
        .map_err(|e| format!("run {}: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("csi-sanity failed:\n{text}"));
    }
    let mut skipped_because: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("[SKIPPED] "))
        .filter(|l| !l.starts_with("in ["))
        .map(str::to_string)
        .collect();
    skipped_because.sort();
    skipped_because.dedup();
    let summary = text.lines().rev().find(|l| l.contains("Passed"));
    Ok(Sanity {
        summary: summary.unwrap_or_default().trim().to_string(),
        skipped_because,
    })
}
