//! What the checker machine and its adapter say to each other, and what a
//! run leaves: its steps, its trace, its outcome.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::generate::Bounds;
use super::oracle::{Answer, Breach, Facts};
use super::rules::Tally;
use super::step::{Names, Step};
use super::world::NodeSeen;
use crate::OpId;
use crate::driver::Request;

/// A run's steps, group by group (a group's steps are sent together).
pub type Program = Vec<Vec<Step>>;

/// What a run does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Names, paths and the request fields every call carries.
    pub names: Names,
    /// The seed the steps are chosen from.
    pub seed: u64,
    /// Groups of steps to run (when not replaying).
    pub steps: u32,
    /// Steps in flight together, at most (1: one at a time).
    pub concurrency: u8,
    /// How many volumes, targets and snapshots.
    pub bounds: Bounds,
    /// Replay these steps instead of choosing.
    pub program: Option<Program>,
    /// Judge the mounts outside the kubelet directory (off when other
    /// things on the machine mount at the same time).
    pub watch_outside: bool,
    /// Directories that hold the driver's storage, one entry per volume or
    /// snapshot (a host-path driver's): what they hold after the teardown
    /// that they did not before the run breaks `nothing-left-on-storage`,
    /// as a listing would — for drivers that cannot list.
    #[serde(default)]
    pub storage_dirs: Vec<String>,
    /// Choose from these bytes instead of the seed (a fuzzer's input);
    /// the steps end when they run out.
    pub choices: Option<Vec<u8>>,
    /// The secrets each call carries (never serialized).
    #[serde(skip)]
    pub secrets: super::secrets::CallSecrets,
}

/// What the adapter must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send this CSI request; answer with [`Input::Answered`].
    Call {
        /// Names the completion.
        op: OpId,
        /// The request.
        request: Request,
    },
    /// Make this directory and its parents, as a CO does for staging paths
    /// and a target's parent; answer with [`Input::Made`].
    MakeDir {
        /// Names the completion.
        op: OpId,
        /// The directory.
        path: String,
    },
    /// Look at these paths, the mounts and files beneath `under`, and
    /// (when asked) the mounts outside the kubelet directory and the loop
    /// devices attached; answer with [`Input::Seen`].
    Look {
        /// Names the completion.
        op: OpId,
        /// The paths.
        paths: Vec<String>,
        /// Report every mount point beneath these prefixes.
        under: Vec<String>,
        /// Report the mounts outside the kubelet directory and the loop devices.
        outside: bool,
        /// Report the entries of these directories (the driver's storage).
        storage: Vec<String>,
    },
    /// Write `token` to a new file in `write` (a directory), then read the
    /// file of the same name in `read`; answer with [`Input::Answered`]
    /// carrying [`Answer::Data`].
    Data {
        /// Names the completion.
        op: OpId,
        /// The target written through.
        write: String,
        /// The target read through.
        read: String,
        /// The file's name and content.
        token: String,
    },
    /// Kill the driver with SIGKILL and start it again; answer with
    /// [`Input::Answered`] carrying [`Answer::Restarted`] once it serves.
    Restart {
        /// Names the completion.
        op: OpId,
        /// Microseconds after the group's calls are sent to kill: the same
        /// for the same run and the same calls in flight, so a shrunk
        /// replay, with other steps gone, kills at the same moment.
        after_micros: u64,
    },
    /// Unmount these mount points (each beneath the run's own
    /// directories), deepest first: what the run's teardown could not put
    /// away through the driver (a run that broke a rule, a driver that
    /// answered OK and kept the mount), so that no run leaves anything on
    /// the node; answer with [`Input::Made`].
    Unmount {
        /// Names the completion.
        op: OpId,
        /// The mount points.
        mounts: Vec<String>,
    },
    /// Remove these directories if empty (never anything in them),
    /// deepest first; answer with [`Input::Made`].
    Tidy {
        /// Names the completion.
        op: OpId,
        /// The directories.
        dirs: Vec<String>,
    },
}

/// What the adapter reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A call, a write-and-read, or a restart completed.
    Answered {
        /// The effect completed.
        op: OpId,
        /// What came back.
        answer: Answer,
    },
    /// A directory was made (or tidied).
    Made {
        /// The effect completed.
        op: OpId,
        /// `Err`: why not.
        result: Result<(), crate::machine::EffectFailed>,
    },
    /// The node was looked at.
    Seen {
        /// The effect completed.
        op: OpId,
        /// What was seen.
        seen: NodeSeen,
    },
}

/// One step of the trace: its group, the step, what came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The group (steps of one group were in flight together).
    pub group: u32,
    /// The step.
    pub step: Step,
    /// Its answer.
    pub answer: Answer,
}

/// A MUST-rule broken: where, and the trace up to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The rule and what happened.
    pub breach: Breach,
    /// The group it broke at.
    pub group: u32,
}

impl Outcome {
    /// The steps sent up to and with the group that broke a rule (all of
    /// them when none broke).
    pub fn up_to_violation(&self) -> Program {
        let end = self
            .violation
            .as_ref()
            .map_or(self.program.len(), |v| v.group as usize);
        self.program.iter().take(end).cloned().collect()
    }
}

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// Rules checked and broken.
    pub tally: Tally,
    /// SHOULD-rules broken, with the group each broke at.
    pub notes: Vec<(u32, Breach)>,
    /// The MUST-rule broken, if one.
    pub violation: Option<Violation>,
    /// The steps sent, group by group (a replay of them repeats the run).
    pub program: Program,
    /// Every step with its answer.
    pub trace: Vec<Record>,
    /// Why the run could not go on (the driver could not be reached…).
    pub error: Option<String>,
    /// The driver did not serve again after a restart: nothing more can be
    /// checked (nor a failure shrunk) until someone repairs it.
    pub driver_gone: bool,
    /// What the driver said of itself.
    pub facts: Facts,
    /// Mounts outside the kubelet directory the host changed during the
    /// run, none of them the driver's (`new …`, `gone …`; the first few):
    /// not judged.
    #[serde(default)]
    pub foreign: BTreeSet<String>,
}
