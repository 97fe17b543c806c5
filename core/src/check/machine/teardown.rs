//! Putting away what a run made, and looking for what it left behind.

use super::{Checker, Phase};
use crate::check::generate;
use crate::check::machine::Effect;
use crate::check::oracle::Breach;
use crate::check::oracle::Facts;
use crate::check::protocol::Violation;
use crate::check::rules::Rule;
use crate::check::step::{Shape, Slot, Step};
use crate::check::world::{NodeSeen, World};
use crate::driver::request::{self as rq, Request};
use crate::driver::{ControllerCapability, Secrets};
use std::collections::BTreeSet;

impl Checker {
    /// Puts away what the run made: round after round of the steps that
    /// undo what the first world holds.
    pub(super) fn teardown(&mut self, round: u8) {
        self.phase = Phase::Teardown(round);
        let steps = self.teardown_steps();
        if steps.is_empty() || round >= 4 || self.outcome.driver_gone {
            return self.put_away();
        }
        self.pending_teardown = steps.into();
        self.after_teardown_step();
    }

    /// What undoes what any world the run may be in holds: a call
    /// answered UNAVAILABLE (a storage that was busy) may or may not have
    /// happened, and the worlds where it did not still hold what it was
    /// to put away, so it is sent again (undoing calls are idempotent: a
    /// world where it happened expects OK or NOT_FOUND), as a CO retries.
    /// Unpublishes first, deletes last, as in one world.
    ///
    /// A volume or snapshot whose create's answer was lost has no id to
    /// delete it by: its create is sent again first, as a CO retries until
    /// it is answered, and the next round deletes what it answered.
    fn teardown_steps(&self) -> Vec<Step> {
        let rank = |s: &Step| match s {
            Step::CreateVolume { .. } | Step::CreateSnapshot { .. } => 0,
            Step::NodeUnpublish { .. } => 0,
            Step::NodeUnstage { .. } => 1,
            Step::ControllerUnpublish { .. } => 2,
            Step::DeleteGroupSnapshot { .. } => 3,
            Step::DeleteSnapshot { .. } => 4,
            _ => 5,
        };
        let mut steps = Vec::new();
        let undo = self
            .outcome
            .program
            .iter()
            .flatten()
            .filter_map(|s| undo(s, &self.outcome.facts));
        // A stopped run's worlds may not hold what its last calls made
        // (no world explains a broken rule's answers): every call that may
        // have made something is undone too, unjudged.
        let undo: Vec<Step> = if self.stopped {
            undo.collect()
        } else {
            Vec::new()
        };
        for w in &self.worlds {
            for step in self
                .unanswered_creates(w)
                .into_iter()
                .chain(generate::teardown(w, &self.outcome.facts))
                .chain(undo.iter().copied())
            {
                if !steps.contains(&step) {
                    steps.push(step);
                }
            }
        }
        steps.sort_by_key(rank);
        steps
    }

    /// The creates to send again in `w`: of each volume and snapshot whose
    /// create's answer was lost, the same create (the same name, size,
    /// source and requirement).
    fn unanswered_creates(&self, w: &World) -> Vec<Step> {
        let names = &self.config.names;
        let volumes = w.volumes.iter().filter(|(_, vol)| vol.id.is_none());
        let volumes = volumes.map(|(&v, vol)| {
            let shape = match (vol.source, vol.away) {
                (Some(source), _) => source,
                (None, Some(away)) => Shape::Elsewhere {
                    here_too: away.here_too,
                },
                (None, None) if vol.asked > names.range(Shape::Plain).required_bytes => {
                    Shape::Larger
                }
                (None, None) => Shape::Plain,
            };
            Step::CreateVolume { v, shape }
        });
        let snapshots = w.snapshots.iter().filter(|(_, snap)| snap.id.is_none());
        let snapshots = snapshots.map(|(&s, snap)| Step::CreateSnapshot { s, v: snap.of });
        volumes.chain(snapshots).collect()
    }

    pub(super) fn after_teardown_step_judged(&mut self, round: u8) {
        if self.pending_teardown.is_empty() {
            return self.teardown(round + 1);
        }
        self.after_teardown_step();
    }

    pub(super) fn after_teardown_step(&mut self) {
        match self.pending_teardown.pop_front() {
            Some(step) => {
                self.groups += 1;
                self.start(vec![step]);
            }
            None if self.stopped => self.put_away(),
            None => {
                let Phase::Teardown(round) = self.phase else {
                    return self.put_away();
                };
                self.teardown(round + 1)
            }
        }
    }

    /// The teardown is over: what the run made that no step names any
    /// more is deleted by id, then what the storage lists is taken (when
    /// the driver lists and still serves), then the node is looked at.
    fn put_away(&mut self) {
        if !self.outcome.driver_gone && self.phase != Phase::Strays {
            self.strays = self.stray_deletes().into();
            self.phase = Phase::Strays;
            return self.next_stray();
        }
        if self.outcome.driver_gone || self.stopped {
            return self.leftovers();
        }
        self.take_inventory(false);
    }

    /// Deletes of what the run's creates made and no delete answered OK
    /// for: a second volume or snapshot answered for one name (a driver's
    /// race), one its slot's later create displaced, one a create that
    /// had to fail made (it broke a rule, so no world holds it and the
    /// teardown never named it), one whose teardown delete failed.
    /// Snapshots first. Only ids the run was handed: nothing else on the
    /// storage is touched.
    fn stray_deletes(&self) -> Vec<Request> {
        let snapshots = self.made.snapshots.iter();
        let volumes = self.made.volumes.iter();
        snapshots
            .map(|id| {
                Request::DeleteSnapshot(rq::DeleteSnapshot {
                    snapshot_id: id.clone(),
                    secrets: Secrets::default(),
                })
            })
            .chain(volumes.map(|id| {
                Request::DeleteVolume(rq::DeleteVolume {
                    volume_id: id.clone(),
                    secrets: Secrets::default(),
                })
            }))
            .collect()
    }

