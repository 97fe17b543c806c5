//! The `volplane` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// volplane: the Kubernetes volume lifecycle in Rust.
#[derive(Debug, Parser)]
#[command(name = "volplane", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the reference CSI driver on a unix socket.
    Serve(crate::serve::ServeArgs),
    /// Measure a CSI driver: Probe, NodePublish+NodeUnpublish, CreateVolume+DeleteVolume.
    Bench(crate::bench::BenchArgs),
    /// Simulate a whole cluster's storage lifecycle under faults and check it.
    Sim(crate::sim::SimArgs),
    /// A whole cluster's storage lifecycle on this machine, for real (root).
    Lab(crate::lab::cli::LabArgs),
    /// external-provisioner, -attacher and -resizer for any CSI driver,
    /// against the cluster's API server.
    Controller(crate::controller::ControllerArgs),
    /// node-driver-registrar: registers a CSI driver with the kubelet.
    Registrar(crate::registrar::RegistrarArgs),
}

/// Parses the command line and runs it.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let level = match &cli.command {
        Command::Controller(a) => crate::controller::verbosity_filter(a.verbosity),
        Command::Registrar(a) => crate::controller::verbosity_filter(a.verbosity),
        _ => "info",
    };
    volplane::init_logging(level);
    let result = match cli.command {
        // Each picks its own runtime (--runtime tokio|smol).
        Command::Serve(args) => crate::serve::run(args).map_err(|e| e.to_string()),
        Command::Bench(args) => crate::bench::run(args).map_err(|e| e.to_string()),
        Command::Sim(args) => return ExitCode::from(crate::sim::run(args)),
        Command::Lab(args) => crate::lab::cli::run(args).map_err(|e| e.to_string()),
        Command::Controller(args) => crate::controller::run(args),
        Command::Registrar(args) => match crate::registrar::run(args) {
            Ok(code) => return ExitCode::from(code),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("volplane: {e}");
            ExitCode::FAILURE
        }
    }
}
