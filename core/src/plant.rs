//! Known mistakes the simulator can plant in the machines, to show that it
//! finds them. A machine's config carries a [`Planted`], which only a build
//! with the `plants` feature (the `volplane sim` of such a build, and this
//! crate's own tests) can set: in any other build it is empty, every check
//! of it is a constant `false`, and the planted code is compiled out.

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
    /// provisioner: retry a failed write of a PV (its finalizer) at once,
    /// with nothing new known (issue 28's livelock, before its mend).
    RetryFailedWriteAtOnce,
    /// provisioner: leave the class's allowedTopologies out of CreateVolume's
    /// requirements (the cluster's segments stand in for them).
    IgnoreAllowedTopologies,
    /// resizer: take a failed ControllerModifyVolume as done (the claim
    /// then says its volume has a class it does not have).
    ModifyIgnoresFailure,
    /// capacity: no refresh when a volume appears in or leaves a segment
    /// (the objects then say what was free before).
    CapacityIgnoresVolumes,
    /// driver: a CreateVolume repeated while the first is still in flight
    /// (a CO's retry after a timeout) makes a second volume.
    CreateRepeatsInFlight,
    /// driver: a CreateVolume under an existing name with an incompatible
    /// size answers OK with the existing volume (not ALREADY_EXISTS).
    AnswerIncompatibleRepeat,
    /// driver: NodePublishVolume answers OK without mounting anything.
    PublishWithoutMount,
    /// driver: NodeUnstageVolume unmounts the staging path although
    /// targets are still published.
    UnstageWhilePublished,
    /// driver: ListVolumes' next page starts one volume too late.
    ListSkipsOne,
    /// driver: its volume table is lost on restart (kept in memory only).
    ForgetVolumesOnRestart,
    /// driver: its stage and publish records are lost on restart, so an
    /// unpublish after it answers OK and leaves the mount.
    ForgetMountsOnRestart,
    /// driver: DeleteVolume and ControllerPublishVolume of one volume run
    /// at once, unserialised, and both succeed.
    DeleteRacesPublish,
    /// driver: DeleteVolume forgets the volume and answers OK, and its
    /// storage keeps it (the orphan a killed process's late create leaves).
    DeleteKeepsStorage,
    /// driver: CreateVolume answers a volume in a topology segment none of
    /// the requisite segments allows (made where it was not asked for).
    IgnoreTopologyRequirement,
    /// driver: GetCapacity says nothing is free, and creates still succeed
    /// (a CO keeps every pod of the class off the node).
    CapacityBelowGranted,
    /// driver: every CreateVolume attempt makes its volume under an id of
    /// its own (a random id, as csi-driver-host-path's), recorded only when
    /// the create completes; a create interrupted by a restart is forgotten,
    /// and the CO's retry makes a second volume: the first stays on the
    /// storage, listed by nobody's records.
    ForgetInterruptedCreate,
}

impl Plant {
    /// The plants in the driver machine, which `volplane check` finds
    /// (`VOLPLANE_PLANT=<name>` for a `volplane serve` built with them).
    pub const DRIVER: [Plant; 12] = [
        Plant::CreateRepeatsInFlight,
        Plant::AnswerIncompatibleRepeat,
        Plant::PublishWithoutMount,
        Plant::UnstageWhilePublished,
        Plant::ListSkipsOne,
        Plant::ForgetVolumesOnRestart,
        Plant::ForgetMountsOnRestart,
        Plant::DeleteRacesPublish,
        Plant::DeleteKeepsStorage,
        Plant::IgnoreTopologyRequirement,
        Plant::CapacityBelowGranted,
        Plant::ForgetInterruptedCreate,
    ];

    /// Every plant the simulator finds, in `--list-plants` order.
    pub const ALL: [Plant; 9] = [
        Plant::UnstageAfterFirstUnpublish,
        Plant::DetachWithoutWaitingForUnmount,
        Plant::DeleteReleasedRetain,
        Plant::ForgetInFlightOnRestart,
        Plant::BindClaimedVolume,
        Plant::RetryFailedWriteAtOnce,
        Plant::IgnoreAllowedTopologies,
        Plant::ModifyIgnoresFailure,
        Plant::CapacityIgnoresVolumes,
    ];

