//! The `volplane` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::knobs::Knobs;
use crate::upstream::Sidecar;

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
    /// Judge any CSI driver against the CSI specification's rules: random
    /// calls, repeated and concurrent, and the node's mounts after each.
    Check(crate::check::CheckArgs),
    /// A whole cluster's storage lifecycle on this machine, for real (root).
    Lab(crate::lab::cli::LabArgs),
    /// external-provisioner, -attacher and -resizer for any CSI driver,
    /// against the cluster's API server.
    Controller(crate::controller::ControllerArgs),
    /// node-driver-registrar: registers a CSI driver with the kubelet.
    #[command(alias = "csi-node-driver-registrar", alias = "node-driver-registrar")]
    Registrar(crate::registrar::RegistrarArgs),
    /// external-provisioner's role alone, with its flags (a stand-in for
    /// the csi-provisioner container: change its image and command only).
    #[command(name = "csi-provisioner", version)]
    CsiProvisioner(crate::controller::ControllerArgs),
    /// external-attacher's role alone, with its flags.
    #[command(name = "csi-attacher", version)]
    CsiAttacher(crate::controller::ControllerArgs),
    /// external-resizer's role alone, with its flags.
    #[command(name = "csi-resizer", version)]
    CsiResizer(crate::controller::ControllerArgs),
    /// csi-snapshotter's role alone, with its flags (needs the snapshot CRDs).
    #[command(name = "csi-snapshotter", version)]
    CsiSnapshotter(crate::controller::ControllerArgs),
    /// livenessprobe: /healthz for any CSI driver, from its Probe.
    #[command(name = "livenessprobe", version)]
    Livenessprobe(crate::probe::ProbeArgs),
}

/// Parses the command line and runs it.
pub fn run() -> ExitCode {
    run_with(Knobs::Refused)
}

/// As [`run`], honouring the test knobs this build has: only the tests'
/// own binary calls it (see [`crate::knobs`]).
pub fn run_under_test() -> ExitCode {
    run_with(Knobs::Honoured)
}

