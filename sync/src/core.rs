//! The pump's core: owns the driver machine, takes requests with the slots
//! their handlers wait on, feeds plan completions, and answers. What a pump
//! must do beyond this (persist, carry out plans) comes out as
//! [`Work`]; the runtime-neutral pump in `volplane-service` does it.

use std::collections::{BTreeMap, VecDeque};

use volplane_core::driver::state::Change;
use volplane_core::driver::{Driver, Effect, Input, Outcome, Plan, Request, Response, RpcId};
use volplane_core::machine::{self, Machine};
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

/// The machine and the handlers waiting for it.
#[derive(Debug)]
pub struct PumpCore {
    driver: Driver,
    waiting: BTreeMap<RpcId, ReplySender<Answer>>,
    next_rpc: RpcId,
}

impl PumpCore {
    /// Owns `driver`.
    pub fn new(driver: Driver) -> PumpCore {
        PumpCore {
            driver,
            waiting: BTreeMap::new(),
            next_rpc: 0,
        }
    }

    /// The machine, for reading its state.
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// A request arrived with the slot its handler waits on.
    pub fn accept(&mut self, now: Tick, request: Request, reply: ReplySender<Answer>) {
        let rpc = self.next_rpc;
        self.next_rpc += 1;
        self.waiting.insert(rpc, reply);
        self.driver.handle(now, Input::Request { rpc, request });
    }

    /// A plan handed out by [`PumpCore::work`] completed.
    pub fn complete(&mut self, now: Tick, op: OpId, result: Result<Outcome, Status>) {
        self.driver.handle(now, Input::Done { op, result });
    }

    /// A persist handed out by [`PumpCore::work`] completed (or failed: the
    /// requests it covered are then answered `UNAVAILABLE`).
    pub fn persisted(&mut self, now: Tick, op: OpId, result: Result<(), String>) {
        self.driver.handle(now, Input::Persisted { op, result });
    }

    /// Drains the machine through the one loop: answers go to their
    /// handlers here, in order; what the pump must do is returned in order.
    pub fn work(&mut self, now: Tick) -> Vec<Work> {
        let mut work = Vec::new();
        let waiting = &mut self.waiting;
        let mut carry = |_: &Driver, _, effect, _: &mut VecDeque<Input>| match effect {
            Effect::Persist { op, changes } => work.push(Work::Persist { op, changes }),
            Effect::Execute { op, plan } => work.push(Work::Execute { op, plan }),
            Effect::Reply { rpc, result } => {
                if let Some(tx) = waiting.remove(&rpc) {
                    tx.send(result);
                }
            }
        };
        machine::drain(&mut self.driver, now, &mut carry);
        work
    }

    /// Handlers still waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}
