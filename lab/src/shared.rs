//! What the lab engine's tasks share: the world behind a lock, the clock
//! its machines read, the lines it prints, and the CSI clients of the
//! drivers' sockets.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast};
use tonic::transport::Channel;
use volplane_core::control::{CsiCall, CsiResult};
use volplane_core::{Code, Status, Tick};
use volplane_proto::client::CsiClient;

use crate::world::World;

/// What the engine's tasks share.
#[derive(Debug)]
pub struct Shared {
    pub(crate) world: Mutex<World>,
    pub(crate) wake: Notify,
    pub(crate) start: Instant,
    pub(crate) lines: broadcast::Sender<String>,
    pub(crate) log: Mutex<Option<File>>,
    pub(crate) clients: Mutex<HashMap<String, CsiClient<Channel>>>,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) activity: Mutex<Instant>,
    pub(crate) echo: bool,
}

impl Shared {
    /// Milliseconds since the lab started: the machines' clock.
    pub fn now(&self) -> Tick {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long until the machines' tick `t`.
    pub fn until(&self, t: Tick) -> Duration {
        Duration::from_millis(t.saturating_sub(self.now()))
    }

    pub(crate) fn touch(&self) {
        *self.activity.lock().expect("activity") = Instant::now();
    }

    /// Prints a line for the user (and the lab's log).
    pub fn say(&self, line: String) {
        let line = format!("{:>8.3}s  {line}", self.start.elapsed().as_secs_f64());
        if let Some(f) = self.log.lock().expect("log").as_mut() {
            let _ = writeln!(f, "{line}");
        }
        if self.echo {
            println!("{line}");
        }
        let _ = self.lines.send(line);
        self.touch();
    }

    /// Runs `f` on the world, then lets the engine carry out what it decided.
    pub fn with<R>(&self, f: impl FnOnce(&mut World, Tick) -> R) -> R {
        let r = f(&mut self.world.lock().expect("world"), self.now());
        self.touch();
        self.wake.notify_one();
        r
    }

    async fn client(&self, endpoint: &str) -> Result<CsiClient<Channel>, Status> {
        if let Some(c) = self.clients.lock().expect("clients").get(endpoint) {
            return Ok(c.clone());
        }
        let ch = volplane_tokio::connect(endpoint)
            .await
            .map_err(|e| Status::new(Code::Unavailable, format!("dial {endpoint}: {e}")))?;
        let c = CsiClient::new(ch, None);
        self.clients
            .lock()
            .expect("clients")
            .insert(endpoint.into(), c.clone());
        Ok(c)
    }

    /// One CSI call on `plugin`'s `endpoint`, printed and recorded.
    pub async fn csi(&self, plugin: &str, endpoint: &str, call: &CsiCall) -> CsiResult {
        let t = Instant::now();
        let result = match self.client(endpoint).await {
            Ok(mut c) => match tokio::time::timeout(Duration::from_secs(60), c.call(call)).await {
                Ok(r) => r,
                Err(_) => Err(Status::new(
                    Code::DeadlineExceeded,
                    "no answer within 60 s".to_string(),
                )),
            },
            Err(e) => Err(e),
        };
        if matches!(&result, Err(s) if s.code == Code::Unavailable) {
            self.clients.lock().expect("clients").remove(endpoint);
        }
        let outcome = match &result {
            Ok(_) => "OK".to_string(),
            Err(s) => format!("{}: {}", s.code.name(), s.message),
        };
        self.say(format!(
            "{plugin:<8} {} {}{} -> {outcome} ({} ms)",
            call.method(),
            call.subject().unwrap_or(""),
            call.path().map(|p| format!(" {p}")).unwrap_or_default(),
            t.elapsed().as_millis()
        ));
        self.world
            .lock()
            .expect("world")
            .record(plugin, call, &result);
        result
    }
}
