//! The lab's driver processes: `volplane serve --controller` and one
//! `volplane serve --node` per node, started from this very binary,
//! restarted when they die (as a DaemonSet's pod would be), and listed in
//! the root's `pids` file so `lab down` can stop them even after the lab
//! itself was killed.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{LabError, Layout};

/// The role of the controller's driver.
pub const CONTROLLER: &str = "controller";

#[derive(Debug)]
struct Driver {
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    /// VOLPLANE_CRASH_AFTER for the first start only.
    crash_once: Option<String>,
    restarts: u32,
}

/// Every driver process of a lab.
#[derive(Debug)]
pub struct Processes {
    layout: Layout,
    exe: PathBuf,
    drivers: BTreeMap<String, Driver>,
}

impl Processes {
    /// Driver processes laid out as `layout` says, each running `exe`.
    pub fn new(layout: Layout, exe: PathBuf) -> Processes {
        Processes {
            layout,
            exe,
            drivers: BTreeMap::new(),
        }
    }

    /// Starts the controller's driver, which accepts `nodes`.
    pub fn start_controller(&mut self, runtime: &str, nodes: &[String]) -> Result<(), LabError> {
        let l = &self.layout;
        let dir = l.controller_dir();
        let mut args = vec![
            "serve".to_string(),
            "--runtime".into(),
            runtime.into(),
            "--endpoint".into(),
            l.controller_endpoint(),
            "--node-id".into(),
            CONTROLLER.into(),
            "--state-dir".into(),
            dir.display().to_string(),
            "--kubelet-dir".into(),
            dir.join("kubelet").display().to_string(),
            "--volumes-dir".into(),
            l.volumes_dir().display().to_string(),
            "--driver-name".into(),
            l.driver.clone(),
            "--controller".into(),
        ];
        for n in nodes {
            args.push("--known-node".into());
            args.push(n.clone());
        }
        std::fs::create_dir_all(dir.join("kubelet")).map_err(|e| setup(&dir, e))?;
        self.add(CONTROLLER, args, dir.join("driver.log"), None)
    }

    /// Starts a node's driver; `crash_once` is VOLPLANE_CRASH_AFTER for its
    /// first start.
    pub fn start_node(
        &mut self,
        runtime: &str,
        node: &str,
        crash_once: Option<String>,
    ) -> Result<(), LabError> {
        let l = &self.layout;
        let socket = l.csi_socket(node);
        let args = vec![
            "serve".to_string(),
            "--runtime".into(),
            runtime.into(),
            "--endpoint".into(),
            format!("unix://{}", socket.display()),
            "--node-id".into(),
            node.into(),
            "--state-dir".into(),
            l.state_dir(node).display().to_string(),
            "--kubelet-dir".into(),
            l.kubelet_dir(node),
            "--volumes-dir".into(),
            l.volumes_dir().display().to_string(),
            "--driver-name".into(),
            l.driver.clone(),
            "--node".into(),
        ];
        for d in [
            socket.parent().map(PathBuf::from).unwrap_or_default(),
            l.state_dir(node),
            l.registry_dir(node),
        ] {
            std::fs::create_dir_all(&d).map_err(|e| setup(&d, e))?;
        }
        let log = l.node_dir(node).join("driver.log");
        self.add(node, args, log, crash_once)
    }

    fn add(
        &mut self,
        role: &str,
        args: Vec<String>,
        log: PathBuf,
        crash_once: Option<String>,
    ) -> Result<(), LabError> {
        self.drivers.insert(
            role.into(),
            Driver {
                args,
                log,
                child: None,
                crash_once,
                restarts: 0,
            },
        );
        self.spawn(role)
    }

    fn spawn(&mut self, role: &str) -> Result<(), LabError> {
        let d = self.drivers.get_mut(role).expect("a known driver");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&d.log)
            .map_err(|e| setup(&d.log, e))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(&d.args)
            .env("VOLPLANE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        match d.crash_once.take() {
            Some(kind) => cmd.env("VOLPLANE_CRASH_AFTER", kind),
            None => cmd.env_remove("VOLPLANE_CRASH_AFTER"),
        };
        let child = cmd.spawn().map_err(|e| {
            LabError::Setup(format!(
                "cannot start {} serve for {role}: {e}",
                self.exe.display()
            ))
        })?;
        d.child = Some(child);
        self.write_pids();
        Ok(())
    }

    fn write_pids(&self) {
        let text: String = self
            .drivers
            .iter()
            .filter_map(|(role, d)| d.child.as_ref().map(|c| format!("{} {role}\n", c.id())))
            .collect();
        let _ = std::fs::write(self.layout.pids_file(), text);
    }

    /// Restarts drivers that exited; says which and why.
    pub fn supervise(&mut self) -> Vec<String> {
        let mut said = Vec::new();
        let dead: Vec<(String, String)> = self
            .drivers
            .iter_mut()
            .filter_map(|(role, d)| {
                let status = d.child.as_mut()?.try_wait().ok()??;
                d.child = None;
                d.restarts += 1;
                Some((role.clone(), status.to_string()))
            })
            .collect();
        for (role, status) in dead {
            said.push(format!("{role:<8} driver exited ({status}); restarting it"));
            if let Err(e) = self.spawn(&role) {
                said.push(format!("{role:<8} {e}"));
            }
        }
        said
    }

    /// How many times the process of `role` was restarted.
    pub fn restarts(&self, role: &str) -> u32 {
        self.drivers.get(role).map_or(0, |d| d.restarts)
    }

    /// SIGKILL, as a crash would (the supervisor restarts it).
    pub fn kill(&mut self, role: &str) {
        if let Some(c) = self.drivers.get_mut(role).and_then(|d| d.child.as_mut()) {
            let _ = c.kill();
        }
    }

    /// SIGTERM to every driver, SIGKILL to those still running after 10 s.
    pub fn stop_all(&mut self) {
        for d in self.drivers.values() {
            if let Some(c) = &d.child {
                signal(c.id(), rustix::process::Signal::TERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for d in self.drivers.values_mut() {
            let Some(c) = d.child.as_mut() else { continue };
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            d.child = None;
        }
        let _ = std::fs::remove_file(self.layout.pids_file());
    }
}

/// Sends `sig` to `pid`, ignoring a process that is already gone.
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, sig);
    }
}

fn setup(path: &std::path::Path, e: std::io::Error) -> LabError {
    LabError::Setup(format!("{}: {e}", path.display()))
}
