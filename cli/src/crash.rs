//! Crash injection for tests and the lab, compiled only with the
//! `crash-hooks` feature: a [`Backend`] wrapper that aborts the process
//! right after carrying out the first plan of one kind, before the driver
//! records its completion (`VOLPLANE_CRASH_AFTER=<kind>`, kinds as in
//! `Plan::kind`), or panics there instead (`panic:<kind>`: a backend's bug,
//! which must stop the driver, not leave it serving). With
//! `VOLPLANE_SLOW_CREATE_MS=N` each create takes N ms more at the storage
//! after making its volume, as a remote storage's round trip does (the
//! window a kill lands in, between making and recording, widened to a
//! remote driver's). A release build has none of this.

use std::future::Future;

use volplane_core::Status;
use volplane_core::driver::{
    Attributes, Capability, CapacityRange, CreatePlan, Features, GroupPlan, GroupSnapshot,
    PublishPlan, Secrets, Snapshot, SnapshotPage, SnapshotPlan, StagePlan, StoredVolume, Topology,
    Volume, VolumeCondition, VolumePage, VolumeUsage,
};
use volplane_service::{Backend, CapacityInfo, NodeHost, NodeSource, SnapshotQuery};

/// `inner`, aborting after its first plan of kind `kind`.
#[derive(Debug)]
pub struct CrashAfter<B> {
    inner: B,
    kind: String,
    panics: bool,
    slow_create: Option<std::time::Duration>,
}

impl<B> CrashAfter<B> {
    /// Wraps `inner`; aborts after the first plan of `kind` (`panic:<kind>`:
    /// panics there).
    pub fn new(inner: B, kind: String) -> CrashAfter<B> {
        match kind.strip_prefix("panic:") {
            Some(k) => CrashAfter {
                inner,
                kind: k.to_string(),
                panics: true,
                slow_create: None,
            },
            None => CrashAfter {
                inner,
                kind,
                panics: false,
                slow_create: None,
            },
        }
    }

    /// Each create takes `by` more after making its volume.
    pub fn slow_create(mut self, by: Option<std::time::Duration>) -> CrashAfter<B> {
        self.slow_create = by;
        self
    }

    /// Passes `result` through, unless `kind` is the one to crash after.
    fn after<T>(&self, kind: &str, result: T) -> T {
        if self.kind == kind {
            if self.panics {
                panic!("panicking on purpose after {kind}, as VOLPLANE_CRASH_AFTER asked");
            }
            eprintln!("volplane: crashing on purpose after {kind}, as VOLPLANE_CRASH_AFTER asked");
            std::process::abort();
        }
        result
    }
}

impl<B: Backend> Backend for CrashAfter<B> {
    fn features(&self) -> Features {
        self.inner.features()
    }

    async fn create_snapshot(
        &self,
        host: &NodeHost,
        plan: &SnapshotPlan,
    ) -> Result<Snapshot, Status> {
        self.after(
            "create-snapshot",
            self.inner.create_snapshot(host, plan).await,
        )
    }

    async fn delete_snapshot(
        &self,
        host: &NodeHost,
        snapshot: &Snapshot,
        secrets: &Secrets,
    ) -> Result<(), Status> {
        let r = self.inner.delete_snapshot(host, snapshot, secrets).await;
        self.after("delete-snapshot", r)
    }

    async fn create_group_snapshot(
        &self,
        host: &NodeHost,
        plan: &GroupPlan,
    ) -> Result<GroupSnapshot, Status> {
        let r = self.inner.create_group_snapshot(host, plan).await;
        self.after("create-group-snapshot", r)
    }

