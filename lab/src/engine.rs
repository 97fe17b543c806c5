//! The lab's engine on tokio: owns the [`World`] behind a lock, fires its
//! timers, runs its jobs (CSI calls over real sockets, registration RPCs,
//! pods' containers), supervises the driver processes, and prints what
//! happens.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;
use volplane_core::Tick;
use volplane_core::control::{CsiCall, CsiResult};
use volplane_core::driver::{ControllerCapability, Response};
use volplane_core::roles::DriverFacts;
use volplane_proto::client::CsiClient;

use crate::processes::{CONTROLLER, Processes};
use crate::registration::{RegistrarSetup, carry_out, run_registrar, watch_registry};
pub use crate::shared::Shared;
use crate::world::{Job, World};
use crate::{Layout, cleanup, node_names};

/// Why the lab could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    /// The lab could not be set up (directories, processes).
    Setup(String),
    #[error("{0}")]
    /// A command on the world failed.
    Command(#[from] crate::world::CommandError),
    #[error(
        "timed out after {secs} s waiting for {what}; the events and CSI calls above (and \
         lab.log, and each driver's driver.log under the lab root) say what it is stuck on"
    )]
    /// Something did not happen in time.
    Timeout {
        /// What was waited for.
        what: String,
        /// For how long.
        secs: u64,
    },
}

/// How a lab starts.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// The lab's root directory.
    pub root: PathBuf,
    /// How many nodes.
    pub nodes: usize,
    /// The runtime the drivers serve on (`tokio` or `smol`).
    pub runtime: String,
    /// Registrars listen outside the registry and symlink their socket in.
    pub via_symlink: bool,
    /// (node, plan kind): that node's driver crashes after its first such
    /// plan (VOLPLANE_CRASH_AFTER), then is restarted.
    pub crash: Option<(String, String)>,
    /// The `volplane` binary to run drivers with.
    pub exe: PathBuf,
    /// The CSI driver's name.
    pub driver: String,
    /// Print every line on stdout as it happens.
    pub echo: bool,
}

impl LabConfig {
    /// A lab of `nodes` nodes under `root`.
    pub fn new(root: impl Into<PathBuf>, nodes: usize) -> LabConfig {
        LabConfig {
            root: root.into(),
            nodes,
            runtime: "tokio".into(),
            via_symlink: false,
            crash: None,
            exe: std::env::current_exe().unwrap_or_else(|_| "volplane".into()),
            driver: crate::DRIVER_NAME.into(),
            echo: false,
        }
    }
}

/// A running lab. See the module documentation.
#[derive(Debug)]
pub struct Lab {
    /// The world and the machines, shared with the pumps.
    pub shared: Arc<Shared>,
    /// Where everything is.
    pub layout: Layout,
    procs: Arc<Mutex<Processes>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Lab {
    /// Starts the drivers, the machines and registration; returns once every
    /// node's driver is registered and its kubelet started.
    pub async fn start(config: LabConfig) -> Result<Lab, LabError> {
        let layout = Layout::new(&config.root, &config.driver);
        let early = cleanup::prepare(&layout)?;
        let _ = std::fs::write(
            cleanup::lab_pid_file(&layout),
            std::process::id().to_string(),
        );
        let procs = Arc::new(Mutex::new(Processes::new(
            layout.clone(),
            config.exe.clone(),
        )));
        match Lab::boot(config, layout.clone(), procs.clone(), early).await {
            Ok(lab) => Ok(lab),
            Err(e) => {
                // Stop what did start; the root keeps the logs until the next
                // `lab up` or `lab down` cleans it.
                let _ = tokio::task::spawn_blocking(move || {
                    procs.lock().expect("processes").stop_all()
                })
                .await;
                Err(e)
            }
        }
    }

    async fn boot(
        config: LabConfig,
        layout: Layout,
        procs: Arc<Mutex<Processes>>,
        mut early: Vec<String>,
    ) -> Result<Lab, LabError> {
        let nodes = node_names(config.nodes.max(1));
        let log = File::create(layout.log_file()).ok();
        procs
            .lock()
            .expect("processes")
            .start_controller(&config.runtime, &nodes)?;
        let (discovery, controller) = discover(&layout, &procs, &mut early).await?;
        let facts = DriverFacts {
            name: config.driver.clone(),
            controller,
            plugin: Vec::new(),
        };
        let mut world = World::new(layout.clone(), &facts, &nodes);
        for (call, r) in &discovery {
            world.record(CONTROLLER, call, r);
        }
        let (lines, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            world: Mutex::new(world),
            wake: Notify::new(),
            start: Instant::now(),
            lines,
            log: Mutex::new(log),
            clients: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            activity: Mutex::new(Instant::now()),
            echo: config.echo,
        });
        for line in early {
            shared.say(line);
        }
        let (stop, _) = watch::channel(false);
        let mut tasks = vec![
            tokio::spawn(engine(shared.clone(), stop.subscribe())),
            tokio::spawn(supervise(shared.clone(), procs.clone(), stop.subscribe())),
        ];
        start_nodes(&config, &layout, &procs, &shared, &stop, &nodes, &mut tasks)?;
        let lab = Lab {
            shared,
            layout,
            procs,
            stop,
            tasks,
        };
        if let Err(e) = lab
            .wait_for(
                "every node's driver to register",
                Duration::from_secs(60),
                World::ready,
            )
            .await
        {
            lab.down().await;
            return Err(e);
        }
        Ok(lab)
    }

