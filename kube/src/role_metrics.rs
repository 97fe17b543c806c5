//! The metrics some roles' sidecars keep about their operations, read off
//! what the role sees and says, at the points where upstream counts them
//! (which are where it emits the same events):
//! * external-provisioner's `controller_persistentvolumeclaim_provision_*`:
//!   a claim's class and data source from the watch, an attempt's start
//!   from its `Provisioning` event, its end from `ProvisioningSucceeded` or
//!   `ProvisioningFailed`;
//! * the snapshot controller's `snapshot_controller_operation_total_seconds`:
//!   CreateSnapshot and CreateSnapshotAndReady from the first sight of a
//!   snapshot not yet cut (or not yet ready) to its `SnapshotCreated` (or
//!   `SnapshotReady`) event, DeleteSnapshot from its deletion mark to its
//!   Deleted event (which cancels a create still under way).

use std::collections::BTreeMap;
use std::time::Instant;

use volplane_core::control::{Event, Input, Watch};
use volplane_core::model::names::reason;
use volplane_core::model::{Name, Object, ObjectKey, VolumeSnapshot};
use volplane_service::metrics::{Metrics, SnapshotOpLabels};

/// A role's operation metrics, when its sidecar keeps some.
#[derive(Debug)]
pub enum RoleMetrics {
    /// The provisioner's.
    Provisions(ProvisionStats),
    /// The snapshot controller's.
    Snapshots(SnapshotStats),
}

impl RoleMetrics {
    /// The metrics the role `name` keeps, if any.
    pub fn for_role(name: &str) -> Option<RoleMetrics> {
        match name {
            "provisioner" => Some(RoleMetrics::Provisions(ProvisionStats::default())),
            "snapshot-controller" => Some(RoleMetrics::Snapshots(SnapshotStats::default())),
            _ => None,
        }
    }

    /// Learns from an input of the role.
    pub fn input(&mut self, input: &Input, metrics: &Metrics) {
        match self {
            RoleMetrics::Provisions(p) => p.input(input),
            RoleMetrics::Snapshots(s) => s.input(input, metrics),
        }
    }

    /// Counts what an event of the role says.
    pub fn event(&mut self, e: &Event, metrics: &Metrics) {
        match self {
            RoleMetrics::Provisions(p) => p.event(e, metrics),
            RoleMetrics::Snapshots(s) => s.event(e, metrics),
        }
    }
}

/// What the provisioner role's metrics need to remember.
#[derive(Debug, Default)]
pub struct ProvisionStats {
    /// Each claim's class and dataSource kind (held inside the entry, as a
    /// key's names are: no allocation per claim).
    claims: BTreeMap<ObjectKey, (Name, Name)>,
    /// When each claim's attempt under way began.
    started: BTreeMap<ObjectKey, Instant>,
}

impl ProvisionStats {
    /// Learns a claim's labels from an input of the role.
    fn input(&mut self, input: &Input) {
        let Input::Watch(w) = input else {
            return;
        };
        match w {
            Watch::Applied(o) => {
                if let Object::Pvc(c) = &**o {
                    let source = c.spec.data_source.as_ref().map_or("", |s| &s.kind);
                    self.claims
                        .insert(o.key(), (Name::new(c.class()), Name::new(source)));
                }
            }
            Watch::Deleted(o) => {
                self.claims.remove(&o.key());
                self.started.remove(&o.key());
            }
        }
    }

    /// Counts what an event of the role says about an attempt.
    fn event(&mut self, e: &Event, metrics: &Metrics) {
        match e.reason.as_str() {
            reason::PROVISIONING => {
                self.started.insert(e.object.clone(), Instant::now());
            }
            reason::PROVISIONING_SUCCEEDED | reason::PROVISIONING_FAILED => {
                let Some((class, source)) = self.claims.get(&e.object) else {
                    return;
                };
                let took = self.started.remove(&e.object).map(|t| t.elapsed());
                let ok = e.reason == reason::PROVISIONING_SUCCEEDED;
                // A success is timed from its attempt's start, as upstream.
                let took = if ok {
                    Some(took.unwrap_or_default())
                } else {
                    None
                };
                metrics.provisioned(class, source, took);
            }
            _ => {}
        }
    }
}

const CREATE: &str = "CreateSnapshot";
const CREATE_AND_READY: &str = "CreateSnapshotAndReady";
const DELETE: &str = "DeleteSnapshot";

/// What the snapshot controller's operation metrics remember.
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Each snapshot class's driver.
    classes: BTreeMap<String, String>,
    /// Each content's driver.
    contents: BTreeMap<String, String>,
    /// Operations under way: (snapshot, operation) → labels and start.
    under_way: BTreeMap<(ObjectKey, &'static str), (SnapshotOpLabels, Instant)>,
}

impl SnapshotStats {
    fn input(&mut self, input: &Input, metrics: &Metrics) {
        let Input::Watch(w) = input else {
            return;
        };
        let (Watch::Applied(o) | Watch::Deleted(o)) = w;
        match (w, &**o) {
            (Watch::Applied(_), Object::SnapshotClass(c)) => {
                self.classes
                    .insert(c.metadata.name.clone(), c.driver.clone());
            }
            (Watch::Applied(_), Object::Content(c)) => {
                self.contents
                    .insert(c.metadata.name.clone(), c.spec.driver.clone());
            }
            // Forgotten when they go: nothing here outgrows the cluster.
            (Watch::Deleted(_), Object::SnapshotClass(c)) => {
                self.classes.remove(&c.metadata.name);
            }
            (Watch::Deleted(_), Object::Content(c)) => {
                self.contents.remove(&c.metadata.name);
            }
            (Watch::Applied(_), Object::Snapshot(s)) => self.applied(o.key(), s, metrics),
            (Watch::Deleted(_), Object::Snapshot(_)) => {
                let key = o.key();
                self.end(&key, CREATE, "cancel", metrics);
                self.end(&key, CREATE_AND_READY, "cancel", metrics);
                self.end(&key, DELETE, "success", metrics);
            }
            _ => {}
        }
        metrics.snapshot_operations_in_flight(self.under_way.len());
    }

