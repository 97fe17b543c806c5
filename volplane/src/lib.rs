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
//! | [`Backend::lookup_volume`], [`Backend::lookup_snapshot`] | with `Features::lookup`, for an id the journal lacks | say what the storage holds under that id |
//! | [`Backend::list_volumes`], [`Backend::list_snapshots`] | with `Features::list` | a page of the storage's volumes or snapshots |
//!
//! Staging (format if empty, mount), publishing (bind mount), unpublishing,
//! unstaging, NodeGetVolumeStats and node expansion have defaults that work
//! on whatever [`Backend::node_source`] names; override them only for
//! storage that needs more.
//!
//! **The crash contract.** volplane records every operation before it
//! calls your backend and its outcome after. When the process dies in
//! between (a crash, `kill -9`), the next start calls the same method
//! again with the same plan before serving anything new. So every method
//! must be *idempotent*: called for work that already (partly) happened,
//! it finishes it and succeeds. Create by name, delete what is there,
//! never fail because something already exists or is already gone — and
//! answer a create repeated for a name with the *same* volume (the same
//! id): volplane answers a successful operation as soon as its record of
//! the operation is durable, writing the outcome with the next commit, so
//! a crash in between is made good by calling your method again (one
//! commit per operation, not two). After a node reboot (a new boot id),
//! the node's stages and publishes are gone with their mounts: node
//! operations that were in flight are not called again, and the kubelet
//! stages and publishes again what it still needs.
//!
//! Secrets are never written down. An operation whose request carried
//! secrets is therefore *not* called again at start (it would reach your
//! storage without its credentials): it keeps its volume's lock, is logged
//! once by name ("in flight at the last stop with credentials … waits for
//! the CO's retry"), and is finished with the credentials of the CO's retry
//! of that call, which Kubernetes' sidecars always send. Other volumes do
//! not wait for it. The CO may have moved on instead (the pod went, the
//! attachment is no longer wanted): any other call on that volume that
//! carries secrets — the call that undoes the parked one, or the next one —
//! first finishes the parked operation with *its* secrets (they are the
//! same volume's, from the same Secret), then is decided against what that
//! left. A NodeUnpublishVolume (NodeUnstageVolume) of the path a parked
//! NodePublishVolume (NodeStageVolume) was for carries no secrets: it takes
//! the parked operation's place and unmounts whatever the crashed call may
//! have mounted. Only a call without secrets that cannot do either is
//! answered ABORTED, saying what the volume waits for. Operations whose
//! requests carried no secrets are called again at once, as above.
//!
//! ## Storage that is the truth (cloud disks, SANs, Ceph, NAS appliances)
//!
//! volplane's journal (the state directory) records *intents* — what is in
//! flight and what was promised — not the inventory. For remote storage the
//! controller runs as a Deployment whose pod is rescheduled with an empty
//! directory, a second replica takes over, volumes are provisioned
//! statically: the storage is the authority.
//!
//! * A DeleteVolume or DeleteSnapshot of an id the journal does not hold
//!   goes to [`Backend::delete_volume`] / [`Backend::delete_snapshot`],
//!   given the id alone: delete what the storage holds under it, and
//!   succeed when it holds nothing. Check the id is of the form you give
//!   out first (a hostile caller chooses it).
//! * With `Features::lookup`, every other request naming an id the journal
//!   lacks (get, publish, unpublish, expand, validate, modify, snapshot of,
//!   restore and clone from) first calls [`Backend::lookup_volume`] or
//!   [`Backend::lookup_snapshot`]; what you return is adopted into the
//!   journal and served as if this process had made it; NOT_FOUND is
//!   answered only when you return `None`. Report what the storage keeps
//!   in [`StoredVolume`] (the name, parameters and capabilities — all or
//!   none — and the nodes the volume is attached to).
//! * With `Features::list`, ListVolumes and ListSnapshots list the storage
//!   ([`Backend::list_volumes`], [`Backend::list_snapshots`]), with your
//!   own page tokens.
//! * **Transient failures.** Answer UNAVAILABLE (or DEADLINE_EXCEEDED) when
//!   the storage cannot be reached or is busy: nothing is recorded as done,
//!   and Kubernetes' sidecars retry with exponential backoff. ABORTED means
//!   "another operation on this volume is running, retry"; RESOURCE_EXHAUSTED
//!   means "no space or quota here" (the provisioner may try elsewhere).
//!   Never answer OK for work you could not confirm. [`host_status`]
//!   answers UNAVAILABLE for a device or mount another process holds for
//!   now (`HostError::Busy`, EBUSY); the tools volplane runs (mkfs,
//!   resize2fs, e2fsck) die with the driver, so a killed driver's mkfs
//!   does not hold the device from its successor.
//! * **Answers are checked** before they reach the CO: a volume outside the
//!   capacity range or the requisite topology asked for, an expansion short
//!   of `required_bytes`, a lookup answering for another id are INTERNAL
//!   errors naming your method and what it returned.
//! * **Fencing.** A call of a killed process may still be in flight at the
//!   storage when its successor starts, and land after the successor has
//!   finished — a create arriving after the CO deleted what the retry
//!   made leaves an orphan nobody sees. [`NodeHost::incarnation`] is a
//!   fencing token: recorded durably at every start before anything is
//!   served, larger than every earlier process's. Pass it with every
//!   change you make at the storage and have the storage refuse a change
//!   from an incarnation older than the newest it has seen. Where the
//!   storage cannot keep a number, make creates find-or-create by name
//!   (the CO's name is stable) and have deletes remove by name too.
//!   `examples/remote-appliance` sends it as `X-Incarnation` on every change,
//!   and its appliance refuses an older one under the same lock as the
//!   change itself, after any wait (a late request is judged when it acts).
//! * **Node-side attach** (an iSCSI login, an NVMe connect, a loop device on
//!   the node) belongs in [`Backend::node_stage`] before the default
//!   staging, and its undo in [`Backend::node_unstage`]; prove in
//!   [`Backend::node_source`] that the device is the volume's.
//! * **Runtimes.** Backend futures run on the runtime the driver serves on:
//!   tokio by default (so tokio-based clients such as reqwest work); with
//!   `Runtime::Smol` there is no tokio runtime in the process. A client that
//!   blocks (a synchronous SDK, plain `std::net`) runs on
//!   [`NodeHost::blocking`], on either runtime.
//! * **Credentials the CO does not send.** ListVolumes and
//!   ControllerGetVolume carry no secrets in CSI: a lookup or listing needs
//!   the driver's own credential (a flag of its own, such as a token file:
//!   see [`Flags::parse_known`]), ideally one that can only read.
//!
//! Which access modes the storage allows is declared once:
//! `Features::multi_node` for the MULTI_NODE_* modes (refused with
//! INVALID_ARGUMENT before your backend is called otherwise), and
//! `Features::block` for raw block volumes.
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
//!         // The id is the caller's: only one this driver makes names storage.
//!         if !is_ours(&v.volume_id) {
//!             return Ok(());
//!         }
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
//! /// True for the ids `volume_id` makes, and nothing else.
//! fn is_ours(id: &str) -> bool {
//!     id.strip_prefix("dir-")
//!         .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
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
//! `--http-endpoint`, and `--controller` or `--node` for a Deployment's or a
//! DaemonSet's half): `Driver::new(…).flags(&Flags::from_env()?)`. A driver
//! with flags of its own takes volplane's out with [`Flags::parse_known`]
//! and parses the rest itself (by hand or with clap's `try_parse_from`).
//!
//! Volume ids go back and forth through Kubernetes: at most 128 bytes,
//! no control characters, no `..` (volplane refuses a CreateVolume whose
//! backend made any other, rather than hand out a volume no one could
//! delete). A real driver also records what it promised (the size) and
//! checks on the node that the volume is its own: see
//! `examples/quota-dirs` in the repository, a complete driver in 139
//! lines, `examples/loop-block` for block storage, and
//! `examples/remote-appliance` for storage that is the truth: an HTTP
//! appliance with bearer tokens from the request's secrets, busy and slow
//! answers, the incarnation fence, and node-side attach.
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
//! - `testing::check::Check`: `volplane check` as a library — runs of
//!   generated calls, concurrent and across restarts, judged against the
//!   CSI spec's rules, including the storage side: a driver that lists
//!   holds nothing after a run's teardown that it did not hold before.
//!
//! A driver that needs credentials gets them per call (`Lifecycle::secrets`,
//! `Check::secrets`, `volplane check --secrets FILE`), in csi-sanity's
//! secrets-file format (`testing::secrets_file`); a raw block driver runs
//! `Lifecycle::block`. A call answered UNAVAILABLE, ABORTED or
//! DEADLINE_EXCEEDED is tried again, as a CO does. Failures are
//! `testing::Error`: a refused call carries its `Code`.
//!
//! `testing::DriverProcess` runs the binary (a command, or a closure that
//! captures what else it needs) in a directory of its own and restarts it;
//! mounting needs root (`testing::may_mount`). What a run made is put away
//! whether it passes or fails, and a `DriverProcess` dropped while a test
//! panics unmounts and detaches what is left beneath its directory. The
//! examples' `tests/driver.rs` show all of it.

#![deny(missing_docs)]

mod driver;
mod flags;
mod run;
#[cfg(feature = "testing")]
pub mod testing;

pub use driver::{Driver, Runtime};
pub use flags::{Flags, USAGE};

pub use volplane_core::driver::{
    AccessMode, AccessType, Attributes, Capability, CapacityRange, ContentSource, CreatePlan,
    DriverConfig, Features, GroupPlan, GroupSnapshot, Outcome, Plan, PublishPlan, Secrets,
    Snapshot, SnapshotPage, SnapshotPlan, Source, StagePlan, StoredVolume, Timestamp, Topology,
    TopologyRequirement, Volume, VolumeCondition, VolumePage, VolumeUsage,
};
pub use volplane_core::{Code, Status};
pub use volplane_host::{Host, HostError};
pub use volplane_service::{
    Backend, CapacityInfo, DEVICE_KEY, NodeHost, NodePlan, NodeSource, SnapshotQuery, host_status,
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