    /// The name `--plant` takes.
    pub fn name(self) -> &'static str {
        match self {
            Plant::UnstageAfterFirstUnpublish => "unstage-after-first-unpublish",
            Plant::DetachWithoutWaitingForUnmount => "detach-without-waiting-for-unmount",
            Plant::DeleteReleasedRetain => "delete-released-retain",
            Plant::ForgetInFlightOnRestart => "forget-in-flight-on-restart",
            Plant::BindClaimedVolume => "bind-claimed-volume",
            Plant::RetryFailedWriteAtOnce => "retry-failed-write-at-once",
            Plant::IgnoreAllowedTopologies => "ignore-allowed-topologies",
            Plant::ModifyIgnoresFailure => "modify-ignores-failure",
            Plant::CapacityIgnoresVolumes => "capacity-ignores-volumes",
            Plant::CreateRepeatsInFlight => "create-repeats-in-flight",
            Plant::AnswerIncompatibleRepeat => "answer-incompatible-repeat",
            Plant::PublishWithoutMount => "publish-without-mount",
            Plant::UnstageWhilePublished => "unstage-while-published",
            Plant::ListSkipsOne => "list-skips-one",
            Plant::ForgetVolumesOnRestart => "forget-volumes-on-restart",
            Plant::ForgetMountsOnRestart => "forget-mounts-on-restart",
            Plant::DeleteRacesPublish => "delete-races-publish",
            Plant::DeleteKeepsStorage => "delete-keeps-storage",
            Plant::IgnoreTopologyRequirement => "ignore-topology-requirement",
            Plant::CapacityBelowGranted => "capacity-below-granted",
            Plant::ForgetInterruptedCreate => "forget-interrupted-create",
        }
    }

    /// What the plant breaks, for a person.
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
            Plant::RetryFailedWriteAtOnce => {
                "provisioner retries a failed PV write at once, with nothing new (a hot loop)"
            }
            Plant::IgnoreAllowedTopologies => "provisioner ignores the class's allowedTopologies",
            Plant::ModifyIgnoresFailure => "resizer takes a failed ControllerModifyVolume as done",
            Plant::CapacityIgnoresVolumes => {
                "capacity tracker does not refresh when volumes come and go"
            }
            Plant::CreateRepeatsInFlight => {
                "driver makes a second volume for a CreateVolume repeated while the first is in flight"
            }
            Plant::AnswerIncompatibleRepeat => {
                "driver answers OK to an incompatible CreateVolume of an existing name"
            }
            Plant::PublishWithoutMount => "driver answers NodePublishVolume OK without a mount",
            Plant::UnstageWhilePublished => "driver unstages a volume still published at targets",
            Plant::ListSkipsOne => "driver's ListVolumes pages skip a volume",
            Plant::ForgetVolumesOnRestart => "driver forgets its volumes when restarted",
            Plant::ForgetMountsOnRestart => {
                "driver forgets its mounts when restarted, and leaks them on unpublish"
            }
            Plant::DeleteRacesPublish => {
                "driver runs DeleteVolume and ControllerPublishVolume of one volume at once"
            }
            Plant::DeleteKeepsStorage => {
                "driver answers DeleteVolume OK and leaves the volume on its storage"
            }
            Plant::IgnoreTopologyRequirement => {
                "driver makes volumes outside the requisite topology it was given"
            }
            Plant::CapacityBelowGranted => {
                "driver's GetCapacity says less is free than its creates then grant"
            }
            Plant::ForgetInterruptedCreate => {
                "driver forgets a create interrupted by a restart; the retry makes a second volume"
            }
        }
    }

    /// The plant `--plant` names.
    pub fn parse(s: &str) -> Option<Plant> {
        Plant::ALL
            .into_iter()
            .chain(Plant::DRIVER)
            .find(|p| p.name() == s)
    }
}

/// The mistakes planted in one machine: none, unless this build has the
/// `plants` feature and a simulation or a test asked for some (several at
/// once: a checker must tell their failures apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Planted(#[cfg(any(test, feature = "plants"))] u32);

impl Planted {
    /// Plants `plant` (only in a build with the `plants` feature).
    #[cfg(any(test, feature = "plants"))]
    pub fn new(plant: Option<Plant>) -> Planted {
        Planted(plant.map_or(0, |p| 1 << p as u32))
    }

    /// These mistakes and `plant` (only in a build with the `plants` feature).
    #[cfg(any(test, feature = "plants"))]
    pub fn with(self, plant: Plant) -> Planted {
        Planted(self.0 | 1 << plant as u32)
    }

    /// True when `plant` is among the mistakes planted here.
    #[inline]
    pub fn is(self, plant: Plant) -> bool {
        #[cfg(any(test, feature = "plants"))]
        return self.0 & (1 << plant as u32) != 0;
        #[cfg(not(any(test, feature = "plants")))]
        {
            let _ = plant;
            false
        }
    }

    /// The mistake planted (the first, when there are several), if any.
    pub fn get(self) -> Option<Plant> {
        #[cfg(any(test, feature = "plants"))]
        return Plant::ALL
            .into_iter()
            .chain(Plant::DRIVER)
            .find(|p| self.is(*p));
        #[cfg(not(any(test, feature = "plants")))]
        None
    }
}