    fn applied(&mut self, key: ObjectKey, s: &VolumeSnapshot, metrics: &Metrics) {
        let status = s.status.as_ref();
        let pre = s.spec.source.volume_snapshot_content_name.as_ref();
        let content = status
            .and_then(|st| st.bound_volume_snapshot_content_name.as_ref())
            .or(pre);
        let driver = s
            .spec
            .volume_snapshot_class_name
            .as_ref()
            .and_then(|c| self.classes.get(c))
            .or_else(|| content.and_then(|c| self.contents.get(c)))
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        let labels = |operation: &str| SnapshotOpLabels {
            driver_name: driver.clone(),
            operation_name: operation.into(),
            snapshot_type: if pre.is_some() {
                "pre-provisioned"
            } else {
                "dynamic"
            }
            .into(),
            operation_status: String::new(),
        };
        if s.metadata.deleting() {
            // A create still under way is cancelled, as upstream's is.
            self.end(&key, CREATE, "cancel", metrics);
            self.end(&key, CREATE_AND_READY, "cancel", metrics);
            self.start(key, DELETE, labels(DELETE));
            return;
        }
        if status.and_then(|st| st.creation_time.as_ref()).is_none() {
            self.start(key.clone(), CREATE, labels(CREATE));
        }
        if status.and_then(|st| st.ready_to_use) != Some(true) {
            self.start(key, CREATE_AND_READY, labels(CREATE_AND_READY));
        }
    }

    /// An operation starts, unless it is under way already.
    fn start(&mut self, key: ObjectKey, operation: &'static str, labels: SnapshotOpLabels) {
        self.under_way
            .entry((key, operation))
            .or_insert_with(|| (labels, Instant::now()));
    }

    /// An operation under way ends with `status`.
    fn end(&mut self, key: &ObjectKey, operation: &'static str, status: &str, metrics: &Metrics) {
        if let Some((mut labels, started)) = self.under_way.remove(&(key.clone(), operation)) {
            labels.operation_status = status.into();
            metrics.snapshot_operation(&labels, started.elapsed());
        }
    }

    fn event(&mut self, e: &Event, metrics: &Metrics) {
        let operation = match e.reason.as_str() {
            reason::SNAPSHOT_CREATED => CREATE,
            reason::SNAPSHOT_READY => CREATE_AND_READY,
            _ => return,
        };
        self.end(&e.object, operation, "success", metrics);
        metrics.snapshot_operations_in_flight(self.under_way.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use volplane_core::model::VolumeSnapshot;

    fn applied(s: &VolumeSnapshot) -> Input {
        Input::Watch(Watch::Applied(Arc::new(Object::Snapshot(s.clone()))))
    }

    /// A snapshot deleted before it was ready: its create operations end
    /// as cancelled, the delete as a success, and nothing stays in flight.
    #[test]
    fn a_snapshot_gone_before_ready_cancels_its_creates() {
        let metrics = Metrics::new();
        let mut m = RoleMetrics::for_role("snapshot-controller").unwrap();
        let mut s = VolumeSnapshot::of_claim("default", "s", "c", "snaps");
        m.input(&applied(&s), &metrics);
        s.metadata.deletion_timestamp = Some("1970-01-01T00:00:01Z".into());
        m.input(&applied(&s), &metrics);
        let gone = Input::Watch(Watch::Deleted(Arc::new(Object::Snapshot(s))));
        m.input(&gone, &metrics);
        let text = metrics.encode();
        for (op, status) in [
            ("CreateSnapshot", "cancel"),
            ("CreateSnapshotAndReady", "cancel"),
            ("DeleteSnapshot", "success"),
        ] {
            assert!(
                text.lines().any(|l| l
                    .starts_with("snapshot_controller_operation_total_seconds_count{")
                    && l.contains(&format!("operation_name=\"{op}\""))
                    && l.contains(&format!("operation_status=\"{status}\""))
                    && l.ends_with(" 1")),
                "{op} {status}:\n{text}"
            );
        }
        assert!(
            text.contains("snapshot_controller_operations_in_flight 0"),
            "{text}"
        );
        assert!(RoleMetrics::for_role("attacher").is_none());
    }

    /// Classes and contents are remembered only while they exist.
    #[test]
    fn gone_classes_and_contents_are_forgotten() {
        use volplane_core::model::{DeletionPolicy, VolumeSnapshotClass, VolumeSnapshotContent};
        let metrics = Metrics::new();
        let mut stats = SnapshotStats::default();
        let class = Arc::new(Object::SnapshotClass(VolumeSnapshotClass::new(
            "snaps",
            "d",
            DeletionPolicy::Delete,
        )));
        let content = Arc::new(Object::Content(VolumeSnapshotContent::new("c")));
        for o in [&class, &content] {
            stats.input(&Input::Watch(Watch::Applied(o.clone())), &metrics);
        }
        assert_eq!((stats.classes.len(), stats.contents.len()), (1, 1));
        for o in [class, content] {
            stats.input(&Input::Watch(Watch::Deleted(o)), &metrics);
        }
        assert_eq!((stats.classes.len(), stats.contents.len()), (0, 0));
    }
}