    async fn delete_group_snapshot(
        &self,
        host: &NodeHost,
        group: &GroupSnapshot,
        secrets: &Secrets,
    ) -> Result<(), Status> {
        let r = self.inner.delete_group_snapshot(host, group, secrets).await;
        self.after("delete-group-snapshot", r)
    }

    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        let made = self.inner.create_volume(host, plan).await;
        if let Some(by) = self.slow_create {
            // On the host's blocking pool: either runtime's, unlike a timer.
            let _ = host
                .run(move |_| {
                    std::thread::sleep(by);
                    Ok(())
                })
                .await;
        }
        self.after("create", made)
    }

    async fn delete_volume(
        &self,
        host: &NodeHost,
        volume: &Volume,
        secrets: &Secrets,
    ) -> Result<(), Status> {
        self.after(
            "delete",
            self.inner.delete_volume(host, volume, secrets).await,
        )
    }

    async fn controller_publish(
        &self,
        host: &NodeHost,
        volume: &Volume,
        node_id: &str,
        capability: &Capability,
        readonly: bool,
        secrets: &Secrets,
    ) -> Result<Attributes, Status> {
        let r = self
            .inner
            .controller_publish(host, volume, node_id, capability, readonly, secrets)
            .await;
        self.after("controller-publish", r)
    }

    async fn controller_unpublish(
        &self,
        host: &NodeHost,
        volume: &Volume,
        node_id: &str,
        still_published: &[String],
        secrets: &Secrets,
    ) -> Result<(), Status> {
        let r = self
            .inner
            .controller_unpublish(host, volume, node_id, still_published, secrets)
            .await;
        self.after("controller-unpublish", r)
    }

    async fn controller_expand(
        &self,
        host: &NodeHost,
        volume: &Volume,
        capacity: CapacityRange,
        capability: Option<&Capability>,
        secrets: &Secrets,
    ) -> Result<(u64, bool), Status> {
        let r = self
            .inner
            .controller_expand(host, volume, capacity, capability, secrets)
            .await;
        self.after("controller-expand", r)
    }

    async fn controller_modify(
        &self,
        host: &NodeHost,
        volume: &Volume,
        mutable_parameters: &Attributes,
        secrets: &Secrets,
    ) -> Result<(), Status> {
        let r = self
            .inner
            .controller_modify(host, volume, mutable_parameters, secrets)
            .await;
        self.after("controller-modify", r)
    }

    fn get_capacity(
        &self,
        host: &NodeHost,
        parameters: &Attributes,
        capabilities: &[Capability],
        topology: Option<&Topology>,
    ) -> impl Future<Output = Result<CapacityInfo, Status>> + Send {
        self.inner
            .get_capacity(host, parameters, capabilities, topology)
    }

    fn lookup_volume(
        &self,
        host: &NodeHost,
        volume_id: &str,
        secrets: &Secrets,
    ) -> impl Future<Output = Result<Option<StoredVolume>, Status>> + Send {
        self.inner.lookup_volume(host, volume_id, secrets)
    }

    fn list_volumes(
        &self,
        host: &NodeHost,
        starting_token: &str,
        max_entries: u32,
    ) -> impl Future<Output = Result<VolumePage, Status>> + Send {
        self.inner.list_volumes(host, starting_token, max_entries)
    }

    fn lookup_snapshot(
        &self,
        host: &NodeHost,
        snapshot_id: &str,
        secrets: &Secrets,
    ) -> impl Future<Output = Result<Option<Snapshot>, Status>> + Send {
        self.inner.lookup_snapshot(host, snapshot_id, secrets)
    }

    fn list_snapshots(
        &self,
        host: &NodeHost,
        query: &SnapshotQuery<'_>,
    ) -> impl Future<Output = Result<SnapshotPage, Status>> + Send {
        self.inner.list_snapshots(host, query)
    }

    fn node_source(
        &self,
        host: &NodeHost,
        volume_id: &str,
        publish_context: &Attributes,
        volume_context: &Attributes,
    ) -> impl Future<Output = Result<NodeSource, Status>> + Send {
        self.inner
            .node_source(host, volume_id, publish_context, volume_context)
    }

    async fn node_stage(&self, host: &NodeHost, plan: &StagePlan) -> Result<(), Status> {
        self.after("stage", self.inner.node_stage(host, plan).await)
    }

    async fn node_unstage(&self, host: &NodeHost, plan: &StagePlan) -> Result<(), Status> {
        self.after("unstage", self.inner.node_unstage(host, plan).await)
    }

    async fn node_publish(&self, host: &NodeHost, plan: &PublishPlan) -> Result<(), Status> {
        self.after("publish", self.inner.node_publish(host, plan).await)
    }

    async fn node_unpublish(&self, host: &NodeHost, plan: &PublishPlan) -> Result<(), Status> {
        self.after("unpublish", self.inner.node_unpublish(host, plan).await)
    }

    async fn node_expand(
        &self,
        host: &NodeHost,
        volume_id: &str,
        publish_context: &Attributes,
        volume_context: &Attributes,
        mount_point: &str,
        block: bool,
    ) -> Result<u64, Status> {
        let r = self
            .inner
            .node_expand(
                host,
                volume_id,
                publish_context,
                volume_context,
                mount_point,
                block,
            )
            .await;
        self.after("node-expand", r)
    }

    fn volume_stats(
        &self,
        host: &NodeHost,
        volume_id: &str,
        volume_path: &str,
        block: bool,
    ) -> impl Future<Output = Result<(VolumeUsage, Option<VolumeCondition>), Status>> + Send {
        self.inner.volume_stats(host, volume_id, volume_path, block)
    }
}