fn run_with(knobs: Knobs) -> ExitCode {
    // The sidecars' manifests spell long flags Go's way (`-v=5`), and
    // pass some that mean nothing here.
    let (args, inert) = crate::upstream::command_line(std::env::args_os());
    let cli = match Cli::try_parse_from(args) {
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
        Command::Controller(a)
        | Command::CsiProvisioner(a)
        | Command::CsiAttacher(a)
        | Command::CsiResizer(a)
        | Command::CsiSnapshotter(a) => crate::controller::verbosity_filter(a.verbosity),
        Command::Registrar(a) => crate::controller::verbosity_filter(a.verbosity),
        Command::Livenessprobe(a) => crate::controller::verbosity_filter(a.verbosity),
        _ => "info",
    };
    volplane::init_logging(level);
    crate::upstream::warn_inert(&inert);
    let result = match cli.command {
        // Each picks its own runtime (--runtime tokio|smol).
        Command::Serve(args) => crate::serve::run(args, knobs).map_err(|e| e.to_string()),
        Command::Bench(args) => crate::bench::run(args).map_err(|e| e.to_string()),
        Command::Sim(args) => return ExitCode::from(crate::sim::run(args, knobs)),
        Command::Check(args) => return ExitCode::from(crate::check::run(args)),
        Command::Lab(args) => crate::lab::cli::run(args).map_err(|e| e.to_string()),
        Command::Controller(args) => crate::controller::run(args),
        Command::CsiProvisioner(args) => crate::controller::run_as(Sidecar::Provisioner, args),
        Command::CsiAttacher(args) => crate::controller::run_as(Sidecar::Attacher, args),
        Command::CsiResizer(args) => crate::controller::run_as(Sidecar::Resizer, args),
        Command::CsiSnapshotter(args) => crate::controller::run_as(Sidecar::Snapshotter, args),
        Command::Livenessprobe(args) => crate::probe::run(args),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses a command line as `volplane` does.
    fn parse(line: &[&str]) -> Result<Cli, clap::Error> {
        let args = std::iter::once("volplane").chain(line.iter().copied());
        Cli::try_parse_from(crate::upstream::command_line(args.map(Into::into)).0)
    }

    /// The containers of csi-driver-host-path's deploy (kubernetes-1.34),
    /// and the flags the sidecars' own examples and charts pass, with only
    /// the command changed: every one parses.
    #[test]
    fn the_sidecars_manifests_parse_as_they_are() {
        let lines: &[&[&str]] = &[
            &[
                "csi-node-driver-registrar",
                "--v=5",
                "--csi-address=/csi/csi.sock",
                "--kubelet-registration-path=/var/lib/kubelet/plugins/csi-hostpath/csi.sock",
                "--http-endpoint=:9809",
            ],
            &["csi-attacher", "--v=5", "--csi-address=/csi/csi.sock"],
            &[
                "livenessprobe",
                "--csi-address=/csi/csi.sock",
                "--health-port=9898",
            ],
            &[
                "livenessprobe",
                "--csi-address=/csi/csi.sock",
                "--probe-timeout=3s",
                "--http-endpoint=:9808",
                "--metrics-path=/m",
                "-v=2",
            ],
            &[
                "csi-provisioner",
                "-v=5",
                "--csi-address=/csi/csi.sock",
                "--feature-gates=Topology=true",
            ],
            &["csi-resizer", "-v=5", "-csi-address=/csi/csi.sock"],
            &["csi-snapshotter", "-v=5", "--csi-address=/csi/csi.sock"],
            &[
                "csi-provisioner",
                "--csi-address=$(ADDRESS)",
                "--v=2",
                "--timeout=300s",
                "--leader-election",
                "--leader-election-namespace=kube-system",
                "--kube-api-qps=50",
                "--kube-api-burst=100",
                "--worker-threads=200",
                "--retry-interval-start=500ms",
                "--retry-interval-max=1m30s",
                "--extra-create-metadata",
                "--default-fstype=ext4",
                "--http-endpoint=:8080",
                "--metrics-path=/metrics",
                "--logging-format=text",
                "--automaxprocs",
                "--enable-pprof=false",
                "--leader-election-labels=a:b",
            ],
            &[
                "csi-attacher",
                "--csi-address=/csi/csi.sock",
                "--timeout=60s",
                "--resync=1m",
                "--reconcile-sync=1m",
                "--max-grpc-log-length=400",
                "--worker-threads=10",
                "--leader-election=true",
                "--default-fstype=ext4",
                "--metrics-address=:8081",
            ],
            &[
                "csi-resizer",
                "--csi-address=/csi/csi.sock",
                "--workers=10",
                "--handle-volume-inuse-error=false",
                "--extra-modify-metadata",
                "--leader-election",
                "--timeout=180s",
            ],
            &[
                "csi-snapshotter",
                "--csi-address=/csi/csi.sock",
                "--leader-election=false",
                "--snapshot-name-prefix=snap",
                "--snapshot-name-uuid-length=8",
                "--groupsnapshot-name-prefix=g",
                "--retry-crd-interval-max=30s",
            ],
            &[
                "node-driver-registrar",
                "--mode=kubelet-registration-probe",
                "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock",
            ],
            &[
                "csi-node-driver-registrar",
                "--csi-address=/csi/csi.sock",
                "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock",
                "--health-port=9809",
                "--connection-timeout=15s",
                "--timeout=5s",
                "--logtostderr",
                "--enable-pprof=false",
            ],
        ];
        for line in lines {
            if let Err(e) = parse(line) {
                panic!("{line:?}: {e}");
            }
        }
    }

    /// Every volplane container of deploy/beside-hostpath starts: its
    /// command and arguments parse as `volplane` parses them.
    #[test]
    fn the_beside_hostpath_manifest_parses() {
        let text = include_str!("../../deploy/beside-hostpath/plugin.yaml");
        let (_, unknown) = volplane_core::model::parse_manifests(text).unwrap();
        let set = unknown.iter().find(|u| u.kind == "StatefulSet").unwrap();
        let containers = set.value["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        let mut stand_ins = 0;
        for c in containers.iter().filter(|c| c["image"] == "volplane") {
            let words = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w.as_str().unwrap().to_string())
                    .collect()
            };
            let line: Vec<String> = words(&c["command"])
                .into_iter()
                .skip(1)
                .chain(words(&c["args"]))
                .collect();
            let line: Vec<&str> = line.iter().map(String::as_str).collect();
            if let Err(e) = parse(&line) {
                panic!("{}: {line:?}: {e}", c["name"]);
            }
            stand_ins += 1;
        }
        assert_eq!(stand_ins, 6, "registrar, probe and four sidecars");
    }

    #[test]
    fn a_sidecar_stand_in_reads_its_flags_with_upstreams_defaults() {
        let Command::CsiResizer(a) = parse(&["csi-resizer", "-workers=3"]).unwrap().command else {
            panic!("not the resizer");
        };
        assert_eq!(a.worker_threads, Some(3));
        assert_eq!((a.kube_api_qps, a.kube_api_burst), (5.0, 10));
        assert_eq!(a.retry_interval_start, std::time::Duration::from_secs(1));
        assert_eq!(a.retry_interval_max, std::time::Duration::from_secs(300));
        assert!(!a.leader_election);
        let both = parse(&["csi-attacher", "--http-endpoint=:1", "--metrics-address=:2"]);
        assert!(both.is_err(), "only one of the two, as upstream");
        assert!(parse(&["csi-attacher", "--no-such-flag"]).is_err());
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        use crate::controller::duration;
        use std::time::Duration;
        assert_eq!(duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert!(duration("5x").is_err());
        assert!(duration("s").is_err());
        assert!(duration("").is_err());
    }
}
