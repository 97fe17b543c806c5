//! A bounded pool of threads for blocking host work, that shrinks when
//! idle: at most [`BLOCKING_THREADS`] threads, each ending after
//! [`BLOCKING_IDLE`] without work. tokio's own blocking pool is given the
//! same two bounds; smol's (the `blocking` crate's) keeps every thread up
//! to its limit of 500 for the life of the process, so smol uses this one.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::Blocking;

/// The most threads blocking host work runs on at once; more work waits.
pub const BLOCKING_THREADS: usize = 64;
/// How long a thread with nothing to do stays.
pub const BLOCKING_IDLE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    max: usize,
    linger: Duration,
}

/// See the module documentation.
#[derive(Clone)]
pub struct BlockingPool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingPool")
            .field("max", &self.shared.max)
            .field("threads", &self.threads())
            .finish()
    }
}

impl Default for BlockingPool {
    fn default() -> Self {
        BlockingPool::new(BLOCKING_THREADS, BLOCKING_IDLE)
    }
}

impl BlockingPool {
    /// A pool of at most `max` threads, each ending after `linger` idle.
    pub fn new(max: usize, linger: Duration) -> BlockingPool {
        BlockingPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                max: max.max(1),
                linger,
            }),
        }
    }

    /// How many threads the pool has now.
    pub fn threads(&self) -> usize {
        self.lock().threads
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Blocking for BlockingPool {
    fn spawn(&self, job: Job) {
        let mut state = self.lock();
        state.queue.push_back(job);
        if state.idle > 0 {
            self.shared.work.notify_one();
            return;
        }
        if state.threads >= self.shared.max {
            return; // a busy thread takes it when done
        }
        state.threads += 1;
        drop(state);
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("volplane-blocking".into())
            .spawn(move || work(&shared));
        if let Err(e) = started {
            // The queued job waits for a thread that is running, if any.
            let mut state = self.lock();
            state.threads -= 1;
            tracing::warn!(
                threads = state.threads,
                "cannot start a thread for blocking work: {e}"
            );
        }
    }
}

/// One thread's life: jobs until none comes for `linger`.
fn work(shared: &Shared) {
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            // A panicking job must not take the thread's count with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        state.idle += 1;
        let (next, waited) = shared
            .work
            .wait_timeout(state, shared.linger)
            .unwrap_or_else(PoisonError::into_inner);
        state = next;
        state.idle -= 1;
        if waited.timed_out() && state.queue.is_empty() {
            state.threads -= 1;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_burst_runs_on_at_most_max_threads_and_they_end_when_idle() {
        let pool = BlockingPool::new(8, Duration::from_millis(100));
        let (ran, busiest) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let running = Arc::new(AtomicUsize::new(0));
        for _ in 0..200 {
            let (ran, busiest, running) = (ran.clone(), busiest.clone(), running.clone());
            pool.spawn(Box::new(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                busiest.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
                running.fetch_sub(1, Ordering::SeqCst);
                ran.fetch_add(1, Ordering::SeqCst);
            }));
            assert!(pool.threads() <= 8);
        }
        wait_until("every job runs", || ran.load(Ordering::SeqCst) == 200);
        assert!(busiest.load(Ordering::SeqCst) <= 8);
        wait_until("idle threads end", || pool.threads() == 0);
        // And it starts again.
        let again = ran.clone();
        pool.spawn(Box::new(move || {
            again.fetch_add(1, Ordering::SeqCst);
        }));
        wait_until("a job after the pool emptied", || {
            ran.load(Ordering::SeqCst) == 201
        });
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_working() {
        let pool = BlockingPool::new(1, Duration::from_secs(5));
        pool.spawn(Box::new(|| panic!("a job's bug")));
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        pool.spawn(Box::new(move || {
            d.fetch_add(1, Ordering::SeqCst);
        }));
        wait_until("the next job runs", || done.load(Ordering::SeqCst) == 1);
        assert_eq!(pool.threads(), 1);
    }
}
