//! The CSI sidecars' command lines, taken as they are: Go's flag syntax
//! (`-flag`, `-flag=value`, `--flag value`), the sidecars' own names as
//! subcommands (`volplane csi-provisioner …`), and the flags that have no
//! meaning in one Rust process accepted with one warning naming them.

use std::ffi::OsString;

use clap::Args;

/// The sidecar a subcommand stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sidecar {
    /// external-provisioner.
    Provisioner,
    /// external-attacher.
    Attacher,
    /// external-resizer.
    Resizer,
    /// external-snapshotter's csi-snapshotter.
    Snapshotter,
}

impl Sidecar {
    /// The Lease the sidecar takes with `--leader-election`, so that it and
    /// volplane standing in for it never act at once during a cut-over.
    pub fn lease_name(self, driver: &str) -> String {
        let driver = driver.replace('/', "-");
        let name = match self {
            Sidecar::Provisioner => driver,
            Sidecar::Attacher => format!("external-attacher-leader-{driver}"),
            Sidecar::Resizer => format!("external-resizer-{driver}"),
            Sidecar::Snapshotter => format!("external-snapshotter-leader-{driver}"),
        };
        volplane_core::model::names::sanitize(&name)
    }
}

/// The sidecars' diagnostics server flags (csi-lib-utils' standard ones).
#[derive(Debug, Args)]
pub struct HttpFlags {
    /// Serve /metrics (csi_sidecar_operations_seconds, client-go's
    /// workqueue and leader-election metrics…) and /healthz (a Probe of
    /// the driver) here, e.g. `:8080`.
    #[arg(long, conflicts_with = "metrics_address")]
    pub http_endpoint: Option<String>,
    /// The deprecated name of --http-endpoint.
    #[arg(long)]
    pub metrics_address: Option<String>,
    /// Where /metrics is served instead.
    #[arg(long, default_value = "/metrics")]
    pub metrics_path: String,
}

impl HttpFlags {
    /// Where to serve, if anywhere.
    pub fn address(&self) -> Option<&String> {
        self.http_endpoint
            .as_ref()
            .or(self.metrics_address.as_ref())
    }

    /// The process's metrics, served at --metrics-path.
    pub fn metrics(&self) -> std::sync::Arc<volplane_service::metrics::Metrics> {
        volplane_service::metrics::Metrics::at(&self.metrics_path)
    }
}

/// The command line with Go's single-dash long flags (`-csi-address=…`,
/// `-v=5`) spelt as clap reads them (`--csi-address=…`). A lone short
/// flag (`-v`, `-h`) and anything after `--` stay as they are.
pub fn go_flags(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut done = false;
    args.into_iter()
        .map(|a| {
            let Some(s) = a.to_str() else {
                return a;
            };
            if done || s == "--" {
                done = true;
                return a;
            }
            let single = s.starts_with('-') && !s.starts_with("--");
            let name = s[1.min(s.len())..].split('=').next().unwrap_or("");
            let long = name.len() > 1 || s.contains('=');
            if single && long && name.starts_with(|c: char| c.is_ascii_alphabetic()) {
                format!("-{s}").into()
            } else {
                a
            }
        })
        .collect()
}

/// Whether an inert flag takes a value (`--log-dir DIR`) or is a switch
/// (`--logtostderr`, `--logtostderr=false`: Go's switches take no separate
/// value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    Value,
    Switch,
}

/// Flags of the sidecars and their logging that change nothing here:
/// accepted so that their manifests start, and named in one warning.
const INERT: &[(&str, Takes)] = &[
    // klog and component-base logging: volplane logs to stderr, in text.
    ("logtostderr", Takes::Switch),
    ("alsologtostderr", Takes::Switch),
    ("log-dir", Takes::Value),
    ("log-file", Takes::Value),
    ("log-file-max-size", Takes::Value),
    ("stderrthreshold", Takes::Value),
    ("vmodule", Takes::Value),
    ("logging-format", Takes::Value),
    ("log-flush-frequency", Takes::Value),
    ("log-json-info-buffer-size", Takes::Value),
    ("log-json-split-stream", Takes::Switch),
    ("log-text-info-buffer-size", Takes::Value),
    ("log-text-split-stream", Takes::Switch),
    ("add_dir_header", Takes::Switch),
    ("skip_headers", Takes::Switch),
    ("skip_log_headers", Takes::Switch),
    ("one_output", Takes::Switch),
    // Go runtime and profiling.
    ("enable-pprof", Takes::Switch),
    ("automaxprocs", Takes::Switch),
    // volplane's behaviour is the sidecars' with their GA features on.
    ("feature-gates", Takes::Value),
    // Labels for the Lease (volplane does not write them).
    ("leader-election-labels", Takes::Value),
    // Tuning of work the one loop does otherwise.
    ("max-entries", Takes::Value),
    ("reconcile-sync", Takes::Value),
    ("max-grpc-log-length", Takes::Value),
    ("handle-volume-inuse-error", Takes::Switch),
    ("cloning-protection-threads", Takes::Value),
    ("kube-api-capacity-qps", Takes::Value),
    ("kube-api-capacity-burst", Takes::Value),
    ("snapshot-orphan-sweep-interval", Takes::Value),
    ("groupsnapshot-name-prefix", Takes::Value),
    ("groupsnapshot-name-uuid-length", Takes::Value),
    ("retry-crd-interval-max", Takes::Value),
];

