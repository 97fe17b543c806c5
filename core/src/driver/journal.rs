//! The journal's side of the driver: what a completed plan and a
//! completed persist do to the state, which outcomes may be answered
//! before they are written, and what a restart after a reboot forgets.

use super::*;

/// Outcomes answered before they were written (see the driver's module
/// documentation), and the time of the input being handled. Times are not
/// state: two drivers that differ only in them hash alike (the explorer
/// treats them as one), though whether outcomes wait does count.
#[derive(Debug, Clone, Default)]
pub(super) struct Lazy {
    /// Since when outcomes wait for the next persist.
    pub(super) since: Option<Tick>,
    pub(super) now: Tick,
}

impl std::hash::Hash for Lazy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.since.is_some().hash(state);
    }
}

impl Driver {
    /// After a reboot the node's mounts are gone and the kubelet stages
    /// and publishes again what it still wants: the stages and publishes
    /// recorded are forgotten, and a node operation in flight at the last
    /// stop is not carried out (a publish for a pod since deleted would
    /// mount what nobody unmounts).
    pub(super) fn forget_node_plans_after_reboot(&mut self) {
        let moot: Vec<OpId> = self
            .state
            .in_flight
            .iter()
            .filter(|(_, f)| f.plan.on_node())
            .map(|(op, _)| *op)
            .collect();
        for op in moot {
            if let Some(f) = self.state.in_flight.remove(&op) {
                self.forgotten.push(f.plan.describe());
            }
        }
        // Every stage and publish recorded was undone by the reboot.
        if !self.state.node.is_empty() {
            self.state.node.clear();
        }
        self.dirty = true;
    }

    /// Node operations in flight at the last stop that a reboot made moot
    /// (not carried out again), described for a person.
    pub fn forgotten_after_reboot(&self) -> &[String] {
        &self.forgotten
    }

    /// A persist completed: release what it covered, or fail it.
    pub(super) fn persisted(&mut self, op: OpId, result: Result<(), crate::machine::EffectFailed>) {
        let Some((awaited, covered)) = self.persisting else {
            return;
        };
        if awaited != op {
            return;
        }
        self.persisting = None;
        let written = std::mem::take(&mut self.writing);
        let reason = match result {
            Ok(()) => {
                self.persist_failed = false;
                self.releasable = covered;
                return;
            }
            Err(reason) => reason,
        };
        // Nothing covered may be acknowledged: plans not yet run are
        // dropped and their requests failed, answers become failures. What
        // was to be written is written by the next persist.
        self.state.retouch(written);
        self.persist_failed = true;
        self.dirty = true;
        let status = Status::new(
            crate::Code::Unavailable,
            format!(
                "the driver could not record this operation durably ({reason}); nothing was done or acknowledged, retry"
            ),
        );
        let covered: Vec<Effect> = self.queue.drain(..covered).collect();
        let mut released = VecDeque::new();
        for effect in covered {
            match effect {
                Effect::Execute { op, .. }
                    if !self.recovering.contains(&op)
                        && !self.resumed.contains_key(&op)
                        && self.state.in_flight.contains_key(&op) =>
                {
                    let flight = self.state.in_flight.remove(&op);
                    if let Some(rpc) = flight.and_then(|f| f.rpc) {
                        released.push_back(Effect::Reply {
                            rpc,
                            result: Err(status.clone()),
                        });
                    }
                }
                Effect::Reply { rpc, result: Ok(_) } => released.push_back(Effect::Reply {
                    rpc,
                    result: Err(status.clone()),
                }),
                other => released.push_back(other),
            }
        }
        self.releasable = released.len();
        released.extend(self.queue.drain(..));
        self.queue = released;
    }

