//! # volplane: a Kubernetes CSI driver in Rust
//!
//! You implement one trait, [`Backend`], for your storage. volplane turns
//! it into a whole CSI driver process: the gRPC services on a unix socket
//! (Identity, Controller, Node, GroupController), every request validated
//! against the CSI spec before your code sees it, operations serialised per
//! volume, stage and publish bookkeeping, state kept crash-safe on disk,
//! bounded resources under hostile clients, `/metrics` and `/healthz`.
//!
//! ## What you implement
//!
//! | method | when it is called | must |
//! |---|---|---|
//! | [`Backend::create_volume`] | CreateVolume | return the same volume for the same `plan.name` |
//! | [`Backend::delete_volume`] | DeleteVolume | succeed when the volume is already gone |
//! | [`Backend::node_source`] | NodeStage, NodePublish, NodeUnstage… | say which device or directory holds the volume on this node, checking it is yours |
//! | [`Backend::features`] | at start | declare what else you do; only that is advertised |
//! | [`Backend::controller_publish`], [`Backend::controller_unpublish`] | with `Features::attach` | attach the volume to a node; return the publish context |
//! | [`Backend::controller_expand`] | with `Features::expand` | grow the volume; say if the node must grow its filesystem |
//! | [`Backend::get_capacity`] | with `Features::capacity` | report free space |
//! | [`Backend::create_snapshot`], [`Backend::delete_snapshot`] | with `Features::snapshots` | cut and delete snapshots |
//!
//! Staging (format if empty, mount), publishing (bind mount), unpublishing,
//! unstaging, NodeGetVolumeStats and node expansion have defaults that work
//! on whatever [`Backend::node_source`] names; override them only for
//! storage that needs more.
//!
//! **The crash contract.** volplane records every operation before it
//! calls your backend and its outcome after. When the process dies in
//! between (a crash, `kill -9`, a node reboot), the next start calls the
//! same method again with the same plan before serving anything new. So
//! every method must be *idempotent*: called for work that already
//! (partly) happened, it finishes it and succeeds. Create by name, delete
//! what is there, never fail because something already exists or is
//! already gone.
//!
//! **Paths.** Every method gets a [`NodeHost`]: file and mount operations
//! confined to the kubelet directory and the driver's storage directories
//! ([`Driver::storage_dir`]), resolved by descriptor, never following a
//! link. A path outside them is refused before anything happens.
//!
//! ## A whole driver
//!
//! A directory per volume, under one storage directory:
//!
//! ```no_run
//! use std::path::PathBuf;
//! use volplane::{Backend, CreatePlan, Driver, NodeHost, NodeSource, Secrets, Status, Volume};
//! use volplane::{Attributes, host_status};
//!
//! struct Dirs(PathBuf);
//!
//! impl Backend for Dirs {
//!     async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
//!         let id = volume_id(&plan.name);
//!         let path = self.0.join(&id);
//!         host.run(move |h| h.create_dir(&path).map(|_| ()))
//!             .await
//!             .map_err(|e| host_status(&format!("create volume {}", plan.name), e))?;
//!         Ok(Volume {
//!             volume_id: id,
//!             capacity_bytes: plan.suggested_bytes,
//!             volume_context: Attributes::new(),
//!             accessible_topology: vec![],
//!             content_source: None,
//!         })
//!     }
//!
//!     async fn delete_volume(&self, host: &NodeHost, v: &Volume, _: &Secrets) -> Result<(), Status> {
//!         let path = self.0.join(&v.volume_id);
//!         host.run(move |h| h.remove_tree(&path))
//!             .await
//!             .map_err(|e| host_status(&format!("delete volume {}", v.volume_id), e))
//!     }
//!
//!     async fn node_source(
//!         &self,
//!         _host: &NodeHost,
//!         volume_id: &str,
//!         _publish_context: &Attributes,
//!         _volume_context: &Attributes,
//!     ) -> Result<NodeSource, Status> {
//!         Ok(NodeSource::Directory(self.0.join(volume_id)))
//!     }
//! }
//!
//! /// The same name, the same id; short, and safe as a file name (FNV-1a).
//! fn volume_id(name: &str) -> String {
//!     let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
//!         (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
//!     });
//!     format!("dir-{hash:016x}")
//! }
//!
//! fn main() -> Result<(), volplane::Error> {
//!     volplane::init_logging("info");
//!     let storage = PathBuf::from("/var/lib/dirs.example.com/volumes");
//!     Driver::new("dirs.example.com", Dirs(storage.clone()))
//!         .version(env!("CARGO_PKG_VERSION"))
//!         .storage_dir(storage)
//!         .serve()
//! }
//! ```
//!
//! [`Flags`] gives a driver the flags every volplane driver takes
//! (`--endpoint`, `--node-id`, `--state-dir`, `--kubelet-dir`,
//! `--http-endpoint`): `Driver::new(…).flags(&Flags::from_env()?)`.
//!
//! Volume ids go back and forth through Kubernetes: at most 128 bytes,
//! no control characters, no `..` (volplane refuses a CreateVolume whose
//! backend made any other, rather than hand out a volume no one could
//! delete). A real driver also records what it promised (the size) and
//! checks on the node that the volume is its own: see
//! `examples/quota-dirs` in the repository, a complete driver in 139
//! lines, and `examples/loop-block` for block storage.
//!
//! ## Testing your driver
//!
//! With the `testing` feature (a dev-dependency), `volplane::testing`
//! drives your driver's binary as the kubelet would, in your own
//! `cargo test`:
//!
//! - `testing::Lifecycle::run`: create, attach, stage, publish to two
//!   pods, write through one and read through the other, and back down —
//!   every call sent twice, as a CO retries;
//! - `testing::Lifecycle::run_restarting`: the same with the driver
//!   killed (SIGKILL) and started again between every two steps;
//! - `testing::Lifecycle::run_hostile`: paths that leave the kubelet
//!   directory, by `..` or a symbolic link, are refused and touch nothing;
//! - `testing::csi_sanity`: csi-sanity (kubernetes-csi/csi-test) against
//!   it, with the reasons for every skipped spec, to check they are only
//!   what you did not declare.
//!
//! `testing::DriverProcess` runs the binary in a directory of its own and
//! restarts it; mounting needs root (`testing::may_mount`). The examples'
//! `tests/driver.rs` show all of it in under 110 lines.

