//! kube-rs is tokio-bound (its client's connections and timers need a
//! tokio reactor). On another runtime, [`TokioContext`] runs every task the
//! adapter spawns inside async-compat's tokio context (a hidden tokio
//! runtime thread, started at first use); the caller wraps the top-level
//! future the same way ([`with_tokio`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use volplane_service::drive::{BoxFuture, Runtime};

/// A runtime whose tasks run inside a tokio context. See the module docs.
#[derive(Clone)]
pub struct TokioContext(pub Arc<dyn Runtime>);

impl std::fmt::Debug for TokioContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokioContext")
    }
}

impl Runtime for TokioContext {
    fn sleep(&self, delay: Duration) -> BoxFuture<()> {
        self.0.sleep(delay)
    }

    fn spawn(&self, task: BoxFuture<()>) {
        self.0.spawn(Box::pin(async_compat::Compat::new(task)))
    }
}

/// `future`, polled inside a tokio context (for the adapter's top-level
/// futures — `controller::run`, `election::lead` — on a runtime other than
/// tokio).
pub fn with_tokio<F: Future>(future: F) -> impl Future<Output = F::Output> {
    async_compat::Compat::new(future)
}
