//! The driver machine's state: plain data, persisted after every change
//! as the records that changed (one per volume, snapshot, operation…).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::plan::Plan;
use super::tracked::{RecordError, Tracked};
use super::types::*;
pub use super::volumes::{Publication, VolumeRecord, Volumes};
use crate::OpId;

/// Everything a driver process must remember across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Hash)]
pub struct DriverState {
    /// Volumes (controller side), by id and by CreateVolume name, one
    /// shared allocation each ([`Volumes`]).
    pub volumes: Volumes,
    /// Volumes present on this node (node side), by id.
    pub node: Tracked<String, NodeVolume>,
    /// Operations handed to the adapter and not yet completed. Recorded before
    /// the adapter sees them; carried out again after a restart.
    pub in_flight: Tracked<OpId, InFlight>,
    /// The next operation id (persisted, so ids are never reused).
    pub next_op: u64,
    /// The `next_op` the store holds, as far as this process knows: it is
    /// written only when it changed (a commit that only records a result
    /// leaves its page alone).
    #[serde(skip)]
    next_op_written: Unwritten,
    /// Snapshots by id.
    #[serde(default)]
    pub snapshots: Tracked<String, SnapshotRecord>,
    /// CreateSnapshot names to snapshot ids (members of a group have none):
    /// an index of `snapshots`, kept in memory and rebuilt as records load
    /// ([`DriverState::reindex`] for a whole state), never stored.
    #[serde(skip)]
    pub snapshot_names: BTreeMap<String, String>,
    /// Group snapshots by id.
    #[serde(default)]
    pub groups: Tracked<String, GroupRecord>,
    /// CreateVolumeGroupSnapshot names to group ids: an index of `groups`.
    #[serde(skip)]
    pub group_names: BTreeMap<String, String>,
    /// The incarnation of the last process that started over this state
    /// (see [`DriverState::next_incarnation`]).
    #[serde(default)]
    pub incarnation: u64,
    /// The boot of the machine the last process started on (Linux's
    /// `boot_id`; empty: not known), see [`DriverState::start_boot`].
    #[serde(default)]
    pub boot: String,
    /// This start follows a reboot (set by [`DriverState::start_boot`] for
    /// the start only, never stored).
    #[serde(skip)]
    pub rebooted: bool,
}

/// A value kept beside the state, not part of it: states compare equal
/// whatever it holds (what is still to be written is not state).
#[derive(Debug, Clone, Default)]
struct Unwritten(Option<u64>);

impl PartialEq for Unwritten {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::hash::Hash for Unwritten {
    /// Hashes nothing, as every two compare equal.
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// A group snapshot the controller cut. Its members are in
/// [`DriverState::snapshots`] too, without a name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct GroupRecord {
    /// The name CreateVolumeGroupSnapshot was asked with.
    pub name: String,
    /// The group as the backend last reported it.
    pub group: GroupSnapshot,
    /// The parameters it was cut with.
    pub parameters: Attributes,
}

/// A snapshot the controller cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct SnapshotRecord {
    /// The name CreateSnapshot was asked with; empty for a group's member.
    pub name: String,
    /// The snapshot as the backend last reported it.
    pub snapshot: Snapshot,
    /// The parameters it was cut with.
    pub parameters: Attributes,
}

/// A volume on this node: its stage (if any) and its published targets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Hash)]
pub struct NodeVolume {
    /// The global mount, if staged (or staging).
    pub stage: Option<StageRecord>,
    /// Pod target paths → their publish.
    pub targets: BTreeMap<String, TargetRecord>,
    /// Size the filesystem was last grown to by NodeExpandVolume.
    pub expanded_bytes: Option<u64>,
}

/// A NodeStageVolume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct StageRecord {
    /// The global mount path.
    pub staging_path: String,
    /// How it was staged.
    pub capability: Capability,
    /// The publish context it was staged with.
    pub publish_context: Attributes,
    /// The volume context it was staged with.
    pub volume_context: Attributes,
    /// The stage succeeded (false: it may or may not have happened).
    pub certain: bool,
}

