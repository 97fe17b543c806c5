//! The trait driver authors implement for their storage.

use std::future::Future;

use volplane_core::Status;
use volplane_core::driver::{
    Attributes, Capability, CapacityRange, CreatePlan, Features, GroupPlan, GroupSnapshot, Outcome,
    Plan, PublishPlan, Secrets, Snapshot, SnapshotPage, SnapshotPlan, StagePlan, StoredVolume,
    Topology, Volume, VolumeCondition, VolumePage, VolumeUsage,
};

use crate::{NodeHost, NodeSource};

/// Free capacity, for GetCapacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapacityInfo {
    /// Bytes free for new volumes.
    pub available_bytes: u64,
    /// The largest volume that could be made now, when it is less than that.
    pub maximum_volume_size: Option<u64>,
    /// The smallest volume the backend makes, if it has a floor.
    pub minimum_volume_size: Option<u64>,
}

/// A driver's storage. Every method gets the [`NodeHost`]: host operations
/// confined to the configured roots, run on the runtime's blocking pool.
///
/// volplane validates every request, serialises
/// operations per volume, keeps stage/publish bookkeeping and persists state;
/// a backend only carries out plans.
///
/// **Every method must be idempotent**: after a crash, volplane carries out
/// again whatever plan was in flight, so a method may be called for work that
/// already (partly) happened, and must then finish it and succeed.
///
/// Node methods default to [`NodeHost`]'s behaviour on the device or
/// directory [`Backend::node_source`] proves holds the volume: stage formats
/// a device only if empty and mounts it (or binds a directory); publish
/// bind-mounts; unpublish unmounts and removes the target. The default
/// `node_source` refuses, so a backend stages nothing until it says where
/// its volumes are.
pub trait Backend: Send + Sync + 'static {
    /// What this backend does beyond creating, deleting, staging and
    /// publishing volumes: volplane advertises exactly that and calls no
    /// method for a capability it lacks. A backend that overrides
    /// [`Backend::controller_publish`], [`Backend::controller_expand`],
    /// [`Backend::get_capacity`], [`Backend::create_snapshot`]… says so
    /// here. Nothing by default.
    fn features(&self) -> Features {
        Features::default()
    }

    /// Creates storage for `plan.name` (the same volume when called again for
    /// the same name) with a size admitted by `plan.capacity`, or
    /// `plan.suggested_bytes` when the range leaves it open. When
    /// `plan.source` is set, the volume starts as a copy of that snapshot or
    /// volume (the driver's own record of it, checked to exist).
    fn create_volume(
        &self,
        host: &NodeHost,
        plan: &CreatePlan,
    ) -> impl Future<Output = Result<Volume, Status>> + Send;

    /// Deletes the volume's storage; a volume already gone is success.
    fn delete_volume(
        &self,
        host: &NodeHost,
        volume: &Volume,
        secrets: &Secrets,
    ) -> impl Future<Output = Result<(), Status>> + Send;

    /// Makes the volume available to `node_id`; returns the publish context
    /// that NodeStage and NodePublish will receive.
    fn controller_publish(
        &self,
        _host: &NodeHost,
        volume: &Volume,
        node_id: &str,
        _capability: &Capability,
        _readonly: bool,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<Attributes, Status>> + Send {
        let msg = format!(
            "volume {} to node {node_id}: this backend does not attach volumes (Features::attach)",
            volume.volume_id
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// Unpublishes from `node_id`; the volume stays published to
    /// `still_published`.
    fn controller_unpublish(
        &self,
        _host: &NodeHost,
        volume: &Volume,
        node_id: &str,
        _still_published: &[String],
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        let msg = format!(
            "volume {} from node {node_id}: this backend does not attach volumes (Features::attach)",
            volume.volume_id
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// Grows the volume; returns the new capacity and whether the node must
    /// grow the filesystem too.
    fn controller_expand(
        &self,
        _host: &NodeHost,
        volume: &Volume,
        _capacity: CapacityRange,
        _capability: Option<&Capability>,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<(u64, bool), Status>> + Send {
        let msg = format!(
            "volume {}: this backend does not expand volumes (Features::expand)",
            volume.volume_id
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// Applies mutable parameters (ControllerModifyVolume). The default
    /// refuses: advertise MODIFY_VOLUME only when overriding it.
    fn controller_modify(
        &self,
        _host: &NodeHost,
        volume: &Volume,
        mutable_parameters: &Attributes,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        let msg = format!(
            "volume {}: mutable parameters {:?} are not supported by this backend",
            volume.volume_id,
            mutable_parameters.keys().collect::<Vec<_>>()
        );
        async move { Err(Status::invalid(msg)) }
    }

    /// Cuts a snapshot of `plan.source` named `plan.name` (the same snapshot
    /// when called again for the same name), saying whether it is ready to
    /// use yet; asked again while it is not, it reports progress. The
    /// default refuses: say `snapshots` in [`Backend::features`] when
    /// overriding it.
    fn create_snapshot(
        &self,
        _host: &NodeHost,
        plan: &SnapshotPlan,
    ) -> impl Future<Output = Result<Snapshot, Status>> + Send {
        let msg = format!(
            "snapshot {:?} of volume {}: this backend cannot take snapshots",
            plan.name, plan.source.volume_id
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// Deletes the snapshot; one already gone is success.
    fn delete_snapshot(
        &self,
        _host: &NodeHost,
        snapshot: &Snapshot,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        let msg = format!(
            "snapshot {}: this backend cannot take snapshots",
            snapshot.snapshot_id
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// Cuts snapshots of every volume of `plan.sources` at one point in
    /// time, named `plan.name` (the same group when called again for the
    /// same name): every member or none, each naming the group. The default
    /// refuses: say `group_snapshots` in [`Backend::features`] when
    /// overriding it.
    fn create_group_snapshot(
        &self,
        _host: &NodeHost,
        plan: &GroupPlan,
    ) -> impl Future<Output = Result<GroupSnapshot, Status>> + Send {
        let msg = format!(
            "group snapshot {:?}: this backend cannot take group snapshots",
            plan.name
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// Deletes the group and every member; one already gone is success.
    fn delete_group_snapshot(
        &self,
        _host: &NodeHost,
        group: &GroupSnapshot,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        let msg = format!(
            "group snapshot {}: this backend cannot take group snapshots",
            group.group_snapshot_id
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// What the storage holds under volume id `volume_id`, or `None` when
    /// it holds nothing there. Called (with `Features::lookup`) for a
    /// request naming a volume the journal does not hold: a controller
    /// started on a new state directory, a second replica, a statically
    /// provisioned volume. What it finds is adopted and served as if this
    /// process had made it.
    ///
    /// The id comes from the caller: check it is of the form your storage
    /// gives out before using it (a lookup of an id the storage never made
    /// answers `None` and has no effect). `secrets` are the request's.
    fn lookup_volume(
        &self,
        _host: &NodeHost,
        volume_id: &str,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<Option<StoredVolume>, Status>> + Send {
        let msg =
            format!("volume {volume_id}: this backend does not look volumes up (Features::lookup)");
        async move { Err(Status::unimplemented(msg)) }
    }

    /// A page of the storage's volumes from `starting_token` (empty: the
    /// start), at most `max_entries` (0: as many as you like), with the
    /// token of the next page (empty after the last). Tokens are yours;
    /// one handed out must go on naming the same place; one you did not
    /// hand out is refused with ABORTED. Called with `Features::list`.
    fn list_volumes(
        &self,
        _host: &NodeHost,
        _starting_token: &str,
        _max_entries: u32,
    ) -> impl Future<Output = Result<VolumePage, Status>> + Send {
        async move {
            Err(Status::unimplemented(
                "ListVolumes: this backend does not list volumes (Features::list)",
            ))
        }
    }

    /// What the storage holds under snapshot id `snapshot_id` (`None`:
    /// nothing), as [`Backend::lookup_volume`] for volumes.
    fn lookup_snapshot(
        &self,
        _host: &NodeHost,
        snapshot_id: &str,
        _secrets: &Secrets,
    ) -> impl Future<Output = Result<Option<Snapshot>, Status>> + Send {
        let msg = format!(
            "snapshot {snapshot_id}: this backend does not look snapshots up (Features::lookup)"
        );
        async move { Err(Status::unimplemented(msg)) }
    }

    /// A page of the storage's snapshots, only those of `source_volume_id`
    /// and only `snapshot_id` when they are not empty, as
    /// [`Backend::list_volumes`] for volumes.
    fn list_snapshots(
        &self,
        _host: &NodeHost,
        _query: &SnapshotQuery<'_>,
    ) -> impl Future<Output = Result<SnapshotPage, Status>> + Send {
        async move {
            Err(Status::unimplemented(
                "ListSnapshots: this backend does not list snapshots (Features::list)",
            ))
        }
    }

    /// Free capacity for volumes with these parameters.
    fn get_capacity(
        &self,
        _host: &NodeHost,
        _parameters: &Attributes,
        _capabilities: &[Capability],
        _topology: Option<&Topology>,
    ) -> impl Future<Output = Result<CapacityInfo, Status>> + Send {
        async move {
            Err(Status::unimplemented(
                "GetCapacity: this backend does not report capacity (Features::capacity)",
            ))
        }
    }

    /// Where volume `volume_id`'s data is on this node: the device or
    /// directory the node side may format, mount and bind, and nothing else.
    ///
    /// This is where a backend **proves the volume is its own**: the
    /// contexts come from the caller and are hints at most (a device named
    /// in `publish_context` must be checked to hold this volume, a
    /// directory must come from the backend's own records or layout).
    /// Answer NOT_FOUND for a volume this backend does not hold here, and
    /// FAILED_PRECONDITION when it is not attached to this node yet.
    ///
    /// The default refuses, so a backend that does not override it never
    /// mounts anything a caller names.
    fn node_source(
        &self,
        _host: &NodeHost,
        volume_id: &str,
        _publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> impl Future<Output = Result<NodeSource, Status>> + Send {
        let msg = format!(
            "volume {volume_id}: this driver's backend does not say which device or directory holds its volumes (Backend::node_source), so it stages and publishes nothing"
        );
        async move { Err(Status::failed_precondition(msg)) }
    }

    /// [`Backend::node_source`] for the volume a stage or publish plan is for.
    fn plan_source<P: NodePlan>(
        &self,
        host: &NodeHost,
        plan: &P,
    ) -> impl Future<Output = Result<NodeSource, Status>> + Send {
        let (id, publish_context, volume_context) = plan.contexts();
        self.node_source(host, id, publish_context, volume_context)
    }

    /// Stages the volume: formats its device if empty and mounts it, or
    /// binds its directory, at the staging path ([`NodeHost::stage`]).
    fn node_stage(
        &self,
        host: &NodeHost,
        plan: &StagePlan,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        async move {
            let source = self.plan_source(host, plan).await?;
            host.stage(plan, source).await
        }
    }

    /// Unmounts the staging path (only a mount of this volume's source).
    fn node_unstage(
        &self,
        host: &NodeHost,
        plan: &StagePlan,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        async move {
            let source = self.plan_source(host, plan).await.ok();
            host.unstage(plan, source).await
        }
    }

    /// Publishes the staged volume (or its device, for raw block) at the
    /// target ([`NodeHost::publish`]).
    fn node_publish(
        &self,
        host: &NodeHost,
        plan: &PublishPlan,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        async move {
            let source = self.plan_source(host, plan).await?;
            host.publish(plan, source).await
        }
    }

    /// Unmounts the target (only a mount of this volume) and removes it.
    fn node_unpublish(
        &self,
        host: &NodeHost,
        plan: &PublishPlan,
    ) -> impl Future<Output = Result<(), Status>> + Send {
        async move {
            let source = self.plan_source(host, plan).await.ok();
            host.unpublish(plan, source).await
        }
    }

    /// Grows the filesystem (or nothing, for raw block); returns the size.
    fn node_expand(
        &self,
        host: &NodeHost,
        volume_id: &str,
        publish_context: &Attributes,
        volume_context: &Attributes,
        mount_point: &str,
        block: bool,
    ) -> impl Future<Output = Result<u64, Status>> + Send {
        async move {
            let source = self
                .node_source(host, volume_id, publish_context, volume_context)
                .await?;
            host.expand(source, mount_point, block).await
        }
    }

    /// NodeGetVolumeStats: space and inodes on the volume published or staged at `volume_path` (raw block when `block`), and its condition. The default asks the filesystem (or the device) there.
    fn volume_stats(
        &self,
        host: &NodeHost,
        _volume_id: &str,
        volume_path: &str,
        block: bool,
    ) -> impl Future<Output = Result<(VolumeUsage, Option<VolumeCondition>), Status>> + Send {
        async move {
            Ok((
                host.usage(volume_path, block).await?,
                Some(VolumeCondition::default()),
            ))
        }
    }
}

/// Which snapshots a ListSnapshots asks for.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotQuery<'a> {
    /// Where the page starts (empty: from the start).
    pub starting_token: &'a str,
    /// At most this many (0: as many as the backend likes).
    pub max_entries: u32,
    /// Only snapshots of this volume (empty: any).
    pub source_volume_id: &'a str,
    /// Only this snapshot (empty: any).
    pub snapshot_id: &'a str,
    /// The lister's secrets.
    pub secrets: &'a Secrets,
}

/// A node plan's volume and the contexts its caller sent.
pub trait NodePlan: Sync {
    /// The volume id, publish context and volume context of the plan.
    fn contexts(&self) -> (&str, &Attributes, &Attributes);
}

impl NodePlan for StagePlan {
    fn contexts(&self) -> (&str, &Attributes, &Attributes) {
        (&self.volume_id, &self.publish_context, &self.volume_context)
    }
}

impl NodePlan for PublishPlan {
    fn contexts(&self) -> (&str, &Attributes, &Attributes) {
        (&self.volume_id, &self.publish_context, &self.volume_context)
    }
}

/// Carries out one plan through `backend`.
pub async fn execute<B: Backend>(
    backend: &B,
    host: &NodeHost,
    plan: &Plan,
) -> Result<Outcome, Status> {
    match plan {
        Plan::CreateSnapshot(_)
        | Plan::DeleteSnapshot { .. }
        | Plan::CreateGroupSnapshot(_)
        | Plan::DeleteGroupSnapshot { .. } => snapshot_plan(backend, host, plan).await,
        Plan::Stage(_)
        | Plan::Unstage(_)
        | Plan::Publish(_)
        | Plan::Unpublish(_)
        | Plan::NodeExpand { .. }
        | Plan::VolumeStats { .. } => node_plan(backend, host, plan).await,
        Plan::LookupVolume { .. }
        | Plan::LookupSnapshot { .. }
        | Plan::ListVolumes { .. }
        | Plan::ListSnapshots { .. } => storage_query(backend, host, plan).await,
        _ => controller_plan(backend, host, plan).await,
    }
}

/// What the storage holds: lookups and listings.
async fn storage_query<B: Backend>(
    backend: &B,
    host: &NodeHost,
    plan: &Plan,
) -> Result<Outcome, Status> {
    match plan {
        Plan::LookupVolume { volume_id, secrets } => backend
            .lookup_volume(host, volume_id, secrets)
            .await
            .map(Outcome::VolumeFound),
        Plan::LookupSnapshot {
            snapshot_id,
            secrets,
        } => backend
            .lookup_snapshot(host, snapshot_id, secrets)
            .await
            .map(Outcome::SnapshotFound),
        Plan::ListVolumes {
            starting_token,
            max_entries,
        } => backend
            .list_volumes(host, starting_token, *max_entries)
            .await
            .map(Outcome::VolumesListed),
        Plan::ListSnapshots {
            starting_token,
            max_entries,
            source_volume_id,
            snapshot_id,
            secrets,
        } => {
            let query = SnapshotQuery {
                starting_token,
                max_entries: *max_entries,
                source_volume_id,
                snapshot_id,
                secrets,
            };
            backend
                .list_snapshots(host, &query)
                .await
                .map(Outcome::SnapshotsListed)
        }
        other => unreachable!("{} is not a storage query", other.kind()),
    }
}

/// The volume plans of the Controller service.
async fn controller_plan<B: Backend>(
    backend: &B,
    host: &NodeHost,
    plan: &Plan,
) -> Result<Outcome, Status> {
    match plan {
        Plan::CreateVolume(p) => backend.create_volume(host, p).await.map(Outcome::Created),
        Plan::DeleteVolume { volume, secrets } => backend
            .delete_volume(host, volume, secrets)
            .await
            .map(|_| Outcome::Done),
        Plan::ControllerPublish {
            volume,
            node_id,
            capability,
            readonly,
            secrets,
        } => backend
            .controller_publish(host, volume, node_id, capability, *readonly, secrets)
            .await
            .map(|publish_context| Outcome::Published { publish_context }),
        Plan::ControllerUnpublish {
            volume,
            node_ids,
            still_published,
            secrets,
        } => {
            for (i, node) in node_ids.iter().enumerate() {
                let mut others = still_published.clone();
                others.extend(node_ids[i + 1..].iter().cloned());
                backend
                    .controller_unpublish(host, volume, node, &others, secrets)
                    .await?;
            }
            Ok(Outcome::Done)
        }
        Plan::ControllerExpand {
            volume,
            capacity,
            capability,
            secrets,
        } => backend
            .controller_expand(host, volume, *capacity, capability.as_ref(), secrets)
            .await
            .map(
                |(capacity_bytes, node_expansion_required)| Outcome::ControllerExpanded {
                    capacity_bytes,
                    node_expansion_required,
                },
            ),
        Plan::ControllerModify {
            volume,
            mutable_parameters,
            secrets,
        } => backend
            .controller_modify(host, volume, mutable_parameters, secrets)
            .await
            .map(|_| Outcome::Done),
        Plan::GetCapacity {
            capabilities,
            parameters,
            accessible_topology,
        } => backend
            .get_capacity(host, parameters, capabilities, accessible_topology.as_ref())
            .await
            .map(|c| Outcome::Capacity {
                available_bytes: c.available_bytes,
                maximum_volume_size: c.maximum_volume_size,
                minimum_volume_size: c.minimum_volume_size,
            }),
        other => unreachable!("{} is not a controller volume plan", other.kind()),
    }
}

/// Snapshots and group snapshots.
async fn snapshot_plan<B: Backend>(
    backend: &B,
    host: &NodeHost,
    plan: &Plan,
) -> Result<Outcome, Status> {
    match plan {
        Plan::CreateSnapshot(p) => backend
            .create_snapshot(host, p)
            .await
            .map(Outcome::SnapshotCreated),
        Plan::DeleteSnapshot { snapshot, secrets } => backend
            .delete_snapshot(host, snapshot, secrets)
            .await
            .map(|_| Outcome::Done),
        Plan::CreateGroupSnapshot(p) => backend
            .create_group_snapshot(host, p)
            .await
            .map(Outcome::GroupCreated),
        Plan::DeleteGroupSnapshot { group, secrets } => backend
            .delete_group_snapshot(host, group, secrets)
            .await
            .map(|_| Outcome::Done),
        other => unreachable!("{} is not a snapshot plan", other.kind()),
    }
}

/// The plans of the Node service.
async fn node_plan<B: Backend>(
    backend: &B,
    host: &NodeHost,
    plan: &Plan,
) -> Result<Outcome, Status> {
    match plan {
        Plan::Stage(p) => backend.node_stage(host, p).await.map(|_| Outcome::Done),
        Plan::Unstage(p) => backend.node_unstage(host, p).await.map(|_| Outcome::Done),
        Plan::Publish(p) => backend.node_publish(host, p).await.map(|_| Outcome::Done),
        Plan::Unpublish(p) => backend.node_unpublish(host, p).await.map(|_| Outcome::Done),
        Plan::NodeExpand {
            volume_id,
            volume_path,
            staging_path,
            capability,
            publish_context,
            volume_context,
            ..
        } => {
            let block = capability
                .as_ref()
                .is_some_and(|c| c.access_type.is_block());
            let mount_point = if staging_path.is_empty() {
                volume_path
            } else {
                staging_path
            };
            backend
                .node_expand(
                    host,
                    volume_id,
                    publish_context,
                    volume_context,
                    mount_point,
                    block,
                )
                .await
                .map(|capacity_bytes| Outcome::NodeExpanded { capacity_bytes })
        }
        Plan::VolumeStats {
            volume_id,
            volume_path,
            block,
        } => backend
            .volume_stats(host, volume_id, volume_path, *block)
            .await
            .map(|(usage, condition)| Outcome::Stats { usage, condition }),
        other => unreachable!("{} is not a node plan", other.kind()),
    }
}
