//! The next step, chosen at random from what makes sense now: mostly the
//! lifecycle a CO drives (create, attach, stage, publish, and back down),
//! often the same call again (as a CO retries after a timeout), and now
//! and then what a CO should not send or a driver must refuse.

use serde::{Deserialize, Serialize};

use super::choose::Chooser;
use super::oracle::Facts;
use super::step::{Shape, Slot, StatsAt, Step};
use super::world::World;
use crate::driver::{ControllerCapability as C, NodeCapability as N};

/// How many volumes, targets and snapshots a run plays with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// Volume slots.
    pub volumes: Slot,
    /// Target slots per volume.
    pub targets: Slot,
    /// Snapshot slots.
    pub snapshots: Slot,
    /// Steps that kill and restart the driver, per thousand (0: none).
    pub restarts_per_mille: u32,
    /// The run has mutable parameters to modify volumes with.
    #[serde(default)]
    pub mutable_parameters: bool,
    /// The driver was declared to need the secrets file's credentials: a
    /// CreateVolume is now and then sent without them.
    #[serde(default)]
    pub secrets_required: bool,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            volumes: 3,
            targets: 2,
            snapshots: 2,
            restarts_per_mille: 0,
            mutable_parameters: false,
            secrets_required: false,
        }
    }
}

/// The next step in world `w`, or the `last` one again.
pub fn next(
    rng: &mut Chooser,
    w: &World,
    facts: &Facts,
    bounds: &Bounds,
    last: Option<Step>,
) -> Step {
    if let Some(last) = last
        && !last.alone()
        && rng.chance(120)
    {
        return last;
    }
    if bounds.restarts_per_mille > 0 && rng.chance(bounds.restarts_per_mille) {
        return Step::Restart;
    }
    let mut choices: Vec<(u32, Step)> = Vec::new();
    let v = rng.below(usize::from(bounds.volumes)) as Slot;
    let t = rng.below(usize::from(bounds.targets)) as Slot;
    let s = rng.below(usize::from(bounds.snapshots.max(1))) as Slot;
    lifecycle(&mut choices, w, facts, bounds, v, t);
    oddities(&mut choices, w, facts, v, t);
    // One new name in ten goes without the credentials declared needed.
    if bounds.secrets_required && !w.volumes.contains_key(&v) {
        choices.push((
            12,
            Step::CreateVolume {
                v,
                shape: Shape::NoSecrets,
            },
        ));
    }
    // A new name in ten or so asks for a volume beyond this node's segment.
    if facts.topology.as_ref().is_some_and(|t| !t.is_empty()) && !w.volumes.contains_key(&v) {
        for here_too in [false, true] {
            choices.push((
                6,
                Step::CreateVolume {
                    v,
                    shape: Shape::Elsewhere { here_too },
                },
            ));
        }
    }
    queries(&mut choices, w, facts, bounds, v, t);
    snapshots(&mut choices, w, facts, v, s);
    let total: u32 = choices.iter().map(|(weight, _)| weight).sum();
    let mut pick = rng.below(total as usize) as u32;
    for (weight, step) in &choices {
        if pick < *weight {
            return *step;
        }
        pick -= weight;
    }
    Step::CreateVolume {
        v,
        shape: Shape::Plain,
    }
}

