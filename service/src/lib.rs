//! volplane-service: the runtime-neutral service layer both runtimes share —
//! the [`Backend`] trait driver authors implement, the [`NodeHost`] default
//! for mounts, the [`Pump`] that drives the driver machine through the
//! core's one loop, and the gRPC service glue.
//!
//! A runtime crate supplies only what differs between runtimes: a
//! [`Blocking`] pool for syscalls, spawning the pump, and the transport.

#![deny(missing_docs)]

mod backend;
pub mod drive;
mod grpc;
pub mod metrics;
mod node_host;
mod permits;
pub mod plugin_watcher;
mod pool;
mod pump;
pub mod registration;
mod serve;

pub use backend::{Backend, CapacityInfo, NodePlan, SnapshotQuery, execute};
pub use grpc::CsiService;
pub use node_host::{DEVICE_KEY, NodeHost, NodeSource, host_status};
pub use permits::{Permit, Permits};
pub use pool::{BLOCKING_IDLE, BLOCKING_THREADS, BlockingPool};
pub use pump::{Pump, PumpConfig, PumpError, PumpHandle};
pub use registration::{
    RegistrarExit, RegistrarSetup, RegistrationError, RegistrationRuntime, RegistrationService,
    run_registrar,
};
pub use serve::{
    Prepared, ServeError, TaskEnded, csi_routes, finish, prepare, supervised, until_either,
    watch_beside, watched,
};

use std::future::Future;
use std::pin::Pin;
use std::time::{Instant, SystemTime};

use volplane_core::Tick;

/// The adapters' clock for the machines: [`Tick`]s are milliseconds since
/// 1970 as the wall clock read at start, advanced by the monotonic clock.
/// The times machines write into objects (a VolumeAttachment's
/// `attachError.time`) are therefore real, and their timers never jump
/// when the wall clock is set.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    origin: Tick,
}

impl Clock {
    /// A clock reading the wall clock's time now.
    pub fn start() -> Clock {
        let origin = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Tick);
        Clock {
            start: Instant::now(),
            origin,
        }
    }

    /// The time now.
    pub fn now(&self) -> Tick {
        self.origin + self.start.elapsed().as_millis() as Tick
    }
}

/// Offloads blocking work (syscalls, commands, fsync) from the async
/// executor: tokio's `spawn_blocking`, a [`BlockingPool`] on smol.
pub trait Blocking: Send + Sync + 'static {
    /// Runs `job` on a thread where blocking is allowed; never on the caller's.
    fn spawn(&self, job: Box<dyn FnOnce() + Send>);
}

/// Runs `f` on the blocking pool and waits for its result; `None` when the
/// pool dropped the job unrun (it is shutting down).
pub fn unblock<T, F>(pool: &dyn Blocking, f: F) -> Pin<Box<dyn Future<Output = Option<T>> + Send>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = futures::channel::oneshot::channel();
    pool.spawn(Box::new(move || {
        let _ = tx.send(f());
    }));
    Box::pin(async move { rx.await.ok() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A time a machine writes reads as today's, not as 1970's.
    #[test]
    fn the_clock_counts_from_1970() {
        let wall = || {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis() as Tick
        };
        let before = wall();
        let clock = Clock::start();
        let now = clock.now();
        let after = wall();
        // Between two wall-clock readings, but for the millisecond each
        // truncation may lose.
        assert!(
            before <= now + 1 && now <= after + 1,
            "{before} ≤ {now} ≤ {after}"
        );
        let stamp = volplane_core::store::timestamp(now);
        assert!(stamp.as_str() > "2025", "{stamp}");
        assert!(clock.now() >= now, "never goes back");
    }
}
