//! A small test rig for one control-plane machine against a [`Store`]:
//! objects go in as the API server would deliver them, API writes are
//! carried out on the store and their watch events fed back, CSI calls are
//! answered by a function the test gives. Scenario tests read as "given these
//! objects, when this happens, then these effects and this state".

use std::collections::VecDeque;

use super::{ApiCall, ControlMachine, CsiCall, CsiResult, Effect, Event, Input, Watch};
use crate::Tick;
use crate::machine;
use crate::model::{Kind, Object, ObjectKey};
use crate::store::Store;

/// A machine, a store, a clock, and what happened.
#[allow(missing_debug_implementations)]
pub struct Rig<M> {
    /// The machine under test.
    pub machine: M,
    /// The API server's objects.
    pub store: Store,
    /// The clock.
    pub now: Tick,
    /// Every event the machine emitted, in order.
    pub events: Vec<Event>,
    /// Every API write the machine made (not reads), in order.
    pub writes: Vec<ApiCall>,
    /// Every get and list the machine made, in order.
    pub reads: Vec<ApiCall>,
    /// Every CSI call the machine made, with the node it addressed.
    pub csi_calls: Vec<(Option<String>, CsiCall)>,
    csi: Box<dyn FnMut(&CsiCall) -> CsiResult>,
}

impl<M: ControlMachine> Rig<M> {
    /// A rig around `machine`, with an empty store, answering no CSI calls.
    pub fn new(machine: M) -> Rig<M> {
        Rig {
            machine,
            store: Store::new(),
            now: 0,
            events: Vec::new(),
            writes: Vec::new(),
            reads: Vec::new(),
            csi_calls: Vec::new(),
            csi: Box::new(|call| {
                Err(crate::Status::unimplemented(format!(
                    "the rig answers no CSI calls ({})",
                    call.method()
                )))
            }),
        }
    }

    /// Answers CSI calls with `f` from now on.
    pub fn answer_csi(&mut self, f: impl FnMut(&CsiCall) -> CsiResult + 'static) {
        self.csi = Box::new(f);
    }

    /// Creates `o` in the store (as a user would) and lets the machine react.
    pub fn create(&mut self, o: Object) -> Object {
        let (r, watches) = self.store.apply(self.now, &ApiCall::Create(o));
        let super::ApiResult::Ok(Some(created)) = r else {
            panic!("create failed: {r:?}")
        };
        self.deliver(watches);
        std::sync::Arc::unwrap_or_clone(created)
    }

    /// Applies a user's write (update, delete) and lets the machine react.
    pub fn user(&mut self, call: ApiCall) {
        let (_, watches) = self.store.apply(self.now, &call);
        self.deliver(watches);
    }

    fn deliver(&mut self, watches: Vec<Watch>) {
        for w in watches {
            if self.machine.watches(w.kind()) {
                self.machine.handle(self.now, Input::Watch(w));
            }
        }
        self.run();
    }

    /// Tells the machine `input` and lets it react.
    pub fn input(&mut self, input: Input) {
        self.machine.handle(self.now, input);
        self.run();
    }

    /// Carries out effects until the machine has nothing more to do.
    pub fn run(&mut self) {
        let Rig {
            machine,
            store,
            now,
            events,
            writes,
            reads,
            csi_calls,
            csi,
        } = self;
        let mut carried = 0;
        let mut carry = |_: &M, now: Tick, e: Effect, done: &mut VecDeque<Input>| {
            carried += 1;
            assert!(
                carried <= 10_000,
                "the machine did not settle within 10000 effects"
            );
            match e {
                Effect::Event(ev) => events.push(ev),
                Effect::Api { op, call } => {
                    if matches!(call, ApiCall::Get(_) | ApiCall::List { .. }) {
                        reads.push(call.clone());
                    } else {
                        writes.push(call.clone());
                    }
                    store.serve(now, op, call, done);
                }
                Effect::Csi { op, node, call } => {
                    let result = csi(&call);
                    csi_calls.push((node, call));
                    done.push_back(Input::CsiDone { op, result });
                }
            }
        };
        machine::drain(machine, *now, &mut carry);
        if let Err(e) = machine.check_invariants() {
            panic!("invariant broken: {e}");
        }
    }

    /// Advances the clock by `ms`, firing the machine's timers on the way.
    pub fn advance(&mut self, ms: Tick) {
        let end = self.now + ms;
        while let Some(t) = self.machine.poll_timeout().filter(|t| *t <= end) {
            self.now = self.now.max(t);
            self.run();
        }
        self.now = end;
        self.run();
    }

    /// The object of `kind` named `name` in `namespace`, as stored.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<&Object> {
        self.store.get(&ObjectKey::new(kind, namespace, name))
    }

    /// Reasons of the events emitted so far, in order.
    pub fn reasons(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.reason.as_str()).collect()
    }
}