/// A NodePublishVolume to one target path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct TargetRecord {
    /// The global mount it was published from.
    pub staging_path: String,
    /// How it was published.
    pub capability: Capability,
    /// Published read-only.
    pub readonly: bool,
    /// The publish context it was published with.
    pub publish_context: Attributes,
    /// The volume context it was published with.
    pub volume_context: Attributes,
    /// The publish succeeded (false: it may or may not have happened).
    pub certain: bool,
}

/// An operation the adapter is carrying out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct InFlight {
    /// The lock it holds: a volume id, or `name:<name>` for a create.
    pub key: String,
    /// The plan, carried out again after a restart.
    pub plan: Plan,
    /// The request waiting for the answer; `None` after a restart.
    #[serde(skip)]
    pub rpc: Option<u64>,
    /// The request carried secrets. They are never stored, so after a
    /// restart the plan waits for the CO's retry, which carries them,
    /// rather than reach the storage without them.
    #[serde(default)]
    pub credentialed: bool,
}

impl InFlight {
    /// Reads a stored record, of this layout or of the earlier one (no
    /// `credentialed`: a plan of a kind that carries secrets is taken to
    /// have had some, so it waits for its retry).
    pub fn decode(bytes: &[u8]) -> Result<InFlight, RecordError> {
        #[derive(Deserialize)]
        struct Earlier {
            key: String,
            plan: Plan,
        }
        super::tracked::decode::<InFlight>(bytes).or_else(|now| {
            let Earlier { key, plan } = super::tracked::decode(bytes).map_err(|_| now)?;
            Ok(InFlight {
                key,
                credentialed: plan.secrets().is_some(),
                plan,
                rpc: None,
            })
        })
    }
}

/// One record a persist writes: `value` is its bytes (binary, see
/// [`super::tracked::encode`]), `None` when it was removed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// The table (one of [`TABLES`]).
    pub table: &'static str,
    /// The record's key in its table.
    pub key: String,
    /// The record's bytes; `None`: removed.
    pub value: Option<Vec<u8>>,
}

/// The state's tables, by the names the record store gives them; `meta`
/// holds the next operation id.
pub const TABLES: [&str; 6] = [
    "volumes",
    "node",
    "in_flight",
    "snapshots",
    "groups",
    "meta",
];

/// Tables an earlier volplane wrote and this one no longer reads: the name
/// indexes, now rebuilt from the records they index. A record store drops
/// them.
pub const DROPPED_TABLES: [&str; 3] = ["names", "snapshot_names", "group_names"];

/// Runs `$body` with `$t` bound to each table field and `$name` to its name.
macro_rules! each_table {
    ($state:expr, |$name:ident, $t:ident| $body:expr) => {{
        {
            let ($name, $t) = ("volumes", &mut $state.volumes);
            $body
        }
        {
            let ($name, $t) = ("node", &mut $state.node);
            $body
        }
        {
            let ($name, $t) = ("in_flight", &mut $state.in_flight);
            $body
        }
        {
            let ($name, $t) = ("snapshots", &mut $state.snapshots);
            $body
        }
        {
            let ($name, $t) = ("groups", &mut $state.groups);
            $body
        }
    }};
}

impl DriverState {
    /// The records changed since the last call (the next operation id
    /// among them when it changed), forgotten here: write them, or
    /// [`retouch`](Self::retouch) them when the write fails.
    pub fn take_changes(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        each_table!(self, |name, t| {
            for (key, value) in t.changes() {
                out.push(Change {
                    table: name,
                    key,
                    value,
                });
            }
        });
        if self.next_op_written.0 != Some(self.next_op) {
            self.next_op_written.0 = Some(self.next_op);
            out.push(Change {
                table: "meta",
                key: "next_op".into(),
                value: Some(self.next_op.to_string().into_bytes()),
            });
        }
        out
    }

    /// Starts a new incarnation: the number one more than the last, and
    /// the record that makes it durable. Write it before anything is
    /// served, so that no two processes ever act under one number.
    pub fn next_incarnation(&mut self) -> (u64, Change) {
        self.incarnation += 1;
        let change = Change {
            table: "meta",
            key: "incarnation".into(),
            value: Some(self.incarnation.to_string().into_bytes()),
        };
        (self.incarnation, change)
    }