    /// Sends the next stray delete (unjudged: the run is over), or goes on
    /// putting away.
    pub(super) fn next_stray(&mut self) {
        match self.strays.pop_front() {
            Some(delete) => self.ask(delete),
            None => self.put_away(),
        }
    }

    /// Looks for anything of the run still mounted.
    pub(super) fn leftovers(&mut self) {
        self.phase = Phase::Leftovers;
        let op = self.op();
        self.looking = Some(op);
        let under = self.config.names.run_dirs().to_vec();
        // Loop devices are judged only when nothing else attaches any.
        let outside = self.config.watch_outside;
        self.queue.push_back(Effect::Look {
            op,
            paths: Vec::new(),
            under,
            outside,
            storage: self.config.storage_dirs.clone(),
        });
    }

    /// After the CO's own directories are tidied away: anything left under
    /// them is the driver's.
    pub(super) fn look_for_files(&mut self) {
        let op = self.op();
        self.looking = Some(op);
        let under = self.config.names.run_dirs().to_vec();
        self.queue.push_back(Effect::Look {
            op,
            paths: Vec::new(),
            under,
            outside: false,
            storage: Vec::new(),
        });
    }

    /// With everything of the run put away (and no rule broken before),
    /// nothing of it may be left: no mount beneath its directories, no
    /// loop device that was not attached before it, no file.
    pub(super) fn left_behind(&mut self, seen: &NodeSeen) {
        if self.outcome.violation.is_some() || self.stopped {
            return;
        }
        // Only when the run put every volume away.
        if !self.worlds[0].volumes.is_empty() || !self.worlds[0].node.is_empty() {
            return;
        }
        self.outcome.tally.checked(Rule::NoLeaks);
        let loops: Vec<&String> = seen.loops.difference(&self.loops).collect();
        let detail = if !seen.under.is_empty() {
            format!(
                "with every volume of the run unpublished, unstaged and deleted, still mounted: {:?}",
                seen.under
            )
        } else if !loops.is_empty() {
            format!(
                "with every volume of the run deleted, loop devices attached since it began: {loops:?}"
            )
        } else if self.phase == Phase::Tidy && !seen.left.is_empty() {
            format!(
                "with every volume of the run put away and the CO's directories removed, left under the kubelet directory: {:?}",
                seen.left
            )
        } else {
            return;
        };
        self.outcome.tally.violated(Rule::NoLeaks);
        self.outcome.violation = Some(Violation {
            breach: Breach {
                rule: Rule::NoLeaks,
                detail,
            },
            group: self.groups,
        });
    }

    /// Unmounts what is still mounted beneath the run's directories (once
    /// judged): a failing run, a shrink replay, a driver that kept a mount
    /// — none leaves anything on the node for the next run or the host.
    pub(super) fn sweep(&mut self, seen: &NodeSeen) {
        if seen.under.is_empty() {
            return self.tidy();
        }
        self.phase = Phase::Sweep;
        let mut mounts: Vec<String> = seen.under.iter().cloned().collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        let op = self.op();
        self.queue.push_back(Effect::Unmount { op, mounts });
    }

    pub(super) fn tidy(&mut self) {
        self.phase = Phase::Tidy;
        let names = &self.config.names;
        let mut dirs = Vec::new();
        for &(v, t) in &self.touched {
            let target = names.target(v, t);
            // …/pods/<pod>/volumes/kubernetes.io~csi/<pv>/mount: its parents up to the pod.
            let mut p = target.as_str();
            for _ in 0..4 {
                p = p.rsplit_once('/').map_or(p, |(parent, _)| parent);
                dirs.push(p.to_string());
            }
        }
        let vols: BTreeSet<Slot> = self.touched.iter().map(|(v, _)| *v).collect();
        for v in vols.into_iter().chain(0..self.config.bounds.volumes) {
            let staging = names.staging(v);
            dirs.push(staging.clone());
            dirs.push(
                staging
                    .rsplit_once('/')
                    .map_or(staging.clone(), |(p, _)| p.to_string()),
            );
        }
        dirs.sort_by_key(|d| std::cmp::Reverse(d.len()));
        dirs.dedup();
        let op = self.op();
        self.queue.push_back(Effect::Tidy { op, dirs });
    }
}

/// The call that undoes what `step` may have made, if it makes anything.
fn undo(step: &Step, facts: &Facts) -> Option<Step> {
    Some(match *step {
        Step::CreateVolume { v, .. } => Step::DeleteVolume { v },
        Step::ControllerPublish {
            v,
            known_node: true,
            ..
        } if facts.has(ControllerCapability::PublishUnpublishVolume) => {
            Step::ControllerUnpublish { v }
        }
        Step::NodeStage { v, .. } => Step::NodeUnstage { v },
        Step::NodePublish { v, t, .. } => Step::NodeUnpublish { v, t },
        Step::CreateSnapshot { s, .. } => Step::DeleteSnapshot { s },
        Step::CreateGroupSnapshot { g, .. } => Step::DeleteGroupSnapshot { g },
        _ => return None,
    })
}
