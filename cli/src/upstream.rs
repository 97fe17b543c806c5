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

/// Flags of the sidecars and their logging that change nothing here:
/// accepted so that their manifests start, and named in one warning.
#[derive(Debug, Default, Args)]
#[command(next_help_heading = "Accepted from the sidecars' manifests, without effect")]
pub struct Inert {
    /// klog/component-base logging: volplane logs to stderr, in text.
    #[arg(long, value_name = "…", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    logtostderr: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    alsologtostderr: Option<String>,
    #[arg(long, hide = true)]
    log_dir: Option<String>,
    #[arg(long, hide = true)]
    log_file: Option<String>,
    #[arg(long, hide = true)]
    log_file_max_size: Option<String>,
    #[arg(long, hide = true)]
    stderrthreshold: Option<String>,
    #[arg(long, hide = true)]
    vmodule: Option<String>,
    #[arg(long, hide = true)]
    logging_format: Option<String>,
    #[arg(long, hide = true)]
    log_flush_frequency: Option<String>,
    #[arg(long, hide = true)]
    log_json_info_buffer_size: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    log_json_split_stream: Option<String>,
    #[arg(long, hide = true)]
    log_text_info_buffer_size: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    log_text_split_stream: Option<String>,
    #[arg(long = "add_dir_header", hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    add_dir_header: Option<String>,
    #[arg(long = "skip_headers", hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    skip_headers: Option<String>,
    #[arg(long = "skip_log_headers", hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    skip_log_headers: Option<String>,
    #[arg(long = "one_output", hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    one_output: Option<String>,
    /// Go runtime and profiling switches.
    #[arg(long, value_name = "…", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    enable_pprof: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    automaxprocs: Option<String>,
    /// Feature gates: volplane's behaviour is that of the sidecars with
    /// their GA features on (see the README).
    #[arg(long, value_name = "…")]
    feature_gates: Option<String>,
    /// Labels for the Lease (not written by volplane).
    #[arg(long, value_name = "…")]
    leader_election_labels: Option<String>,
    /// Tuning of work the one loop does otherwise.
    #[arg(long, value_name = "…")]
    max_entries: Option<String>,
    #[arg(long, hide = true)]
    reconcile_sync: Option<String>,
    #[arg(long, hide = true)]
    max_grpc_log_length: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    handle_volume_inuse_error: Option<String>,
    #[arg(long, hide = true)]
    cloning_protection_threads: Option<String>,
    #[arg(long, hide = true)]
    kube_api_capacity_qps: Option<String>,
    #[arg(long, hide = true)]
    kube_api_capacity_burst: Option<String>,
    #[arg(long, hide = true)]
    snapshot_orphan_sweep_interval: Option<String>,
    #[arg(long, hide = true)]
    groupsnapshot_name_prefix: Option<String>,
    #[arg(long, hide = true)]
    groupsnapshot_name_uuid_length: Option<String>,
    #[arg(long, hide = true)]
    retry_crd_interval_max: Option<String>,
}

impl Inert {
    /// The flags given, by name.
    pub fn given(&self) -> Vec<&'static str> {
        let all = [
            ("logtostderr", self.logtostderr.is_some()),
            ("alsologtostderr", self.alsologtostderr.is_some()),
            ("log-dir", self.log_dir.is_some()),
            ("log-file", self.log_file.is_some()),
            ("log-file-max-size", self.log_file_max_size.is_some()),
            ("stderrthreshold", self.stderrthreshold.is_some()),
            ("vmodule", self.vmodule.is_some()),
            ("logging-format", self.logging_format.is_some()),
            ("log-flush-frequency", self.log_flush_frequency.is_some()),
            (
                "log-json-info-buffer-size",
                self.log_json_info_buffer_size.is_some(),
            ),
            (
                "log-json-split-stream",
                self.log_json_split_stream.is_some(),
            ),
            (
                "log-text-info-buffer-size",
                self.log_text_info_buffer_size.is_some(),
            ),
            (
                "log-text-split-stream",
                self.log_text_split_stream.is_some(),
            ),
            ("add_dir_header", self.add_dir_header.is_some()),
            ("skip_headers", self.skip_headers.is_some()),
            ("skip_log_headers", self.skip_log_headers.is_some()),
            ("one_output", self.one_output.is_some()),
            ("enable-pprof", self.enable_pprof.is_some()),
            ("automaxprocs", self.automaxprocs.is_some()),
            ("feature-gates", self.feature_gates.is_some()),
            (
                "leader-election-labels",
                self.leader_election_labels.is_some(),
            ),
            ("max-entries", self.max_entries.is_some()),
            ("reconcile-sync", self.reconcile_sync.is_some()),
            ("max-grpc-log-length", self.max_grpc_log_length.is_some()),
            (
                "handle-volume-inuse-error",
                self.handle_volume_inuse_error.is_some(),
            ),
            (
                "cloning-protection-threads",
                self.cloning_protection_threads.is_some(),
            ),
            (
                "kube-api-capacity-qps",
                self.kube_api_capacity_qps.is_some(),
            ),
            (
                "kube-api-capacity-burst",
                self.kube_api_capacity_burst.is_some(),
            ),
            (
                "snapshot-orphan-sweep-interval",
                self.snapshot_orphan_sweep_interval.is_some(),
            ),
            (
                "groupsnapshot-name-prefix",
                self.groupsnapshot_name_prefix.is_some(),
            ),
            (
                "groupsnapshot-name-uuid-length",
                self.groupsnapshot_name_uuid_length.is_some(),
            ),
            (
                "retry-crd-interval-max",
                self.retry_crd_interval_max.is_some(),
            ),
        ];
        all.into_iter()
            .filter(|(_, on)| *on)
            .map(|(n, _)| n)
            .collect()
    }

    /// One warning line naming the flags given, if any.
    pub fn warn(&self) {
        let given = self.given();
        if !given.is_empty() {
            tracing::warn!(
                "flags without effect in volplane, accepted for the sidecars' manifests: --{}",
                given.join(", --")
            );
        }
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