/// The CO's own path, forward and back, for volume `v`.
fn lifecycle(out: &mut Vec<(u32, Step)>, w: &World, facts: &Facts, b: &Bounds, v: Slot, t: Slot) {
    let attach = facts.has(C::PublishUnpublishVolume);
    let stages = facts.node_has(N::StageUnstageVolume);
    let Some(vol) = w.volumes.get(&v) else {
        // Whatever the node still holds of a deleted volume goes first:
        // the slot's next volume is another.
        let n = w.node(v);
        if let Some(&t) = n.targets.keys().next() {
            out.push((40, Step::NodeUnpublish { v, t }));
        } else if n.staged.is_some() {
            out.push((40, Step::NodeUnstage { v }));
        } else {
            out.push((
                120,
                Step::CreateVolume {
                    v,
                    shape: Shape::Plain,
                },
            ));
            // Filled only from what this node reaches.
            if let Some((&s, _)) = w.snapshots.iter().find(|(_, s)| !s.away) {
                out.push((
                    20,
                    Step::CreateVolume {
                        v,
                        shape: Shape::FromSnapshot(s),
                    },
                ));
            }
            if facts.has(C::CloneVolume)
                && let Some((&from, _)) = w.volumes.iter().find(|(_, vol)| vol.reachable())
            {
                out.push((
                    15,
                    Step::CreateVolume {
                        v,
                        shape: Shape::Clone(from),
                    },
                ));
            }
        }
        return;
    };
    let n = w.node(v);
    if !vol.reachable() {
        // Kept off this node: only deleted.
        if vol.published.is_none() && n.is_empty() {
            out.push((40, Step::DeleteVolume { v }));
        }
        return;
    }
    let ready = !attach || vol.published.is_some();
    if attach && vol.published.is_none() {
        out.push((
            80,
            Step::ControllerPublish {
                v,
                known_node: true,
                readonly: false,
            },
        ));
    }
    if stages && ready && n.staged.is_none() {
        out.push((
            80,
            Step::NodeStage {
                v,
                other_mode: false,
            },
        ));
    }
    if facts.node_service && ready && (!stages || n.staged.is_some()) && !n.targets.contains_key(&t)
    {
        out.push((
            80,
            Step::NodePublish {
                v,
                t,
                readonly: false,
            },
        ));
        out.push((
            10,
            Step::NodePublish {
                v,
                t,
                readonly: true,
            },
        ));
    }
    if let Some(&t) = n.targets.keys().next() {
        out.push((50, Step::NodeUnpublish { v, t }));
    }
    if n.staged.is_some() && n.targets.is_empty() {
        out.push((50, Step::NodeUnstage { v }));
    }
    if attach && vol.published.is_some() && n.is_empty() {
        out.push((40, Step::ControllerUnpublish { v }));
    }
    if vol.published.is_none() && n.is_empty() {
        out.push((40, Step::DeleteVolume { v }));
    }
    let _ = b;
}

/// What a CO should not send, or a driver must refuse.
fn oddities(out: &mut Vec<(u32, Step)>, w: &World, facts: &Facts, v: Slot, t: Slot) {
    out.push((
        2,
        Step::CreateVolume {
            v,
            shape: Shape::Unnamed,
        },
    ));
    out.push((
        2,
        Step::CreateVolume {
            v,
            shape: Shape::NoCapability,
        },
    ));
    out.push((3, Step::DeleteVolume { v }));
    let reachable = w.volumes.get(&v).is_none_or(|vol| vol.reachable());
    if facts.node_service && reachable {
        out.push((3, Step::NodeUnpublish { v, t }));
        out.push((
            3,
            Step::NodePublish {
                v,
                t,
                readonly: false,
            },
        ));
    }
    if facts.node_has(N::StageUnstageVolume) && reachable {
        out.push((
            3,
            Step::NodeStage {
                v,
                other_mode: false,
            },
        ));
    }
    if w.volumes.contains_key(&v) {
        out.push((
            4,
            Step::CreateVolume {
                v,
                shape: Shape::Larger,
            },
        ));
        if facts.node_has(N::StageUnstageVolume) {
            out.push((3, Step::NodeUnstage { v }));
        }
        if facts.has(C::PublishUnpublishVolume) {
            out.push((
                3,
                Step::ControllerPublish {
                    v,
                    known_node: false,
                    readonly: false,
                },
            ));
            if facts.has(C::PublishReadonly) && reachable {
                out.push((
                    3,
                    Step::ControllerPublish {
                        v,
                        known_node: true,
                        readonly: true,
                    },
                ));
            }
        }
        if w.node(v).staged.is_some() {
            out.push((
                3,
                Step::NodeStage {
                    v,
                    other_mode: true,
                },
            ));
        }
        if let Some((&t, &ro)) = w.node(v).targets.iter().next() {
            out.push((
                3,
                Step::NodePublish {
                    v,
                    t,
                    readonly: !ro,
                },
            ));
        }
    }
    if facts.has(C::ListVolumes) {
        out.push((2, Step::ListVolumesBadToken));
    }
}

