//! Known mistakes the simulator can plant in the machines, to show that it
//! finds them. Production code never sets a plant; every machine's config
//! carries `plant: None` unless a simulation asks otherwise.

use serde::{Deserialize, Serialize};

/// A planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Plant {
    /// kubelet: unstage a volume as soon as one pod's unpublish completes,
    /// although other pods on the node still have it published.
    UnstageAfterFirstUnpublish,
    /// attach/detach: detach without waiting for the node to stop reporting
    /// the volume in use.
    DetachWithoutWaitingForUnmount,
    /// provisioner: delete Released volumes whatever their reclaim policy.
    DeleteReleasedRetain,
    /// driver: on restart, forget operations that were in flight and every
    /// record not known to have succeeded (record-after-success, as
    /// csi-driver-host-path does).
    ForgetInFlightOnRestart,
    /// binder: match volumes that another claim already holds.
    BindClaimedVolume,
}

impl Plant {
    pub const ALL: [Plant; 5] = [
        Plant::UnstageAfterFirstUnpublish,
        Plant::DetachWithoutWaitingForUnmount,
        Plant::DeleteReleasedRetain,
        Plant::ForgetInFlightOnRestart,
        Plant::BindClaimedVolume,
    ];

    /// The name `--plant` takes.
    pub fn name(self) -> &'static str {
        match self {
            Plant::UnstageAfterFirstUnpublish => "unstage-after-first-unpublish",
            Plant::DetachWithoutWaitingForUnmount => "detach-without-waiting-for-unmount",
            Plant::DeleteReleasedRetain => "delete-released-retain",
            Plant::ForgetInFlightOnRestart => "forget-in-flight-on-restart",
            Plant::BindClaimedVolume => "bind-claimed-volume",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Plant::UnstageAfterFirstUnpublish => "kubelet unstages after the first pod's unpublish",
            Plant::DetachWithoutWaitingForUnmount => {
                "attach/detach detaches without waiting for unmount"
            }
            Plant::DeleteReleasedRetain => "provisioner deletes Released volumes under Retain",
            Plant::ForgetInFlightOnRestart => {
                "driver forgets in-flight operations and unconfirmed records on restart"
            }
            Plant::BindClaimedVolume => "binder binds volumes another claim holds",
        }
    }

    pub fn parse(s: &str) -> Option<Plant> {
        Plant::ALL.into_iter().find(|p| p.name() == s)
    }
}
