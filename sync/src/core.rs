//! The pump's core: owns the driver machine, takes requests with the slots
//! their handlers wait on, feeds plan completions, and answers. What a pump
//! must do beyond this (persist, carry out plans) comes out as
//! [`Work`]; the runtime-neutral pump in `volplane-service` does it.

use std::collections::BTreeMap;

use volplane_core::driver::state::Change;
use volplane_core::driver::{Driver, Effect, Input, Outcome, Plan, Request, Response, RpcId};
use volplane_core::machine::{self, EffectFailed, Machine};
use volplane_core::{OpId, Status, Tick};

use crate::reply::ReplySender;

/// An answer for an RPC handler.
pub type Answer = Result<Response, Status>;

/// What the pump must do for the machine, in this order.
#[derive(Debug)]
pub enum Work {
    /// Write `changes` (the records changed since the last persist) in one
    /// transaction, then hand the outcome to [`PumpCore::persisted`]; the
    /// machine says nothing more until then.
    Persist {
        /// The persist's id, for [`PumpCore::persisted`].
        op: OpId,
        /// The records to write.
        changes: Vec<Change>,
    },
    /// Carry out `plan` and hand its outcome to [`PumpCore::complete`].
    Execute {
        /// The operation's id, for [`PumpCore::complete`].
        op: OpId,
        /// What to carry out.
        plan: Plan,
    },
}

/// What the pump's core is told.
#[derive(Debug)]
pub enum PumpInput {
    /// A request arrived with the slot its handler waits on.
    Request(Request, ReplySender<Answer>),
    /// A plan handed out as [`Work::Execute`] completed.
    Done(OpId, Result<Outcome, Status>),
    /// A persist handed out as [`Work::Persist`] completed (or failed: the
    /// requests it covered are then answered `UNAVAILABLE`).
    Persisted(OpId, Result<(), EffectFailed>),
    /// The mailbox closed: every handle is gone and no request will come.
    Closed,
}

/// The driver machine and the handlers waiting for it, as a machine of the
/// one face: told [`PumpInput`]s, it answers handlers itself and asks the
/// pump for [`Work`].
#[derive(Debug)]
pub struct PumpCore {
    driver: Driver,
    waiting: BTreeMap<RpcId, ReplySender<Answer>>,
    next_rpc: RpcId,
    closed: bool,
}

impl PumpCore {
    /// Owns `driver`.
    pub fn new(driver: Driver) -> PumpCore {
        PumpCore {
            driver,
            waiting: BTreeMap::new(),
            next_rpc: 0,
            closed: false,
        }
    }

    /// The machine, for reading its state.
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// A request arrived with the slot its handler waits on.
    pub fn accept(&mut self, now: Tick, request: Request, reply: ReplySender<Answer>) {
        self.handle(now, PumpInput::Request(request, reply));
    }

    /// A plan handed out by [`PumpCore::work`] completed.
    pub fn complete(&mut self, now: Tick, op: OpId, result: Result<Outcome, Status>) {
        self.handle(now, PumpInput::Done(op, result));
    }

    /// A persist handed out by [`PumpCore::work`] completed (or failed: the
    /// requests it covered are then answered `UNAVAILABLE`).
    pub fn persisted(&mut self, now: Tick, op: OpId, result: Result<(), EffectFailed>) {
        self.handle(now, PumpInput::Persisted(op, result));
    }

    /// Drains the core through the one loop and returns what the pump must
    /// do, in order (answers went to their handlers on the way).
    pub fn work(&mut self, now: Tick) -> Vec<Work> {
        machine::effects(self, now)
    }

    /// True once the mailbox has closed: no request will come.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Handlers still waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

impl Machine for PumpCore {
    type Input = PumpInput;
    type Effect = Work;

    fn handle(&mut self, now: Tick, input: PumpInput) {
        let input = match input {
            PumpInput::Request(request, reply) => {
                let rpc = self.next_rpc;
                self.next_rpc += 1;
                self.waiting.insert(rpc, reply);
                Input::Request { rpc, request }
            }
            PumpInput::Done(op, result) => Input::Done { op, result },
            PumpInput::Persisted(op, result) => Input::Persisted { op, result },
            PumpInput::Closed => {
                self.closed = true;
                return;
            }
        };
        self.driver.handle(now, input);
    }

    /// The driver's next persist or plan; its answers go to their handlers
    /// on the way, in order.
    fn poll(&mut self) -> Option<Work> {
        loop {
            match self.driver.poll()? {
                Effect::Persist { op, changes } => return Some(Work::Persist { op, changes }),
                Effect::Execute { op, plan } => return Some(Work::Execute { op, plan }),
                Effect::Reply { rpc, result } => {
                    if let Some(tx) = self.waiting.remove(&rpc) {
                        tx.send(result);
                    }
                }
            }
        }
    }

    fn poll_timeout(&self) -> Option<Tick> {
        self.driver.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Tick) {
        self.driver.handle_timeout(now);
    }

    fn check_invariants(&self) -> Result<(), volplane_core::machine::Broken> {
        self.driver.check_invariants()
    }
}
