//! `volplane lab …`: the command line of the lab.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use crate::serve::{DRIVER_NAME, RuntimeKind};
use volplane_lab::daemon;
use volplane_lab::world::Command as Request;
use volplane_lab::{Lab, LabConfig, LabError, Layout, cleanup, demo, require_root};

/// `volplane lab`'s flags.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// The lab's root directory: mounts, loop images, sockets and state.
    #[arg(long, global = true, default_value = "/var/lib/volplane-lab")]
    pub root: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: LabCommand,
}

/// `volplane lab up`'s flags.
#[derive(Debug, Args, Clone)]
pub struct UpArgs {
    /// Simulated nodes (node-a, node-b, …), each with its own driver and kubelet.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// The runtime the drivers serve on.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Tokio)]
    pub runtime: RuntimeKind,
    /// Registrars keep their socket outside plugins_registry/ and link it in.
    #[arg(long)]
    pub registration_via_symlink: bool,
}

/// `volplane lab`'s commands.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Start a lab in the background.
    Up(UpArgs),
    /// Create or update the objects of a manifest (StorageClass,
    /// PersistentVolumeClaim, PersistentVolume, Pod, Deployment).
    Apply {
        /// The manifest (YAML, several documents allowed).
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
    },
    /// Delete an object: pvc/NAME, pv/NAME, pod/NAME, sc/NAME, deployment/NAME.
    Delete {
        /// `kind/name`, as kubectl takes it.
        what: String,
    },
    /// Scale a deployment: deployment/NAME --replicas N.
    Scale {
        /// `deployment/name`.
        what: String,
        /// How many pods.
        #[arg(long)]
        replicas: u32,
    },
    /// Grow a claim: pvc/NAME SIZE (as 128Mi).
    Resize {
        /// `pvc/name`.
        what: String,
        /// The new size (`128Mi`).
        size: String,
    },
    /// The objects and their phases, as kubectl get prints them.
    Status,
    /// Stop the lab and remove everything it made (also after a killed lab).
    Down,
    /// Play the whole story with the example manifests, then clean up.
    Demo(UpArgs),
    /// The background lab itself (started by `lab up`).
    #[command(hide = true)]
    Daemon(UpArgs),
}

fn config(root: &std::path::Path, up: &UpArgs) -> LabConfig {
    let mut c = LabConfig::new(root, up.nodes);
    c.runtime = match up.runtime {
        RuntimeKind::Tokio => "tokio".into(),
        RuntimeKind::Smol => "smol".into(),
    };
    c.via_symlink = up.registration_via_symlink;
    if let Ok(spec) = std::env::var("VOLPLANE_LAB_CRASH")
        && let Some((node, kind)) = spec.split_once(':')
    {
        c.crash = Some((node.into(), kind.into()));
    }
    c
}

fn runtime() -> Result<tokio::runtime::Runtime, LabError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::Setup(format!("cannot start the tokio runtime: {e}")))
}

fn strip(what: &str, kinds: &[&str]) -> Result<String, LabError> {
    match what.split_once('/') {
        Some((k, name)) if kinds.contains(&k) => Ok(name.to_string()),
        None => Ok(what.to_string()),
        Some(_) => Err(LabError::Setup(format!(
            "{what:?}: expected {}/NAME",
            kinds[0]
        ))),
    }
}

/// Runs a `volplane lab` command.
pub fn run(args: LabArgs) -> Result<(), LabError> {
    let layout = Layout::new(&args.root, DRIVER_NAME);
    match args.command {
        LabCommand::Up(up) => {
            require_root("up")?;
            up_in_background(&layout, &up)
        }
        LabCommand::Daemon(up) => runtime()?.block_on(daemon::serve(config(&args.root, &up))),
        LabCommand::Demo(up) => {
            require_root("demo")?;
            runtime()?.block_on(run_demo(config(&args.root, &up)))
        }
        LabCommand::Down => {
            require_root("down")?;
            for line in cleanup::down(&layout) {
                println!("{line}");
            }
            Ok(())
        }
        LabCommand::Apply { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| LabError::Setup(format!("cannot read {}: {e}", file.display())))?;
            daemon::send(&layout, &Request::Apply { text })
        }
        LabCommand::Delete { what } => daemon::send(&layout, &Request::Delete { what }),
        LabCommand::Scale { what, replicas } => daemon::send(
            &layout,
            &Request::Scale {
                name: strip(&what, &["deployment", "deploy", "deployments"])?,
                replicas,
            },
        ),
        LabCommand::Resize { what, size } => daemon::send(
            &layout,
            &Request::Resize {
                claim: strip(&what, &["pvc", "persistentvolumeclaim"])?,
                size,
            },
        ),
        LabCommand::Status => daemon::send(&layout, &Request::Status),
    }
}

fn up_in_background(layout: &Layout, up: &UpArgs) -> Result<(), LabError> {
    for line in cleanup::prepare(layout)? {
        println!("{line}");
    }
    let exe = std::env::current_exe()
        .map_err(|e| LabError::Setup(format!("cannot find this program: {e}")))?;
    let out_path = layout.root.join("up.log");
    let out = std::fs::File::create(&out_path)
        .map_err(|e| LabError::Setup(format!("{}: {e}", out_path.display())))?;
    let mut cmd = Command::new(exe);
    cmd.arg("lab")
        .arg("--root")
        .arg(&layout.root)
        .arg("daemon")
        .arg("--nodes")
        .arg(up.nodes.to_string())
        .arg("--runtime")
        .arg(match up.runtime {
            RuntimeKind::Tokio => "tokio",
            RuntimeKind::Smol => "smol",
        })
        .stdin(Stdio::null())
        .stdout(
            out.try_clone()
                .map_err(|e| LabError::Setup(e.to_string()))?,
        )
        .stderr(out);
    if up.registration_via_symlink {
        cmd.arg("--registration-via-symlink");
    }
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| LabError::Setup(format!("cannot start the lab: {e}")))?;
    let end = Instant::now() + Duration::from_secs(120);
    while !layout.control_socket().exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&out_path).unwrap_or_default();
            return Err(LabError::Setup(format!(
                "the lab exited ({status}) before it was up:\n{log}"
            )));
        }
        if Instant::now() > end {
            return Err(LabError::Timeout {
                what: "the lab to come up".into(),
                secs: 120,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "lab up: {} nodes at {} (pid {}); follow it with: tail -f {}",
        up.nodes,
        layout.root.display(),
        child.id(),
        layout.log_file().display()
    );
    println!(
        "next: volplane lab apply -f examples/lab/storage.yaml; volplane lab status; volplane lab down"
    );
    Ok(())
}

async fn run_demo(config: LabConfig) -> Result<(), LabError> {
    if config.nodes < 2 {
        return Err(LabError::Setup(
            "the demo needs at least 2 nodes (--nodes 2)".into(),
        ));
    }
    println!(
        "volplane lab demo: {} nodes under {}; drivers' logs in <root>/*/driver.log",
        config.nodes,
        config.root.display()
    );
    let mut config = config;
    config.echo = true;
    let lab = Lab::start(config).await?;
    let result = demo::play(&lab).await;
    if let Err(e) = &result {
        lab.shared.say(format!("the demo stopped: {e}"));
    }
    lab.shared.say("==> volplane lab down".into());
    for line in lab.down().await {
        println!("{line}");
    }
    result
}
