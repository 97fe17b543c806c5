//! How a simulation runs: its fault rates and its size (its seeded
//! randomness is [`crate::rng`]).

use crate::Tick;
use crate::plant::Planted;

pub use crate::rng::Rng;

/// Fault rates, per mille of opportunities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Per CSI call: an error the spec allows, before any effect.
    pub csi_error: u32,
    /// Per CSI call: a timeout after the effect happened.
    pub csi_timeout: u32,
    /// Per CSI call: the driver crashes after the effect.
    pub driver_crash: u32,
    /// Per step: a controller or kubelet restarts.
    pub restart: u32,
    /// Per step: a node reboots.
    pub reboot: u32,
    /// Per API write: a resourceVersion conflict.
    pub api_conflict: u32,
    /// Per watch event: delivered twice.
    pub duplicate_watch: u32,
}

impl Faults {
    /// Every kind of fault at a rate derived from `rate` (0.0–1.0 of CSI calls).
    pub fn at(rate: f64) -> Faults {
        let r = (rate.clamp(0.0, 1.0) * 1000.0) as u32;
        Faults {
            csi_error: r,
            csi_timeout: r / 2,
            driver_crash: r / 4,
            restart: r / 20,
            reboot: r / 40,
            api_conflict: r / 2,
            duplicate_watch: r / 2,
        }
    }
}

/// How a simulation runs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How many nodes.
    pub nodes: usize,
    /// The seed of everything random.
    pub seed: u64,
    /// The fault rates.
    pub faults: Faults,
    /// A planted bug, in builds that have them.
    pub plant: Planted,
    /// Whether [`super::Sim::trace`] is written. A run is deterministic, so
    /// a search runs without it and replays a failing run with it.
    pub trace: bool,
    /// Whether storage capacity is tracked (CSIStorageCapacity objects):
    /// in every other run, as `--enable-capacity` is a choice of the
    /// operator's (the tracker's events and calls also slow a run's
    /// lifecycle, which the other runs then reach further into).
    pub capacity: bool,
    /// How far the clock moves with each delivery (1 in a random run; the
    /// explorer's 0 puts everything between two timers at one instant).
    pub delivery_ticks: Tick,
}

impl SimConfig {
    /// `nodes` nodes, seeded with `seed`, no faults.
    pub fn new(nodes: usize, seed: u64) -> SimConfig {
        SimConfig {
            nodes,
            seed,
            faults: Faults::default(),
            plant: Planted::default(),
            trace: true,
            capacity: seed % 2 == 1,
            delivery_ticks: 1,
        }
    }
}