    /// Notes the boot this process starts on (`boot`: Linux's `boot_id`,
    /// empty when not known): [`DriverState::rebooted`] says whether the
    /// machine rebooted since the last process started — its mounts are
    /// gone then, and node operations in flight are not carried out again.
    /// Returns the record to write before anything is served, when the boot
    /// changed.
    pub fn start_boot(&mut self, boot: &str) -> Option<Change> {
        if boot.is_empty() || boot == self.boot {
            return None;
        }
        self.rebooted = !self.boot.is_empty();
        self.boot = boot.to_string();
        Some(Change {
            table: "meta",
            key: "boot".into(),
            value: Some(boot.as_bytes().to_vec()),
        })
    }

    /// Marks the records `(table, key)` to be written again (their write
    /// failed).
    pub fn retouch(&mut self, records: Vec<(&'static str, String)>) {
        if records.iter().any(|(table, _)| *table == "meta") {
            self.next_op_written.0 = None;
        }
        each_table!(self, |name, t| {
            t.retouch(
                records
                    .iter()
                    .filter(|(table, _)| *table == name)
                    .filter_map(|(_, key)| super::tracked::RecordKey::decode(key)),
            );
        });
    }

    /// Marks every record changed: the whole state is written next (an
    /// imported state).
    pub fn touch_all(&mut self) {
        self.next_op_written.0 = None;
        each_table!(self, |_name, t| t.touch_all());
    }

    /// The state the stored records describe: `(table, key, record)`.
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = (&'a str, &'a str, &'a [u8])>,
    ) -> Result<DriverState, RecordError> {
        let mut state = DriverState::default();
        for (table, key, bytes) in records {
            state.load_record(table, key, bytes)?;
        }
        Ok(state)
    }

    /// Adds one stored record to a state being read back (a record store
    /// hands them over one at a time, so nothing holds them all at once).
    pub fn load_record(&mut self, table: &str, key: &str, bytes: &[u8]) -> Result<(), RecordError> {
        self.read_record(table, key, bytes)
            .map_err(|fault| fault.at(table, key))
    }

    fn read_record(&mut self, table: &str, key: &str, bytes: &[u8]) -> Result<(), RecordError> {
        if table == "meta" {
            let text = std::str::from_utf8(bytes).unwrap_or("");
            let number = || -> Result<u64, RecordError> {
                text.parse()
                    .map_err(|_| RecordError::NotANumber(text.to_string()))
            };
            match key {
                "boot" => self.boot = text.to_string(),
                "incarnation" => self.incarnation = number()?,
                "next_op" => {
                    self.next_op = number()?;
                    self.next_op_written.0 = Some(self.next_op);
                }
                _ => return Err(RecordError::UnknownMeta),
            }
            return Ok(());
        }
        if table == "in_flight" {
            return self.in_flight.load_with(key, bytes, InFlight::decode);
        }
        let mut found = false;
        let mut result = Ok(());
        each_table!(self, |name, t| {
            if name == table {
                found = true;
                result = t.load(key, bytes);
            }
        });
        if !found {
            return Err(RecordError::UnknownTable);
        }
        result?;
        self.index(table, key);
        Ok(())
    }

    /// Rebuilds the name indexes from the volumes, snapshots and groups
    /// (a state read whole, as an earlier volplane's state file).
    pub fn reindex(&mut self) {
        let snapshots: Vec<String> = self.snapshots.keys().cloned().collect();
        let groups: Vec<String> = self.groups.keys().cloned().collect();
        for (table, keys) in [("snapshots", snapshots), ("groups", groups)] {
            for key in keys {
                self.index(table, &key);
            }
        }
    }

    /// Adds the record `key` of `table`, just loaded, to the name index
    /// of its table.
    fn index(&mut self, table: &str, key: &str) {
        let (name, names) = match table {
            "snapshots" => (
                self.snapshots.get(key).map(|r| &r.name),
                &mut self.snapshot_names,
            ),
            "groups" => (self.groups.get(key).map(|g| &g.name), &mut self.group_names),
            _ => return,
        };
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            names.insert(name.clone(), key.to_string());
        }
    }

