//! Shared harness: a real `volplane serve` process on a real unix socket in a
//! temporary root, CSI clients, kubelet-shaped paths, and leak checks.
#![allow(dead_code)]

pub mod cluster;
pub mod hostpath;
pub mod process;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use volplane_proto::csi;
use volplane_proto::csi::controller_client::ControllerClient;
use volplane_proto::csi::identity_client::IdentityClient;
use volplane_proto::csi::node_client::NodeClient;

pub const NODE: &str = "node-a";
pub const DRIVER: &str = "volplane.csi.io";

/// True when the tests may mount and attach loop devices.
pub fn is_root() -> bool {
    rustix_is_root()
}

fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// True when a skipped test must fail instead (`.ci/run` sets
/// VOLPLANE_REQUIRE_ALL=1: CI runs as root and has every peer installed).
pub fn skips_fail() -> bool {
    std::env::var_os("VOLPLANE_REQUIRE_ALL").is_some_and(|v| v == "1")
}

/// Skips a test, saying why, or fails it under VOLPLANE_REQUIRE_ALL=1.
pub fn skip(test: &str, why: &str) {
    if skips_fail() {
        panic!("{test} cannot run: {why} (VOLPLANE_REQUIRE_ALL=1 makes this a failure)");
    }
    eprintln!("skipping {test}: {why}");
}

/// Returns early from a test that needs root, saying why (and fails it
/// instead under VOLPLANE_REQUIRE_ALL=1).
#[macro_export]
macro_rules! require_root {
    () => {
        if !common::is_root() {
            common::skip(module_path!(), "needs root (mount(2), loop devices)");
            return;
        }
    };
}

/// The runtime a driver process serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Tokio,
    Smol,
}

impl Runtime {
    pub fn flag(self) -> &'static str {
        match self {
            Runtime::Tokio => "tokio",
            Runtime::Smol => "smol",
        }
    }
}

/// Runs one async test body against a driver on each runtime:
/// `both_runtimes!(name, body)` makes `name::tokio` and `name::smol`.
#[macro_export]
macro_rules! both_runtimes {
    ($name:ident, $body:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tokio() {
                super::$body(super::common::Runtime::Tokio).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn smol() {
                super::$body(super::common::Runtime::Smol).await
            }
        }
    };
}

/// A driver process and its directories.
pub struct Driver {
    pub root: tempfile::TempDir,
    child: Option<Child>,
    pub endpoint: String,
    pub runtime: Runtime,
    /// More `volplane serve` flags, given at every start.
    pub flags: Vec<String>,
}

impl Driver {
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn kubelet(&self) -> PathBuf {
        self.root().join("kubelet")
    }

    pub fn state(&self) -> PathBuf {
        self.root().join("state")
    }

    /// Starts `volplane serve --runtime <runtime>` in a fresh temporary root.
    pub fn start(runtime: Runtime) -> Driver {
        Driver::start_in(runtime, false, &[])
    }

    /// The same with more `volplane serve` flags.
    pub fn start_with(runtime: Runtime, flags: &[&str]) -> Driver {
        Driver::start_in(runtime, false, flags)
    }

    /// The same with `--kubelet-dir` and `--state-dir` given as symlinks to
    /// the real directories (`real-kubelet`, `real-state`).
    pub fn start_symlinked(runtime: Runtime) -> Driver {
        Driver::start_in(runtime, true, &[])
    }

    fn start_in(runtime: Runtime, symlinked: bool, flags: &[&str]) -> Driver {
        let root = tempfile::Builder::new()
            .prefix("volplane-test-")
            .tempdir()
            .unwrap();
        if symlinked {
            for d in ["kubelet", "state"] {
                let real = root.path().join(format!("real-{d}"));
                std::fs::create_dir(&real).unwrap();
                std::os::unix::fs::symlink(&real, root.path().join(d)).unwrap();
            }
        }
        let endpoint = format!("unix://{}/csi.sock", root.path().display());
        let mut d = Driver {
            root,
            child: None,
            endpoint,
            runtime,
            flags: flags.iter().map(|f| f.to_string()).collect(),
        };
        d.spawn(None);
        d
    }

