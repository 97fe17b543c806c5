//! The driver under `--restart`: started by the check from a shell
//! command, in a process group of its own, killed with SIGKILL (the whole
//! group, as a crash or an OOM kill takes a container) and started again.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use volplane_core::driver::Request;

use super::{Client, connect};
use crate::testing::Error;

/// A driver process the check owns.
#[derive(Debug)]
pub struct Restarter {
    command: String,
    /// Where the driver's output goes (appended), if not to ours.
    log: Option<std::path::PathBuf>,
    endpoint: String,
    child: Option<Child>,
    /// Restarts so far.
    pub restarts: u32,
}

impl Restarter {
    /// Starts `command` (run by `sh -c`) and waits until the driver at
    /// `endpoint` answers Probe; [`Error::Setup`] says why it could not.
    pub async fn start(
        command: &str,
        endpoint: &str,
        log: Option<&std::path::Path>,
    ) -> Result<(Restarter, Client), Error> {
        let mut r = Restarter {
            command: command.to_string(),
            log: log.map(std::path::Path::to_path_buf),
            endpoint: endpoint.to_string(),
            child: None,
            restarts: 0,
        };
        let client = r.spawn().await.map_err(Error::Setup)?;
        Ok((r, client))
    }

    async fn spawn(&mut self) -> Result<Client, String> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&self.command)
            .process_group(0)
            .stdin(Stdio::null());
        if let Some(log) = &self.log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| format!("the driver's log {}: {e}", log.display()))?;
            let err = file.try_clone().map_err(|e| e.to_string())?;
            cmd.stdout(file).stderr(err);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("--restart {:?}: cannot start it: {e}", self.command))?;
        self.child = Some(child);
        self.ready().await
    }

    /// Waits until the driver answers Probe (60 s at most).
    async fn ready(&mut self) -> Result<Client, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "--restart {:?} exited ({status}) before serving",
                    self.command
                ));
            }
            if let Ok(mut client) = connect(&self.endpoint, Duration::from_millis(200)).await
                && client.call(&Request::Probe).await.is_ok()
            {
                return Ok(client);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "--restart {:?}: the driver did not answer Probe at {} within 60 s",
                    self.command, self.endpoint
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn kill(&mut self, signal: Signal) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = Pid::from_raw(child.id() as i32) {
                let _ = kill_process_group(pid, signal);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL after `delay` (calls may be in flight), then start again;
    /// [`Error::Setup`] says why it could not.
    pub async fn restart(&mut self, delay: Duration) -> Result<Client, Error> {
        if delay < Duration::from_millis(2) {
            // The runtime's timer rounds up to whole milliseconds, past the
            // end of a quick local call: a thread's sleep keeps the kill
            // inside it.
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(delay)).await;
        } else {
            tokio::time::sleep(delay).await;
        }
        self.kill(Signal::KILL);
        self.restarts += 1;
        self.spawn().await.map_err(Error::Setup)
    }
}

impl Drop for Restarter {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref()
            && let Some(pid) = Pid::from_raw(child.id() as i32)
        {
            let _ = kill_process_group(pid, Signal::TERM);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while let Some(child) = self.child.as_mut() {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => {
                    self.child = None;
                }
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => self.kill(Signal::KILL),
            }
        }
    }
}
