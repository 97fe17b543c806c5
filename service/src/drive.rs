//! The one async driver of a machine, runtime-neutral: feed the machine
//! its next input (or let it drain), carry out every effect it asks for,
//! then wait for the next input or its deadline, whichever comes first.
//! The Kubernetes controller roles and the registrar run on it, on tokio or
//! smol alike: a runtime supplies only a timer and a way to run a task
//! ([`Runtime`]).

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use volplane_core::Tick;
use volplane_core::machine::{self, Carry, Machine};

use crate::Clock;

/// A future a runtime runs.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What the runtime-neutral loops need from a runtime.
pub trait Runtime: Send + Sync + 'static {
    /// Completes after `delay`.
    fn sleep(&self, delay: Duration) -> BoxFuture<()>;
    /// Runs `task` on its own.
    fn spawn(&self, task: BoxFuture<()>);
}

/// Runs `future` unless `limit` passes first (then `None`), on `rt`'s timer.
pub async fn within<T>(
    rt: &dyn Runtime,
    limit: Duration,
    future: impl Future<Output = T>,
) -> Option<T> {
    let mut timer = rt.sleep(limit).fuse();
    let mut future = std::pin::pin!(future.fuse());
    futures::select_biased! {
        out = future => Some(out),
        _ = timer => None,
    }
}

/// What a driven machine's adapter does around each turn, beside carrying
/// its effects.
pub trait Turn<M: Machine + ?Sized>: Carry<M> {
    /// Before a turn at `now`: the input about to be fed (`None`: the
    /// machine only drains, its deadline perhaps due).
    fn before(&mut self, _machine: &M, _now: Tick, _input: Option<&M::Input>) {}
    /// After a turn: `Break` ends the loop.
    fn after(&mut self, _machine: &M) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// The most inputs handed in before one drain.
const BURST: usize = 256;

/// Drives `machine` from `first` (if any) and then `inputs`, until the
/// inputs end or `turn` says stop: each input is handed in, with every
/// other input already waiting, and the machine drained, every effect
/// handed to `turn` in order; between inputs the loop sleeps until the
/// machine's deadline.
pub async fn drive<M, I, T>(
    machine: &mut M,
    rt: &dyn Runtime,
    clock: Clock,
    first: Option<M::Input>,
    mut inputs: I,
    turn: &mut T,
) where
    M: Machine + ?Sized,
    I: Stream<Item = M::Input> + Unpin,
    T: Turn<M>,
{
    let mut next = first;
    let mut ended = false;
    loop {
        let now = clock.now();
        turn.before(machine, now, next.as_ref());
        if let Some(input) = next.take() {
            machine.handle(now, input);
            // Everything else already waiting goes in before the machine
            // is drained, so one drain (one persist, one pass over the
            // dirty keys) serves the whole burst — up to `BURST` inputs, so
            // that senders faster than the machine cannot hold it from
            // acting (the rest waits in the stream for the next turn).
            let mut taken = 1;
            while !ended
                && taken < BURST
                && let Some(more) = inputs.next().now_or_never()
            {
                taken += 1;
                match more {
                    Some(input) => {
                        turn.before(machine, now, Some(&input));
                        machine.handle(now, input);
                    }
                    None => ended = true,
                }
            }
        }
        let deadline = machine::drain(machine, now, turn);
        if turn.after(machine).is_break() || ended {
            return;
        }
        let Some(deadline) = deadline else {
            // No deadline: only an input can bring news.
            match inputs.next().await {
                Some(input) => next = Some(input),
                None => return,
            }
            continue;
        };
        let wait = Duration::from_millis(deadline.saturating_sub(clock.now()));
        let mut timer = rt.sleep(wait).fuse();
        let mut input = inputs.next().fuse();
        futures::select_biased! {
            input = input => match input {
                Some(input) => next = Some(input),
                None => return,
            },
            _ = timer => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what it is told; asks for nothing.
    #[derive(Default)]
    struct Tally {
        handled: usize,
    }

    impl Machine for Tally {
        type Input = u32;
        type Effect = ();
        fn handle(&mut self, _: Tick, _: u32) {
            self.handled += 1;
        }
        fn poll(&mut self) -> Option<()> {
            None
        }
        fn poll_timeout(&self) -> Option<Tick> {
            None
        }
        fn handle_timeout(&mut self, _: Tick) {}
    }

    /// Counts the drains, and the inputs handed in before each.
    #[derive(Default)]
    struct Turns {
        bursts: Vec<usize>,
        seen: usize,
    }

    impl Carry<Tally> for Turns {
        fn carry(&mut self, _: &Tally, _: Tick, _: (), _: &mut std::collections::VecDeque<u32>) {}
    }

    impl Turn<Tally> for Turns {
        fn after(&mut self, m: &Tally) -> ControlFlow<()> {
            self.bursts.push(m.handled - self.seen);
            self.seen = m.handled;
            ControlFlow::Continue(())
        }
    }

    struct NoTimer;

    impl Runtime for NoTimer {
        fn sleep(&self, _: Duration) -> BoxFuture<()> {
            Box::pin(futures::future::pending())
        }
        fn spawn(&self, _: BoxFuture<()>) {
            unreachable!("drive spawns nothing")
        }
    }

    #[test]
    fn a_burst_of_waiting_inputs_is_handed_in_before_one_drain_up_to_the_bound() {
        let inputs = futures::stream::iter(0..1000u32);
        let (mut m, mut turns) = (Tally::default(), Turns::default());
        futures::executor::block_on(drive(
            &mut m,
            &NoTimer,
            Clock::start(),
            None,
            inputs,
            &mut turns,
        ));
        assert_eq!(m.handled, 1000, "every input handed in");
        assert_eq!(turns.bursts[0], 0, "the first drain, before any input");
        assert!(
            turns.bursts.iter().all(|b| *b <= BURST),
            "{:?}",
            turns.bursts
        );
        assert_eq!(
            turns.bursts.len(),
            1 + 1000usize.div_ceil(BURST),
            "{:?}",
            turns.bursts
        );
    }
}