    /// The process id of the running driver.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("driver is running").id()
    }

    /// (Re)starts the process; `crash_after` sets VOLPLANE_CRASH_AFTER.
    pub fn spawn(&mut self, crash_after: Option<&str>) {
        if let Err(status) = self.try_spawn(crash_after) {
            panic!("volplane serve exited at start: {status}");
        }
    }

    /// (Re)starts the process and waits for its socket; the exit status if
    /// it exited instead.
    pub fn try_spawn(&mut self, crash_after: Option<&str>) -> Result<(), std::process::ExitStatus> {
        let mut cmd = self.serve_command(&self.state(), &self.endpoint);
        if let Some(kind) = crash_after {
            cmd.env("VOLPLANE_CRASH_AFTER", kind);
        } else {
            cmd.env_remove("VOLPLANE_CRASH_AFTER");
        }
        self.child = Some(cmd.spawn().expect("start volplane serve"));
        let sock = self.root().join("csi.sock");
        let deadline = Instant::now() + Duration::from_secs(40);
        while !sock.exists() {
            if let Some(status) = self.exited_within(Duration::ZERO) {
                return Err(status);
            }
            assert!(
                Instant::now() < deadline,
                "volplane serve did not create {}",
                sock.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// `volplane serve` as this driver runs it, with another state
    /// directory or endpoint if asked.
    pub fn serve_command(&self, state: &Path, endpoint: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"));
        cmd.args([
            "serve",
            "--runtime",
            self.runtime.flag(),
            "--endpoint",
            endpoint,
            "--node-id",
            NODE,
        ])
        .arg("--state-dir")
        .arg(state)
        .arg("--kubelet-dir")
        .arg(self.kubelet())
        .args(&self.flags)
        .env(
            "VOLPLANE_LOG",
            std::env::var("VOLPLANE_TEST_LOG").unwrap_or_else(|_| "error".into()),
        )
        .stdout(Stdio::null());
        cmd
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL and start again.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn(None);
    }

    /// Waits for the process to exit by itself (a crash on purpose).
    pub fn wait_exit(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// Waits up to `limit` for the process to exit by itself; its status,
    /// or `None` if it is still running (then it is left running).
    pub fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        let c = self.child.as_mut().expect("driver is running");
        loop {
            if let Some(status) = c.try_wait().expect("wait for volplane serve") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait: the clean shutdown path.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("driver is running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        c.wait().unwrap()
    }

    pub async fn client(&self) -> Csi {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match volplane_tokio::connect(&self.endpoint).await {
                Ok(ch) => return Csi::new(ch),
                Err(e) => {
                    assert!(Instant::now() < deadline, "connect {}: {e}", self.endpoint);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Kubelet's staging path for a volume (D3.1).
    pub fn staging(&self, volume_id: &str) -> String {
        use sha2::Digest;
        let p = self
            .kubelet()
            .join("plugins/kubernetes.io/csi")
            .join(DRIVER)
            .join(hex::encode(sha2::Sha256::digest(volume_id.as_bytes())))
            .join("globalmount");
        std::fs::create_dir_all(&p).unwrap();
        p.display().to_string()
    }

    /// Kubelet's publish target for a pod (D3.2); the parent is created as kubelet does.
    pub fn target(&self, pod: &str, pv: &str) -> String {
        let dir = self
            .kubelet()
            .join(format!("pods/{pod}/volumes/kubernetes.io~csi/{pv}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("mount").display().to_string()
    }

    /// Everything left under the root: mounts, loop devices backed by our
    /// files, and files in the volumes directory.
    pub fn leftovers(&self) -> Vec<String> {
        let root = self.root().canonicalize().unwrap().display().to_string();
        let mut out: Vec<String> = mounts_under(&root)
            .into_iter()
            .map(|m| format!("mount {m}"))
            .collect();
        out.extend(
            loops_under(&root)
                .into_iter()
                .map(|(dev, file)| format!("loop {dev} -> {file}")),
        );
        let volumes = self.state().join("volumes");
        for e in std::fs::read_dir(&volumes).into_iter().flatten().flatten() {
            // The snapshots directory itself stays; what is in it must not.
            if e.path() == volumes.join("snapshots") {
                for s in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                    out.push(format!("snapshot storage {}", s.path().display()));
                }
            } else {
                out.push(format!("volume storage {}", e.path().display()));
            }
        }
        let pods = self.kubelet().join("pods");
        for e in walk(&pods) {
            if e.ends_with("mount") {
                out.push(format!("target {}", e.display()));
            }
        }
        out
    }
}

/// Mount points at or below `root`, deepest last.
fn mounts_under(root: &str) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = volplane_core::mountinfo::parse(&text)
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(root))
        .collect();
    points.sort();
    points
}

/// Loop devices whose backing file lies below `root`, with that file.
fn loops_under(root: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(b) = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
            && b.trim().starts_with(root)
        {
            out.push((format!("/dev/{name}"), b.trim().to_string()));
        }
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.clone());
            if p.is_dir() {
                out.extend(walk(&p));
            }
        }
    }
    out
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.kill();
        // Best effort: never leave mounts or loop devices behind a failed test.
        let root = self.root().display().to_string();
        for p in mounts_under(&root).iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
        for (dev, _) in loops_under(&root) {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
    }
}

/// CSI clients on one channel.
#[derive(Clone)]
pub struct Csi {
    pub identity: IdentityClient<Channel>,
    pub controller: ControllerClient<Channel>,
    pub node: NodeClient<Channel>,
}

impl Csi {
    pub fn new(ch: Channel) -> Csi {
        Csi {
            identity: IdentityClient::new(ch.clone()),
            controller: ControllerClient::new(ch.clone()),
            node: NodeClient::new(ch),
        }
    }
}

pub fn capability(
    mode: csi::volume_capability::access_mode::Mode,
    block: bool,
) -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
    csi::VolumeCapability {
        access_type: Some(if block {
            AccessType::Block(BlockVolume {})
        } else {
            AccessType::Mount(MountVolume::default())
        }),
        access_mode: Some(AccessMode { mode: mode as i32 }),
    }
}

pub fn multi_writer() -> csi::VolumeCapability {
    capability(
        csi::volume_capability::access_mode::Mode::SingleNodeMultiWriter,
        false,
    )
}

pub fn params(kind: &str) -> HashMap<String, String> {
    [("kind".to_string(), kind.to_string())].into()
}

/// Retries a call while the driver answers ABORTED (operation pending) or
/// is unreachable (restarting), as a CO does with backoff.
pub async fn retry<T, F, Fut>(mut f: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut wait = Duration::from_millis(10);
    loop {
        match f().await {
            Err(e)
                if matches!(
                    e.code(),
                    tonic::Code::Aborted | tonic::Code::Unavailable | tonic::Code::Unknown
                ) && Instant::now() < deadline =>
            {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            r => return r,
        }
    }
}

/// A volume created and attached to [`NODE`] (ControllerPublish).
pub struct Attached {
    pub id: String,
    pub context: std::collections::HashMap<String, String>,
    pub publish_context: std::collections::HashMap<String, String>,
}

/// CreateVolume of `kind` (`block` or `dir`), then ControllerPublish to [`NODE`].
pub async fn create_and_attach(
    csi: &mut Csi,
    name: &str,
    kind: &str,
    cap: csi::VolumeCapability,
    bytes: i64,
) -> Attached {
    let v = csi
        .controller
        .create_volume(csi::CreateVolumeRequest {
            name: name.into(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: bytes,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![cap.clone()],
            parameters: params(kind),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let p = csi
        .controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: NODE.into(),
            volume_capability: Some(cap),
            volume_context: v.volume_context.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    Attached {
        id: v.volume_id,
        context: v.volume_context,
        publish_context: p.publish_context,
    }
}

/// A plain HTTP/1.1 GET to `address` (`host:port`); the whole answer, or
/// `None` when nothing answers there.
pub async fn http_get(address: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}