/// Questions: validate, get, list, capacity, stats, expand, and data
/// through two targets.
fn queries(out: &mut Vec<(u32, Step)>, w: &World, facts: &Facts, b: &Bounds, v: Slot, t: Slot) {
    if facts.controller_service {
        out.push((4, Step::Validate { v }));
    }
    if facts.has(C::GetVolume) {
        out.push((4, Step::GetVolume { v }));
    }
    if facts.has(C::ListVolumes) {
        let page = [0, 1, 2][(v as usize + t as usize) % 3];
        out.push((6, Step::ListVolumes { page }));
    }
    if facts.has(C::GetCapacity) {
        out.push((2, Step::GetCapacity));
    }
    if facts.has(C::ExpandVolume) {
        out.push((3, Step::ControllerExpand { v, grow: t }));
    }
    if facts.has(C::ModifyVolume) {
        out.push((1, Step::ControllerModify { v, empty: true }));
        if b.mutable_parameters {
            out.push((3, Step::ControllerModify { v, empty: false }));
        }
    }
    if facts.node_has(N::GetVolumeStats) {
        out.push((
            4,
            Step::Stats {
                v,
                at: StatsAt::Target(t),
            },
        ));
        out.push((
            1,
            Step::Stats {
                v,
                at: StatsAt::Nowhere,
            },
        ));
    }
    let n = w.node(v);
    if facts.node_has(N::ExpandVolume) && n.targets.contains_key(&t) {
        out.push((2, Step::NodeExpand { v, t, grow: 0 }));
    }
    if n.targets.len() >= 2 || (n.targets.len() == 1 && b.targets == 1) {
        let mut ts = n.targets.keys().copied();
        let from = ts.next().unwrap_or(0);
        let to = ts.next().unwrap_or(from);
        out.push((8, Step::Data { v, from, to }));
        out.push((
            4,
            Step::Data {
                v,
                from: to,
                to: from,
            },
        ));
    }
}

/// Snapshots: cut, delete, list.
fn snapshots(out: &mut Vec<(u32, Step)>, w: &World, facts: &Facts, v: Slot, s: Slot) {
    if !facts.has(C::CreateDeleteSnapshot) {
        return;
    }
    match w.snapshots.get(&s) {
        None if w.volumes.contains_key(&v) => out.push((8, Step::CreateSnapshot { s, v })),
        None => out.push((1, Step::CreateSnapshot { s, v })),
        Some(snap) => {
            out.push((6, Step::DeleteSnapshot { s }));
            out.push((2, Step::CreateSnapshot { s, v: snap.of }));
            if snap.of != v {
                out.push((2, Step::CreateSnapshot { s, v }));
            }
        }
    }
    if facts.has(C::ListSnapshots) {
        out.push((3, Step::ListSnapshots { page: 1 + s }));
    }
    if facts.group_snapshots {
        let g = s;
        match w.groups.get(&g) {
            None => {
                // Of volumes this node reaches (a storage may group only
                // volumes of one place).
                let mut vols = (w.volumes.iter())
                    .filter(|(_, vol)| vol.reachable())
                    .map(|(&v, _)| v);
                if let (Some(a), Some(b)) = (vols.next(), vols.next()) {
                    out.push((6, Step::CreateGroupSnapshot { g, a, b }));
                }
            }
            Some(group) => {
                out.push((5, Step::DeleteGroupSnapshot { g }));
                let (a, b) = group.of;
                out.push((2, Step::CreateGroupSnapshot { g, a, b }));
                out.push((2, Step::CreateGroupSnapshot { g, a: b, b: a }));
                if v != a && v != b && w.volumes.get(&v).is_none_or(|vol| vol.reachable()) {
                    out.push((1, Step::CreateGroupSnapshot { g, a, b: v }));
                }
            }
        }
    }
}

/// The steps that put everything of the run away: unpublish every target,
/// unstage, detach, delete every volume and snapshot (in world `w`).
pub fn teardown(w: &World, facts: &Facts) -> Vec<Step> {
    let mut out = Vec::new();
    for (&v, n) in &w.node {
        for &t in n.targets.keys() {
            out.push(Step::NodeUnpublish { v, t });
        }
        if n.staged.is_some() {
            out.push(Step::NodeUnstage { v });
        }
    }
    for (&v, vol) in &w.volumes {
        if vol.published.is_some() && facts.has(C::PublishUnpublishVolume) {
            out.push(Step::ControllerUnpublish { v });
        }
    }
    for &g in w.groups.keys() {
        out.push(Step::DeleteGroupSnapshot { g });
    }
    for &s in w.snapshots.keys() {
        out.push(Step::DeleteSnapshot { s });
    }
    for &v in w.volumes.keys() {
        out.push(Step::DeleteVolume { v });
    }
    out
}
