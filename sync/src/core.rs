//! The pump's core: owns the driver machine, takes requests with the slots
//! their handlers wait on, feeds plan completions, and answers. What a pump
//! must do beyond this (persist, carry out plans) comes out as
//! [`Work`]; the runtime-neutral pump in `volplane-proto` does it.

use std::collections::BTreeMap;

use volplane_core::driver::{Driver, Effect, Input, Outcome, Plan, Request, Response, RpcId};
use volplane_core::{OpId, Status, Tick};

use crate::reply::ReplySender;

/// An answer for an RPC handler.
pub type Answer = Result<Response, Status>;

/// What the pump must do for the machine, in this order.
#[derive(Debug)]
pub enum Work {
    /// Persist the machine's state now, before what follows.
    Persist,
    /// Carry out `plan` and hand its outcome to [`PumpCore::complete`].
    Execute { op: OpId, plan: Plan },
}

/// The machine and the handlers waiting for it.
#[derive(Debug)]
pub struct PumpCore {
    driver: Driver,
    waiting: BTreeMap<RpcId, ReplySender<Answer>>,
    next_rpc: RpcId,
}

impl PumpCore {
    pub fn new(driver: Driver) -> PumpCore {
        PumpCore {
            driver,
            waiting: BTreeMap::new(),
            next_rpc: 0,
        }
    }

    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    pub fn driver_mut(&mut self) -> &mut Driver {
        &mut self.driver
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

    /// The next thing to do; answers are sent to their handlers here, in
    /// order, never before a `Persist` the machine asked for first.
    pub fn work(&mut self) -> Option<Work> {
        loop {
            match self.driver.poll()? {
                Effect::Persist => return Some(Work::Persist),
                Effect::Execute { op, plan } => return Some(Work::Execute { op, plan }),
                Effect::Reply { rpc, result } => {
                    if let Some(tx) = self.waiting.remove(&rpc) {
                        tx.send(result);
                    }
                }
            }
        }
    }

    /// Handlers still waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}
