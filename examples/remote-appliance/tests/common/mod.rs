//! The appliance as a real process on loopback, and the driver started
//! against it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use remote_appliance::api::{Faults, Page, Stats, VolumeInfo};
use remote_appliance::http;
use volplane::testing::{CallSecrets, Layout};

/// The tenant's token: what the StorageClass's secret carries.
pub const TOKEN: &str = "tenant-0123456789";
/// The driver's own, read-only token (its --token-file).
pub const READER: &str = "reader-9876543210";

/// The secrets every call carries.
pub fn secrets() -> CallSecrets {
    CallSecrets::everywhere(&BTreeMap::from([("token".to_string(), TOKEN.to_string())]))
}

/// The appliance, killed and its directory removed when dropped.
pub struct Appliance {
    child: Child,
    /// `127.0.0.1:port`.
    pub address: String,
    /// Its images (what the node sees as the export).
    pub dir: PathBuf,
}

impl Appliance {
    /// Starts one with `extra` flags (`--busy-every 30` …).
    pub fn start(extra: &[&str]) -> Appliance {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("remote-appliance-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut child = Command::new(env!("CARGO_BIN_EXE_appliance"))
            .arg("--dir")
            .arg(&dir)
            .args(["--token", TOKEN, "--reader-token", READER])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the appliance starts");
        let mut line = String::new();
        let out = child.stdout.take().expect("its stdout");
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("it says where it listens");
        let address = line
            .trim()
            .strip_prefix("appliance listening on ")
            .unwrap_or_else(|| panic!("the appliance said {line:?}"))
            .to_string();
        Appliance {
            child,
            address,
            dir,
        }
    }

    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let auth = [("Authorization", format!("Bearer {READER}"))];
        // Busy answers are the appliance's rhythm: ask again.
        let (code, body) = (0..10)
            .map(|_| {
                http::call(
                    &self.address,
                    "GET",
                    path,
                    &auth,
                    &[],
                    Duration::from_secs(10),
                )
                .expect("the appliance answers")
            })
            .find(|(code, _)| *code != 503)
            .expect("the appliance is not busy for ever");
        assert_eq!(code, 200, "GET {path}: {}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).expect("JSON")
    }

    /// What it has been asked.
    pub fn stats(&self) -> Stats {
        self.get("/v1/stats")
    }

    /// The volumes it holds.
    pub fn volumes(&self) -> Vec<VolumeInfo> {
        self.get::<Page>("/v1/volumes").volumes
    }

    /// The next `n` changes wait `ms` before they act.
    pub fn slow_next(&self, n: u64, ms: u64) {
        self.faults(Faults {
            slow_next: n,
            slow_ms: ms,
            short_expand: false,
        });
    }

    /// Sets the appliance's faults.
    pub fn faults(&self, faults: Faults) {
        let auth = [("Authorization", format!("Bearer {TOKEN}"))];
        let body = serde_json::to_vec(&faults).unwrap();
        let (code, _) = http::call(
            &self.address,
            "POST",
            "/v1/faults",
            &auth,
            &body,
            Duration::from_secs(10),
        )
        .expect("the appliance answers");
        assert_eq!(code, 200);
    }

    /// The driver's command against this appliance (its reader token in
    /// a file beside the images).
    pub fn driver(&self) -> impl Fn(&Layout) -> Command + Send + Sync + 'static {
        let (address, images) = (self.address.clone(), self.dir.clone());
        let token_file = self.dir.with_extension("reader");
        std::fs::write(&token_file, READER).expect("write the reader token");
        move |l: &Layout| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_remote-appliance"));
            cmd.args(["--endpoint", &l.endpoint])
                .arg("--state-dir")
                .arg(&l.state_dir)
                .arg("--kubelet-dir")
                .arg(&l.kubelet_dir)
                .args(["--appliance", &address])
                .arg("--images")
                .arg(&images)
                .arg("--token-file")
                .arg(&token_file)
                .env("VOLPLANE_LOG", "error");
            cmd
        }
    }

    /// The driver's command line as a shell command (for `Check::restart`).
    pub fn driver_shell(&self, l: &Layout) -> String {
        let cmd = self.driver()(l);
        let mut line = format!("exec {}", cmd.get_program().to_string_lossy());
        for a in cmd.get_args() {
            line.push_str(&format!(" '{}'", a.to_string_lossy()));
        }
        format!("VOLPLANE_LOG=error {line}")
    }
}

impl Drop for Appliance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.dir.with_extension("reader"));
    }
}