    pub(super) fn complete(&mut self, op: OpId, result: Result<Outcome, Status>) {
        match self.queries.remove(&op) {
            Some(Query::Answer(rpc)) => {
                let result = result.and_then(|o| self.answer_query(o));
                self.queue.push_back(Effect::Reply { rpc, result });
                return;
            }
            Some(Query::Then {
                rpc,
                asking,
                request,
                asked,
            }) => {
                self.looked_up(rpc, asking, *request, asked, result);
                return;
            }
            None => {}
        }
        if self.parked.contains(&op) {
            // A completion of the last process's call, which this one
            // never handed out: the plan still waits for its retry.
            return;
        }
        let Some(flight) = self.state.in_flight.remove(&op) else {
            // A completion for an operation we do not know (duplicated, or
            // from before a restart that already re-ran it): nothing to do.
            return;
        };
        let recovered = self.recovering.remove(&op);
        // A plan that would be carried out again at a restart: its outcome
        // may be answered before it is written.
        // A node plan only when a reboot would be known: replayed after
        // one, it would mount again what the kubelet no longer wants.
        // Planted: a create's record is written before it is answered (a
        // driver that records after success), so only an interrupted one
        // is forgotten.
        let forgets_creates = matches!(flight.plan, Plan::CreateVolume(_))
            && self
                .config
                .plant
                .is(crate::plant::Plant::ForgetInterruptedCreate);
        let replayable = !flight.credentialed
            && (!flight.plan.on_node() || !self.state.boot.is_empty())
            && !recovered
            && !self.resumed.contains_key(&op)
            && !forgets_creates;
        let result = match flight.plan {
            Plan::CreateVolume(p) => self.created(p, result),
            Plan::DeleteVolume { volume, .. } => self.deleted(&volume.volume_id, result),
            Plan::ControllerPublish {
                volume, node_id, ..
            } => self.controller_published(&volume.volume_id, &node_id, result),
            Plan::ControllerUnpublish {
                volume, node_ids, ..
            } => self.controller_unpublished(&volume.volume_id, &node_ids, result),
            Plan::ControllerExpand {
                volume, capacity, ..
            } => self.controller_expanded(&volume.volume_id, capacity, result),
            Plan::ControllerModify {
                volume,
                mutable_parameters,
                ..
            } => self.controller_modified(&volume.volume_id, mutable_parameters, result),
            Plan::CreateSnapshot(p) => self.snapshot_created(p, result),
            Plan::DeleteSnapshot { snapshot, .. } => {
                self.snapshot_deleted(&snapshot.snapshot_id, result)
            }
            Plan::CreateGroupSnapshot(p) => self.group_created(p, result),
            Plan::DeleteGroupSnapshot { group, .. } => {
                self.group_deleted(&group.group_snapshot_id, result)
            }
            Plan::Stage(p) => self.staged(&p, result),
            Plan::Unstage(p) => self.unstaged(&p, result),
            Plan::Publish(p) => self.published(&p, result),
            Plan::Unpublish(p) => self.unpublished(&p, result),
            Plan::NodeExpand {
                volume_id,
                required_bytes,
                ..
            } => self.node_expanded(&volume_id, required_bytes, result),
            Plan::GetCapacity { .. }
            | Plan::VolumeStats { .. }
            | Plan::LookupVolume { .. }
            | Plan::LookupSnapshot { .. }
            | Plan::ListVolumes { .. }
            | Plan::ListSnapshots { .. } => Err(Status::internal(
                "a query was recorded as a mutating operation",
            )),
        };
        if replayable && result.is_ok() {
            self.lazy.since.get_or_insert(self.lazy.now);
        } else {
            self.dirty = true;
        }
        if let Some((rpc, request)) = self.resumed.remove(&op) {
            self.resumed_done(rpc, request, result);
        } else if let Some(rpc) = flight.rpc {
            self.queue.push_back(Effect::Reply { rpc, result });
        }
    }

    /// The answer a query's outcome gives.
    fn answer_query(&self, outcome: Outcome) -> Result<Response, Status> {
        Ok(match outcome {
            Outcome::Capacity {
                available_bytes,
                maximum_volume_size,
                minimum_volume_size,
            } => Response::Capacity {
                available_bytes: if self
                    .config
                    .plant
                    .is(crate::plant::Plant::CapacityBelowGranted)
                {
                    0
                } else {
                    available_bytes
                },
                maximum_volume_size,
                minimum_volume_size,
            },
            Outcome::Stats { usage, condition } => Response::Stats { usage, condition },
            Outcome::VolumesListed(page) => self.listed_from_storage(page)?,
            Outcome::SnapshotsListed(page) => self.snapshots_from_storage(page)?,
            _ => Response::Empty,
        })
    }
}
