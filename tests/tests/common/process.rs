//! Processes under test: the kubeconfig they are given, stopping them when
//! a test ends, and what /proc says of their memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Writes `dir/file`: a kubeconfig naming `server` with a bearer `token`
/// (a TLS server's certificate is not checked).
pub fn kubeconfig(dir: &Path, file: &str, server: &str, token: &str) -> PathBuf {
    let path = dir.join(file);
    let tls = if server.starts_with("https:") {
        ", insecure-skip-tls-verify: true"
    } else {
        ""
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: c, cluster: {{server: \"{server}\"{tls}}}}}]\n\
         users: [{{name: u, user: {{token: {token}}}}}]\n\
         contexts: [{{name: x, context: {{cluster: c, user: u, namespace: default}}}}]\n\
         current-context: x\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A child asked to stop (SIGTERM) when dropped, and killed if it is
/// still running 20 s later.
pub struct Terminated(pub Child);

impl Drop for Terminated {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A field of /proc/<pid>/status (VmRSS, VmHWM), in KiB; 0 once the
/// process is gone.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