#![deny(missing_docs)]

mod driver;
mod flags;
#[cfg(feature = "testing")]
mod hostile;
#[cfg(feature = "testing")]
mod lifecycle;
mod run;
#[cfg(feature = "testing")]
pub mod testing;

pub use driver::{Driver, Runtime};
pub use flags::{Flags, USAGE};

pub use volplane_core::driver::{
    AccessMode, AccessType, Attributes, Capability, CapacityRange, ContentSource, CreatePlan,
    DriverConfig, Features, GroupPlan, GroupSnapshot, Outcome, Plan, PublishPlan, Secrets,
    Snapshot, SnapshotPlan, Source, StagePlan, Topology, TopologyRequirement, Volume,
    VolumeCondition, VolumeUsage,
};
pub use volplane_core::{Code, Status};
pub use volplane_host::{Host, HostError};
pub use volplane_service::{
    Backend, CapacityInfo, DEVICE_KEY, NodeHost, NodePlan, NodeSource, host_status,
};

/// Logs to stderr as Kubernetes components do: one line per event, plain
/// text unless a person is at the terminal. `VOLPLANE_LOG` (`info`,
/// `debug`, `volplane=debug,warn`…) overrides `default`. Call it once,
/// first thing in `main`.
pub fn init_logging(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("VOLPLANE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Why a driver could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work (a relative path, nested directories,
    /// a state directory another process holds, a runtime that would not
    /// start).
    #[error("{0}")]
    Setup(String),
    /// Serving stopped: the socket, the state store, the signals.
    #[error(transparent)]
    Serve(#[from] volplane_service::ServeError),
}