    /// True when an operation holding `key` is in flight.
    pub fn busy(&self, key: &str) -> bool {
        self.in_flight.values().any(|f| f.key == key)
    }

    /// True when a plan in flight reads volume or snapshot `id`: a snapshot
    /// being cut from it, or a volume being cloned or restored from it.
    pub fn reading(&self, id: &str) -> bool {
        self.in_flight.values().any(|f| match &f.plan {
            Plan::CreateSnapshot(p) => p.source.volume_id == id,
            Plan::CreateGroupSnapshot(p) => p.sources.iter().any(|v| v.volume_id == id),
            Plan::CreateVolume(p) => matches!(
                &p.content_source,
                Some(ContentSource::Snapshot(s) | ContentSource::Volume(s)) if s == id
            ),
            _ => false,
        })
    }

    /// Published targets of `volume_id` on this node.
    pub fn targets(&self, volume_id: &str) -> Vec<&str> {
        self.node
            .get(volume_id)
            .map(|v| v.targets.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// Invariants of the driver state, used by unit tests, properties, the
/// simulator and the fuzzers. Returns the first violation found.
pub fn check_invariants(state: &DriverState) -> Result<(), crate::machine::Broken> {
    for (id, v) in &state.node {
        if v.stage.is_none() && v.targets.is_empty() {
            return Err(format!("node volume {id} is recorded with nothing on it").into());
        }
        for (path, t) in &v.targets {
            if !t.staging_path.is_empty() {
                match &v.stage {
                    Some(s) if s.staging_path == t.staging_path => {}
                    _ => {
                        return Err(format!(
                            "volume {id} is published at {path} from staging path {} that is not staged",
                            t.staging_path
                        ).into());
                    }
                }
            }
        }
    }
    state.volumes.check_indexes()?;
    let mut names = state.volumes.names().peekable();
    while let Some((name, id)) = names.next() {
        if let Some((_, other)) = names.peek().filter(|(next, _)| *next == name) {
            return Err(format!("volumes {id} and {other} are both named {name}").into());
        }
    }
    for (id, r) in state.volumes.iter_unpacked() {
        let single: Vec<_> = r
            .published
            .iter()
            .filter(|(_, p)| !p.capability.access_mode.multi_node())
            .collect();
        if !single.is_empty() && r.published.len() > 1 {
            return Err(format!(
                "single-node volume {id} is published to {} nodes",
                r.published.len()
            )
            .into());
        }
    }
    for (name, id) in &state.snapshot_names {
        match state.snapshots.get(id) {
            Some(r) if &r.name == name => {}
            _ => {
                return Err(format!(
                    "snapshot name {name} maps to snapshot {id} that does not carry it"
                )
                .into());
            }
        }
    }
    for (id, r) in &state.snapshots {
        if r.snapshot.snapshot_id != *id {
            return Err(format!("snapshot {id} is recorded as {}", r.snapshot.snapshot_id).into());
        }
        let group = &r.snapshot.group_snapshot_id;
        if r.name.is_empty() {
            // A member of a recorded group is one of its members; a
            // snapshot adopted from the storage has no name either.
            let member = state
                .groups
                .get(group)
                .is_none_or(|g| g.group.snapshots.iter().any(|s| s.snapshot_id == *id));
            if !member {
                return Err(format!(
                    "snapshot {id} has no name and is no member of its group {group}"
                )
                .into());
            }
        } else if state.snapshot_names.get(&r.name) != Some(id) {
            return Err(format!("snapshot {id} is missing from the name index").into());
        }
    }
    for (id, g) in &state.groups {
        if state.group_names.get(&g.name) != Some(id) {
            return Err(format!("group snapshot {id} is missing from the name index").into());
        }
        for s in &g.group.snapshots {
            if !state.snapshots.contains_key(&s.snapshot_id) {
                return Err(format!(
                    "group snapshot {id} names member {} that is not recorded",
                    s.snapshot_id
                )
                .into());
            }
        }
    }
    let mut keys = std::collections::BTreeSet::new();
    for f in state.in_flight.values() {
        if !keys.insert(&f.key) {
            return Err(format!("two operations in flight hold {}", f.key).into());
        }
    }
    Ok(())
}
