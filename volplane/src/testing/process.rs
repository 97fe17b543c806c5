//! A driver binary run as a real process in a directory of its own,
//! killed and restarted at will; csi-sanity run against it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Error;

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

/// How a driver process is started: the command for a layout.
type Starter = Box<dyn Fn(&Layout) -> Command + Send + Sync>;

/// A driver process. Dropping it — at the end of a test, or while a
/// failing test unwinds — kills the process, unmounts whatever is still
/// mounted beneath its directory, detaches the loop devices whose images
/// lie there, and removes the directory.
pub struct DriverProcess {
    child: Child,
    layout: Layout,
    command: Starter,
}

impl std::fmt::Debug for DriverProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverProcess")
            .field("pid", &self.child.id())
            .field("layout", &self.layout)
            .finish()
    }
}

impl DriverProcess {
    /// Starts `command(layout)` in a fresh directory: the command names the
    /// driver's binary and passes it the layout's endpoint and directories,
    /// in its own flags. A closure may capture what else the driver needs
    /// (a storage service's address, a token file).
    pub fn start(
        command: impl Fn(&Layout) -> Command + Send + Sync + 'static,
    ) -> Result<DriverProcess, Error> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("volplane-testing-{}-{n}", std::process::id()));
        put_away(&root);
        std::fs::create_dir_all(&root)
            .map_err(|e| Error::Setup(format!("create {}: {e}", root.display())))?;
        let layout = Layout {
            endpoint: format!("unix://{}/csi.sock", root.display()),
            state_dir: root.join("state"),
            kubelet_dir: root.join("kubelet"),
            root,
        };
        let command: Starter = Box::new(command);
        let child = spawn(&command, &layout)?;
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

    /// SIGKILL, as a crash would; the process stays down until
    /// [`DriverProcess::resume`].
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the driver again on the same state (after [`DriverProcess::kill`]).
    pub fn resume(&mut self) -> Result<(), Error> {
        self.child = spawn(&self.command, &self.layout)?;
        Ok(())
    }

    /// SIGKILL, as a crash would, then start again on the same state.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.resume() {
            panic!("restarting the driver: {e}");
        }
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        self.kill();
        put_away(&self.layout.root);
    }
}

fn spawn(command: &Starter, layout: &Layout) -> Result<Child, Error> {
    let mut cmd = command(layout);
    cmd.spawn()
        .map_err(|e| Error::Setup(format!("start {:?}: {e}", cmd.get_program())))
}

/// Unmounts everything beneath `root` (deepest first), detaches the loop
/// devices backed by files beneath it, and removes it — never following a
/// mount out of it, so a volume still mounted there loses nothing.
fn put_away(root: &Path) {
    // The mount table and the loop devices name real paths.
    let Ok(root) = std::fs::canonicalize(root) else {
        return;
    };
    let root = root.as_path();
    if let Ok(host) = volplane_host::Host::new([root]) {
        let mut points: Vec<String> = host
            .mountinfo()
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.mount_point)
            .filter(|p| Path::new(p).starts_with(root) && Path::new(p) != root)
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = host.unmount(&p, None);
        }
        for image in loop_images_beneath(root) {
            let _ = host.loop_detach(&image);
        }
    }
    let still_mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|p| Path::new(p).starts_with(root))
        });
    if still_mounted {
        eprintln!(
            "volplane::testing: {} still has mounts beneath it; left in place",
            root.display()
        );
        return;
    }
    let _ = std::fs::remove_dir_all(root);
}

/// The backing files of loop devices that lie beneath `root`.
fn loop_images_beneath(root: &Path) -> Vec<PathBuf> {
    let mut images = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let backing = e.path().join("loop/backing_file");
        if let Ok(text) = std::fs::read_to_string(&backing) {
            let file = PathBuf::from(text.trim_end().trim_end_matches(" (deleted)"));
            if file.starts_with(root) {
                images.push(file);
            }
        }
    }
    images
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
pub fn csi_sanity(layout: &Layout, extra: &[&str]) -> Option<Result<Sanity, Error>> {
    let binary = std::env::var_os("VOLPLANE_TEST_CSI_SANITY")?;
    Some(run_sanity(Path::new(&binary), layout, extra))
}

fn run_sanity(binary: &Path, layout: &Layout, extra: &[&str]) -> Result<Sanity, Error> {
    let kubelet = &layout.kubelet_dir;
    for dir in [kubelet.join("plugins"), kubelet.join("pods/sanity")] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Setup(format!("create {}: {e}", dir.display())))?;
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
        .map_err(|e| Error::Setup(format!("run {}: {e}", binary.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(Error::Violation(format!("csi-sanity failed:\n{text}")));
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