    /// Every line the lab prints from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.shared.lines.subscribe()
    }

    /// Runs `f` on the world at the lab's time.
    pub fn with<R>(&self, f: impl FnOnce(&mut World, Tick) -> R) -> R {
        self.shared.with(f)
    }

    /// Waits until nothing is in flight and nothing happened for `quiet`
    /// (at most `max`).
    pub async fn settle(&self, quiet: Duration, max: Duration) {
        let end = Instant::now() + max;
        while Instant::now() < end {
            let idle = self.shared.in_flight.load(Ordering::SeqCst) == 0
                && self.shared.activity.lock().expect("activity").elapsed() >= quiet;
            if idle {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `done` holds of the world.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&World) -> bool,
    ) -> Result<(), LabError> {
        let end = Instant::now() + timeout;
        loop {
            if done(&self.shared.world.lock().expect("world")) {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(LabError::Timeout {
                    what: what.into(),
                    secs: timeout.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills a driver as a crash would; the lab restarts it.
    pub fn kill_driver(&self, role: &str) {
        self.procs.lock().expect("processes").kill(role);
    }

    /// How many times the driver process of `role` was restarted.
    pub fn driver_restarts(&self, role: &str) -> u32 {
        self.procs.lock().expect("processes").restarts(role)
    }

    /// Stops everything and leaves nothing behind: no process, mount, loop
    /// device or directory of this lab.
    pub async fn down(self) -> Vec<String> {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        let procs = self.procs.clone();
        let layout = self.layout.clone();
        tokio::task::spawn_blocking(move || {
            procs.lock().expect("processes").stop_all();
            cleanup::down(&layout)
        })
        .await
        .unwrap_or_else(|e| vec![format!("cleanup panicked: {e}")])
    }
}

/// Waits for the controller driver's socket, or says why it did not come.
async fn wait_for_controller(layout: &Layout, procs: &Mutex<Processes>) -> Result<(), LabError> {
    let role = CONTROLLER;
    let socket = layout.controller_dir().join("csi.sock");
    let log = layout.controller_dir().join("driver.log");
    let end = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        if Instant::now() > end {
            return Err(LabError::Setup(format!(
                "the {role} driver did not create {} within 20 s; its log is {}",
                socket.display(),
                log.display()
            )));
        }
        let restarts = {
            let mut p = procs.lock().expect("processes");
            p.supervise();
            p.restarts(role)
        };
        if restarts > 3 {
            return Err(LabError::Setup(format!(
                "the {role} driver exited {restarts} times while starting; its log is {}",
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The engine loop: pump the world, start its jobs, sleep until a job
/// finishes, a command arrives or a timer is due.
async fn engine(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let (jobs, lines, next) = {
            let mut w = shared.world.lock().expect("world");
            w.pump(shared.now());
            (w.take_jobs(), w.take_lines(), w.next_timeout())
        };
        for line in lines {
            shared.say(line);
        }
        for job in jobs {
            shared.in_flight.fetch_add(1, Ordering::SeqCst);
            let s = shared.clone();
            tokio::spawn(async move {
                run_job(&s, job).await;
                s.in_flight.fetch_sub(1, Ordering::SeqCst);
                s.touch();
                s.wake.notify_one();
            });
        }
        let sleep = next.map_or(Duration::from_secs(1), |t| shared.until(t));
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(sleep.min(Duration::from_secs(1))) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn run_job(shared: &Arc<Shared>, job: Job) {
    match job {
        Job::Csi {
            plugin,
            endpoint,
            call,
            reply,
        } => {
            let result = match endpoint {
                Ok(e) => shared.csi(&plugin, &e, &call).await,
                Err(s) => {
                    shared.say(format!(
                        "{plugin:<8} {} {}: {}",
                        call.method(),
                        call.subject().unwrap_or(""),
                        s.message
                    ));
                    Err(s)
                }
            };
            shared.with(|w, t| w.csi_done(t, reply, result));
        }
        Job::Registration { node, effect } => carry_out(shared.clone(), node, effect).await,
        Job::Container { pod, node, targets } => {
            let lines = tokio::task::spawn_blocking(move || container(&pod, &node, &targets))
                .await
                .unwrap_or_default();
            for l in lines {
                shared.say(l);
            }
        }
    }
}

/// A pod's "container": reads the notes earlier pods left on each volume,
/// then leaves its own.
fn container(pod: &str, node: &str, targets: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for t in targets {
        let dir = std::path::Path::new(t);
        if !dir.is_dir() {
            out.push(format!(
                "{node:<8} pod {pod}: {t} is a raw block device; left alone"
            ));
            continue;
        }
        let mut notes: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        notes.retain(|p| p.extension().is_some_and(|e| e == "txt"));
        notes.sort();
        for n in notes {
            let text = std::fs::read_to_string(&n).unwrap_or_default();
            out.push(format!(
                "{node:<8} pod {pod} reads {}: {}",
                n.file_name().unwrap_or_default().to_string_lossy(),
                text.trim()
            ));
        }
        let note = dir.join(format!("{pod}.txt"));
        let written = File::create(&note).and_then(|mut f| {
            writeln!(f, "written by pod {pod} on {node}")?;
            f.sync_all()
        });
        out.push(match written {
            Ok(()) => format!("{node:<8} pod {pod} wrote {}", note.display()),
            Err(e) => format!("{node:<8} pod {pod} cannot write {}: {e}", note.display()),
        });
    }
    out
}

async fn supervise(
    shared: Arc<Shared>,
    procs: Arc<Mutex<Processes>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => return,
        }
        let said = procs.lock().expect("processes").supervise();
        for l in said {
            shared.say(l);
        }
    }
}

/// The controller driver's GetPluginInfo and ControllerGetCapabilities (each
/// said in `early`), and its controller capabilities.
async fn discover(
    layout: &Layout,
    procs: &Arc<Mutex<Processes>>,
    early: &mut Vec<String>,
) -> Result<(Vec<(CsiCall, CsiResult)>, Vec<ControllerCapability>), LabError> {
    let endpoint = layout.controller_endpoint();
    wait_for_controller(layout, procs).await?;
    let ch = volplane_tokio::connect(&endpoint).await.map_err(|e| {
        LabError::Setup(format!(
            "cannot dial the controller driver at {endpoint}: {e}"
        ))
    })?;
    let mut client = CsiClient::new(ch, None);
    let mut discovery = Vec::new();
    for call in [CsiCall::GetPluginInfo, CsiCall::ControllerGetCapabilities] {
        let r = client.call(&call).await;
        early.push(format!(
            "{CONTROLLER:<8} {} -> {}",
            call.method(),
            match &r {
                Ok(resp) => format!("OK {resp:?}"),
                Err(s) => format!("{}: {}", s.code.name(), s.message),
            }
        ));
        discovery.push((call, r));
    }
    let controller = discovery
        .iter()
        .find_map(|(_, r)| match r {
            Ok(Response::ControllerCapabilities(c)) => Some(c.clone()),
            _ => None,
        })
        .unwrap_or_default();
    Ok((discovery, controller))
}

/// Each node's driver process, registrar and registry watcher.
fn start_nodes(
    config: &LabConfig,
    layout: &Layout,
    procs: &Arc<Mutex<Processes>>,
    shared: &Arc<Shared>,
    stop: &watch::Sender<bool>,
    nodes: &[String],
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<(), LabError> {
    for n in nodes {
        let crash = config
            .crash
            .as_ref()
            .filter(|(node, _)| node == n)
            .map(|(_, kind)| kind.clone());
        procs
            .lock()
            .expect("processes")
            .start_node(&config.runtime, n, crash)?;
        let setup = RegistrarSetup {
            node: n.clone(),
            csi_socket: layout.csi_socket(n),
            registry: layout.registry_dir(n),
            via_symlink: config.via_symlink.then(|| layout.registrar_dir(n)),
        };
        tasks.push(tokio::spawn(run_registrar(
            shared.clone(),
            setup,
            stop.subscribe(),
        )));
        tasks.push(tokio::spawn(watch_registry(
            shared.clone(),
            n.clone(),
            layout.registry_dir(n),
            stop.subscribe(),
        )));
    }
    Ok(())
}
