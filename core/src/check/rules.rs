//! The rules `volplane check` judges a driver by: what the CSI
//! specification requires of a plugin (`MUST`), and what a container
//! orchestrator relies on where the specification leaves a choice
//! (`SHOULD`: reported, and fatal only with `--strict`). Each names the
//! clause it comes from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How binding a rule is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// The specification requires it: a violation fails the check.
    Must,
    /// The specification recommends it, or a CO relies on it: reported;
    /// fails the check only when asked to be strict.
    Should,
}

macro_rules! rules {
    ($($(#[$doc:meta])* $name:ident = $level:ident, $slug:literal, $clause:literal;)*) => {
        /// A rule a driver is judged by.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum Rule {
            $($(#[$doc])* $name,)*
        }

        impl Rule {
            /// Every rule, in report order.
            pub const ALL: &'static [Rule] = &[$(Rule::$name,)*];

            /// How binding it is.
            pub fn level(self) -> Level {
                match self { $(Rule::$name => Level::$level,)* }
            }

            /// Its name in reports (kebab-case).
            pub fn name(self) -> &'static str {
                match self { $(Rule::$name => $slug,)* }
            }

            /// Where it comes from, and what it says.
            pub fn clause(self) -> &'static str {
                match self { $(Rule::$name => $clause,)* }
            }
        }
    };
}

rules! {
    /// GetPluginInfo names the driver validly, with a version.
    PluginInfo = Must, "plugin-info",
        "CSI GetPluginInfo: name and vendor_version are REQUIRED; the name is a domain name of at most 63 characters";
    /// A request missing a REQUIRED field is refused with INVALID_ARGUMENT.
    RequiredFields = Must, "required-fields",
        "CSI error scheme: a missing or invalid REQUIRED field MUST be answered INVALID_ARGUMENT";
    /// A driver declared to need credentials makes nothing without them.
    CredentialsFromTheCall = Must, "credentials-from-the-call",
        "CSI secrets: a plugin acts with the secrets its CO passes in the call; declared with --secrets-required, the driver needs the secrets file's, so a CreateVolume without them MUST fail and make nothing (one that succeeds took its credentials from somewhere else: another call's, or its own)";
    /// An answer carries every field the specification makes REQUIRED.
    WellFormed = Must, "well-formed-answer",
        "CSI messages: fields marked REQUIRED MUST be set in a response (a volume's volume_id, a snapshot's source_volume_id…)";
    /// A call answered with a code the specification names for its situation.
    KnownCode = Must, "code-for-the-situation",
        "CSI error scheme: each RPC's table of errors names the code for each condition; OK where none applies";
    /// CreateVolume repeated with the same arguments answers the same volume.
    CreateIdempotent = Must, "create-idempotent",
        "CSI CreateVolume: MUST be idempotent; a volume of that name that is compatible MUST be answered OK with that volume";
    /// CreateVolume under an existing name with an incompatible size is ALREADY_EXISTS.
    CreateIncompatible = Must, "create-incompatible",
        "CSI CreateVolume errors: Volume already exists but is incompatible — 6 ALREADY_EXISTS";
    /// The capacity of a new volume lies in the range asked for.
    CreateCapacity = Must, "create-capacity",
        "CSI CapacityRange: the volume MUST be at least required_bytes and at most limit_bytes (0 in the answer: unknown)";
    /// GetCapacity does not say less than a create granted right after it uses.
    CapacityCoversGranted = Should, "capacity-covers-granted",
        "CSI GetCapacity: available_capacity is the capacity of the storage that can be used to provision volumes, maximum_volume_size the largest required_bytes a create can use; a CO schedules by them, so a create granted after them is no larger than they said";
    /// CreateVolume makes the volume where the requisite topology allows.
    CreateTopology = Must, "create-within-requisite-topology",
        "CSI CreateVolume: accessibility_requirements — the provisioned volume MUST be accessible from at least one of the requisite topologies; accessible_topology says where it is";
    /// CreateVolume from a snapshot that does not exist is NOT_FOUND.
    SourceNotFound = Must, "source-not-found",
        "CSI CreateVolume errors: Source does not exist — 5 NOT_FOUND";
    /// A volume or snapshot the driver acknowledged is found until it is deleted.
    Acknowledged = Must, "acknowledged-is-found",
        "CSI: after CreateVolume / CreateSnapshot answered OK the object exists until deleted; NOT_FOUND for it is a lost object";
    /// A call naming a volume, snapshot or node that does not exist is NOT_FOUND.
    UnknownObject = Must, "unknown-object-not-found",
        "CSI error tables: Volume does not exist / Node does not exist — 5 NOT_FOUND";
    /// DeleteVolume of a volume that is gone answers OK.
    DeleteIdempotent = Must, "delete-idempotent",
        "CSI DeleteVolume: a volume that does not exist or is already gone MUST be answered OK";
    /// A driver answers the same question the same way: deleting a volume in use is always refused, or always allowed.
    DeleteInUseConsistent = Must, "delete-in-use-consistent",
        "CSI DeleteVolume errors: Volume in use — 9 FAILED_PRECONDITION; a driver that refuses it refuses it every time, or a concurrent publish can lose its volume";
    /// ControllerPublishVolume repeated answers OK; with another read-only flag, ALREADY_EXISTS.
    PublishIdempotent = Must, "controller-publish-idempotent",
        "CSI ControllerPublishVolume: MUST be idempotent; published to the node but incompatible — 6 ALREADY_EXISTS";
    /// ControllerUnpublishVolume of a volume not published answers OK.
    UnpublishIdempotent = Must, "controller-unpublish-idempotent",
        "CSI ControllerUnpublishVolume: MUST be idempotent; a volume not attached to the node is answered OK";
    /// ValidateVolumeCapabilities confirms the capability a volume was created with.
    ValidateConfirms = Should, "validate-confirms",
        "CSI ValidateVolumeCapabilities: confirmed is set when every capability is supported; a volume supports what it was created with";
    /// ListVolumes and ControllerGetVolume report the nodes a volume is published to.
    PublishedNodes = Must, "published-nodes",
        "CSI ListVolumes / ControllerGetVolume with LIST_VOLUMES_PUBLISHED_NODES: published_node_ids lists the nodes the volume is published to";
    /// ControllerExpandVolume answers a capacity at least what was asked for.
    ExpandCapacity = Must, "expand-capacity",
        "CSI ControllerExpandVolume / NodeExpandVolume: capacity_bytes is the volume's new size, at least required_bytes";
    /// ListVolumes and ListSnapshots pages list every object once, and no more than max_entries at a time.
    ListComplete = Must, "list-every-object-once",
        "CSI ListVolumes / ListSnapshots: entries across pages list every object once; a page MUST NOT hold more than max_entries; next_token empty only at the end";
    /// ListVolumes and ListSnapshots refuse a token they did not give with ABORTED.
    ListBadToken = Must, "list-bad-token-aborted",
        "CSI ListVolumes / ListSnapshots errors: Invalid starting_token — 10 ABORTED";
    /// ABORTED only while another call on the same object is in flight.
    AbortedOnlyWhenBusy = Should, "aborted-only-when-busy",
        "CSI error scheme: Operation pending for volume — 10 ABORTED, for a call while another on the same volume is in flight";
    /// A valid call on a volume in a fitting state succeeds.
    ValidCallSucceeds = Should, "valid-call-succeeds",
        "a CO retries a call that fails with INTERNAL or UNKNOWN: a driver that fails valid calls keeps pods waiting";
    /// Concurrent calls are answered as if they ran one after another (or ABORTED).
    Linearizable = Must, "concurrent-calls-in-some-order",
        "CSI concurrency: calls on one volume in flight together are serialized or answered ABORTED; their answers are those of some order";
    /// NodeStageVolume repeated answers OK.
    StageIdempotent = Must, "node-stage-idempotent",
        "CSI NodeStageVolume: MUST be idempotent; staged at the path with compatible arguments — OK";
    /// NodeStageVolume at the same path with another access mode is ALREADY_EXISTS.
    StageIncompatible = Should, "node-stage-incompatible",
        "CSI NodeStageVolume errors: Volume published but is incompatible — 6 ALREADY_EXISTS";
    /// NodeUnstageVolume of a volume not staged answers OK.
    UnstageIdempotent = Must, "node-unstage-idempotent",
        "CSI NodeUnstageVolume: MUST be idempotent; a volume not staged at the path is answered OK";
    /// NodeUnstageVolume is refused while the volume is published at a target.
    UnstageWhilePublished = Should, "node-unstage-refused-while-published",
        "CSI NodeUnstageVolume: called only after every NodeUnpublishVolume succeeded; unmounting beneath live targets loses their writes";
    /// Nothing is mounted at the staging path after NodeUnstageVolume OK.
    UnstageUnmounts = Must, "node-unstage-unmounts",
        "CSI NodeUnstageVolume: undoes the work of NodeStageVolume; the staging path is no longer a mount after OK";
    /// NodePublishVolume of a stage-capable driver's unstaged volume is refused.
    PublishNeedsStage = Should, "node-publish-needs-stage",
        "CSI NodePublishVolume errors: Staging target path not set — 9 FAILED_PRECONDITION (STAGE_UNSTAGE drivers publish staged volumes)";
    /// NodePublishVolume repeated answers OK; with another read-only flag, ALREADY_EXISTS.
    NodePublishIdempotent = Must, "node-publish-idempotent",
        "CSI NodePublishVolume: MUST be idempotent; published at the path but incompatible — 6 ALREADY_EXISTS";
    /// A SINGLE_NODE_SINGLE_WRITER volume is published at one target only.
    SingleWriter = Must, "single-writer-one-target",
        "CSI NodePublishVolume: a SINGLE_NODE_SINGLE_WRITER volume published at another target — 9 FAILED_PRECONDITION";
    /// After NodePublishVolume OK the target is a mount point, read-only when asked.
    PublishMounts = Must, "node-publish-mounts",
        "CSI NodePublishVolume: the volume is available at target_path (a mount, or for raw block a device), read-only when readonly is set";
    /// NodeUnpublishVolume of a target not published answers OK.
    NodeUnpublishIdempotent = Must, "node-unpublish-idempotent",
        "CSI NodeUnpublishVolume: MUST be idempotent; a target not published is answered OK";
    /// After NodeUnpublishVolume OK nothing is mounted at the target and the SP removed it.
    UnpublishUnmounts = Must, "node-unpublish-unmounts",
        "CSI NodeUnpublishVolume: undoes NodePublishVolume; the SP MUST delete the file or directory it created at target_path";
    /// NodeGetVolumeStats answers for a published path, NOT_FOUND elsewhere.
    StatsPath = Must, "stats-path",
        "CSI NodeGetVolumeStats: usage of the volume at volume_path; Volume does not exist at that path — 5 NOT_FOUND";
    /// Data written through one target reads back through another of the same volume.
    DataShared = Must, "data-shared-between-targets",
        "CSI NodePublishVolume: every target of a volume is that volume; what one pod writes another reads";
    /// A target published read-only refuses writes.
    ReadOnlyRefusesWrites = Must, "read-only-refuses-writes",
        "CSI NodePublishVolume: readonly — the volume MUST be published read-only";
    /// CreateSnapshot repeated answers the same snapshot; of another volume, ALREADY_EXISTS.
    SnapshotIdempotent = Must, "snapshot-idempotent",
        "CSI CreateSnapshot: MUST be idempotent; same name, another source — 6 ALREADY_EXISTS";
    /// DeleteSnapshot of a snapshot that is gone answers OK.
    DeleteSnapshotIdempotent = Must, "delete-snapshot-idempotent",
        "CSI DeleteSnapshot: a snapshot that does not exist is answered OK";
    /// An acknowledged volume, snapshot, stage or publish survives the driver's restart.
    SurvivesRestart = Must, "survives-restart",
        "CSI: a plugin's answers are durable; after OK, the object exists until deleted, whatever happens to the plugin's process";
    /// A call interrupted (no answer, UNAVAILABLE, INTERNAL…) succeeds or fails for good when retried.
    Converges = Must, "interrupted-call-converges",
        "CSI error scheme: a CO retries a call whose outcome it does not know; idempotency lets the retry finish the work";
    /// No mount outside the kubelet directory appears or goes.
    NothingOutside = Must, "nothing-outside-kubelet-dir",
        "CSI node paths: a node plugin mounts at the staging and target paths the CO gives; nothing else on the host changes";
    /// Once everything is unpublished, unstaged and deleted, nothing of the run is left.
    NoLeaks = Must, "nothing-left-behind",
        "CSI NodeUnpublishVolume / NodeUnstageVolume / DeleteVolume: after the last OK nothing of the volume is mounted, attached as a loop device, or left under the kubelet directory";
    /// Once every volume and snapshot of the run is deleted, the storage lists (or its directories hold) none it did not before.
    NothingStored = Must, "nothing-left-on-storage",
        "CSI DeleteVolume / DeleteSnapshot: after OK the object no longer exists; what the plugin holds (what ListVolumes and ListSnapshots list, or its storage directories) keeps nothing the run made and deleted, or whose create was interrupted and then finished";
}

/// How often each rule was checked and broken in a run (or many).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Per rule: checked, violated.
    pub counts: BTreeMap<Rule, (u64, u64)>,
}

impl Tally {
    /// `rule` was checked.
    pub fn checked(&mut self, rule: Rule) {
        self.counts.entry(rule).or_default().0 += 1;
    }

    /// `rule` was broken (and so checked).
    pub fn violated(&mut self, rule: Rule) {
        let e = self.counts.entry(rule).or_default();
        e.0 += 1;
        e.1 += 1;
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        for (rule, (c, v)) in &other.counts {
            let e = self.counts.entry(*rule).or_default();
            e.0 += c;
            e.1 += v;
        }
    }

    /// Rules broken at `level`.
    pub fn broken(&self, level: Level) -> impl Iterator<Item = Rule> + '_ {
        self.counts
            .iter()
            .filter(move |(r, (_, v))| *v > 0 && r.level() == level)
            .map(|(r, _)| *r)
    }
}