/// The subcommands that stand in for a sidecar, and so take its flags.
const STAND_INS: [&str; 9] = [
    "controller",
    "csi-provisioner",
    "csi-attacher",
    "csi-resizer",
    "csi-snapshotter",
    "registrar",
    "node-driver-registrar",
    "csi-node-driver-registrar",
    "livenessprobe",
];

/// The command line as clap reads it ([`go_flags`]), without the inert
/// flags (the `INERT` table) a stand-in was given; and those flags' names,
/// for the one warning.
pub fn command_line(
    args: impl IntoIterator<Item = OsString>,
) -> (Vec<OsString>, Vec<&'static str>) {
    let args = go_flags(args);
    let stand_in = args
        .iter()
        .skip(1)
        .find_map(|a| a.to_str().filter(|a| !a.starts_with('-')))
        .is_some_and(|sub| STAND_INS.contains(&sub));
    if !stand_in {
        return (args, Vec::new());
    }
    let (mut kept, mut inert) = (Vec::with_capacity(args.len()), Vec::new());
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let flag = a.to_str().and_then(|s| s.strip_prefix("--"));
        let (name, valued) = match flag {
            Some(f) => f.split_once('=').map_or((f, false), |(n, _)| (n, true)),
            None => ("", false),
        };
        if a == "--" {
            kept.push(a);
            kept.extend(args);
            break;
        }
        match INERT.iter().find(|(n, _)| *n == name) {
            Some((n, takes)) => {
                inert.push(*n);
                if *takes == Takes::Value && !valued {
                    args.next();
                }
            }
            None => kept.push(a),
        }
    }
    (kept, inert)
}

/// One warning line naming the inert flags given, if any.
pub fn warn_inert(given: &[&str]) {
    if !given.is_empty() {
        tracing::warn!(
            "flags without effect in volplane, accepted for the sidecars' manifests: --{}",
            given.join(", --")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spelt(args: &[&str]) -> Vec<String> {
        go_flags(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn each_sidecar_takes_its_upstream_lease() {
        let d = "hostpath.csi.k8s.io";
        assert_eq!(Sidecar::Provisioner.lease_name(d), "hostpath-csi-k8s-io");
        assert_eq!(
            Sidecar::Attacher.lease_name(d),
            "external-attacher-leader-hostpath-csi-k8s-io"
        );
        assert_eq!(
            Sidecar::Resizer.lease_name(d),
            "external-resizer-hostpath-csi-k8s-io"
        );
        assert_eq!(
            Sidecar::Snapshotter.lease_name("a/b_"),
            "external-snapshotter-leader-a-b-X"
        );
    }

    #[test]
    fn a_stand_ins_inert_flags_are_taken_out_and_named() {
        let (kept, inert) = command_line(
            [
                "volplane",
                "csi-attacher",
                "-v=5",
                "--log-dir",
                "/x",
                "--logtostderr",
                "--enable-pprof=false",
                "--feature-gates=Topology=true",
                "--timeout=1s",
            ]
            .map(OsString::from),
        );
        assert_eq!(kept, ["volplane", "csi-attacher", "--v=5", "--timeout=1s"]);
        assert_eq!(
            inert,
            ["log-dir", "logtostderr", "enable-pprof", "feature-gates"]
        );
        // Only for a stand-in: elsewhere an unknown flag stays, for clap to refuse.
        let (kept, inert) =
            command_line(["volplane", "serve", "--logtostderr"].map(OsString::from));
        assert_eq!(kept.len(), 3);
        assert!(inert.is_empty());
    }

    #[test]
    fn go_single_dash_long_flags_become_double_dash() {
        assert_eq!(
            spelt(&[
                "volplane",
                "csi-resizer",
                "-v=5",
                "-csi-address=/csi/csi.sock",
                "-v",
                "5"
            ]),
            [
                "volplane",
                "csi-resizer",
                "--v=5",
                "--csi-address=/csi/csi.sock",
                "-v",
                "5"
            ]
        );
        assert_eq!(
            spelt(&["--leader-election", "-h", "--", "-x=1", "-", "-5"]),
            ["--leader-election", "-h", "--", "-x=1", "-", "-5"]
        );
    }
}
