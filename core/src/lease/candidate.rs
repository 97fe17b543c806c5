//! One leader-election candidate as a machine, with the face every machine
//! has: it asks for a read of the Lease every retry period, decides with
//! its [`Elector`], asks for the write, and says when it starts and stops
//! leading. The adapter carries out the reads and writes (preconditioned
//! on the resourceVersion read) and runs the work only between
//! [`LeaseEffect::Leading`]`(true)` and [`LeaseEffect::Leading`]`(false)`.
//!
//! Leadership ends at the renew deadline of the last successful renewal,
//! by a timer, whatever the API server answers or fails to answer: a
//! candidate cut off from the API server stops acting before any other
//! may take over.

use std::collections::VecDeque;

use super::{Decision, Elector, LeaseRecord, LeaseTimings};
use crate::machine::Machine;
use crate::{OpId, Tick};

/// What a candidate is told.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeaseInput {
    /// The read polled as `op` answered: the Lease, `None` when there is
    /// none, `Err` when the read failed.
    Read {
        /// The read.
        op: OpId,
        /// What it found.
        result: Result<Option<LeaseRecord>, crate::api::ApiFailure>,
    },
    /// The write polled as `op` answered: whether it was stored.
    Written {
        /// The write.
        op: OpId,
        /// True when the API server stored it.
        ok: bool,
    },
}

/// What a candidate asks of its adapter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeaseEffect {
    /// Read the Lease; answer with [`LeaseInput::Read`].
    Read {
        /// The read.
        op: OpId,
    },
    /// Write the Lease (create it when `create`, else update it with
    /// `record.resource_version` as the precondition); answer with
    /// [`LeaseInput::Written`].
    Write {
        /// The write.
        op: OpId,
        /// The Lease is missing: create it.
        create: bool,
        /// What to write.
        record: LeaseRecord,
        /// The holder changes with this write (its acquireTime is set).
        acquired: bool,
    },
    /// Start (true) or stop (false) the work only a leader does.
    Leading(bool),
}

impl LeaseEffect {
    /// The answer that says a call failed without an answer (it timed out,
    /// or its answer was lost), whatever the API server did with it: a
    /// read found nothing usable, a write is not known to be stored.
    /// `None` for [`LeaseEffect::Leading`], which is not a call.
    pub fn unanswered(&self, why: &str) -> Option<LeaseInput> {
        match self {
            LeaseEffect::Read { op } => Some(LeaseInput::Read {
                op: *op,
                result: Err(crate::api::ApiFailure::Timeout(why.to_string())),
            }),
            LeaseEffect::Write { op, .. } => Some(LeaseInput::Written { op: *op, ok: false }),
            LeaseEffect::Leading(_) => None,
        }
    }
}

/// Which call is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pending {
    Read(OpId),
    /// A write decided at the tick given.
    Write(OpId, Tick),
}

/// A leader-election candidate. See the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Candidate {
    elector: Elector,
    pending: Option<Pending>,
    /// When the next round starts (None while one is in flight).
    next_round: Option<Tick>,
    /// What the adapter was last told: leading or not.
    announced: bool,
    queue: VecDeque<LeaseEffect>,
    next_op: u64,
    now: Tick,
}

impl Candidate {
    /// A candidate `identity` with `timings`, which tries at once.
    pub fn new(identity: &str, timings: LeaseTimings) -> Candidate {
        Candidate {
            elector: Elector::new(identity, timings),
            pending: None,
            next_round: Some(0),
            announced: false,
            queue: VecDeque::new(),
            next_op: 0,
            now: 0,
        }
    }

    /// Who this candidate is.
    pub fn identity(&self) -> &str {
        self.elector.identity()
    }

    /// True when this candidate has said it leads and has not yet said it
    /// stopped: the work runs.
    pub fn acting(&self) -> bool {
        self.announced
    }

    /// True when the work may act at `now`: this candidate said it leads
    /// and its renew deadline has not passed. An adapter asks before each
    /// effect of the work it carries (a process resumed after a long pause
    /// must not act before its timer has had a chance to stop it).
    pub fn acting_at(&self, now: Tick) -> bool {
        self.announced && self.elector.leading(now)
    }

    /// The end of the current leadership, if any.
    pub fn leading_until(&self) -> Option<Tick> {
        self.elector.leading_until()
    }

    fn op(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }

    fn start_round(&mut self) {
        let op = self.op();
        self.pending = Some(Pending::Read(op));
        self.next_round = None;
        self.queue.push_back(LeaseEffect::Read { op });
    }

    fn end_round(&mut self) {
        self.pending = None;
        self.next_round = Some(self.elector.next_try(self.now));
    }

    /// Says whether the work may run now: leadership starts with a stored
    /// write and ends at its renew deadline.
    fn announce(&mut self) {
        let leading = self.elector.leading(self.now);
        if leading != self.announced {
            self.announced = leading;
            self.queue.push_back(LeaseEffect::Leading(leading));
        }
    }

    fn read(&mut self, result: Result<Option<LeaseRecord>, crate::api::ApiFailure>) {
        let Ok(lease) = result else {
            return self.end_round();
        };
        let decided = self.now;
        let previous_holder = lease.as_ref().map(|l| l.holder.clone());
        let (create, record) = match self.elector.decide(decided, lease) {
            Decision::Wait => return self.end_round(),
            Decision::Create(r) => (true, r),
            Decision::Update(r) => (false, r),
        };
        let acquired = previous_holder.as_deref() != Some(record.holder.as_str());
        let op = self.op();
        self.pending = Some(Pending::Write(op, decided));
        self.queue.push_back(LeaseEffect::Write {
            op,
            create,
            record,
            acquired,
        });
    }
}

impl Machine for Candidate {
    type Input = LeaseInput;
    type Effect = LeaseEffect;

    fn handle(&mut self, now: Tick, input: LeaseInput) {
        self.now = self.now.max(now);
        match (input, self.pending) {
            (LeaseInput::Read { op, result }, Some(Pending::Read(p))) if op == p => {
                self.read(result)
            }
            (LeaseInput::Written { op, ok }, Some(Pending::Write(p, decided))) if op == p => {
                self.elector.wrote(decided, ok);
                self.end_round();
            }
            // A late answer to a call given up on.
            _ => {}
        }
        self.announce();
    }

    fn poll(&mut self) -> Option<LeaseEffect> {
        self.queue.pop_front()
    }

    fn poll_timeout(&self) -> Option<Tick> {
        let ends = self
            .announced
            .then(|| self.elector.leading_until())
            .flatten();
        match (self.next_round, ends) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Tick) {
        self.now = self.now.max(now);
        if self.next_round.is_some_and(|t| t <= self.now) {
            self.start_round();
        }
        self.announce();
    }

    /// Acting only within the renew deadline of a stored write.
    fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        if self.announced && !self.elector.leading(self.now) {
            return Err(format!(
                "lease: {} acts at {} past its renew deadline ({:?})",
                self.identity(),
                self.now,
                self.elector.leading_until()
            )
            .into());
        }
        Ok(())
    }
}
