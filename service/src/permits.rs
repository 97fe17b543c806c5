//! A fixed number of permits for async work on any runtime
//! (`--worker-threads`: how many CSI calls a role has in flight at once).
//! Waiters are served in the order they came.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::oneshot;

struct Shared {
    free: usize,
    waiting: VecDeque<oneshot::Sender<Permit>>,
}

/// `n` permits, shared by clones.
#[derive(Clone)]
pub struct Permits(Arc<Mutex<Shared>>);

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        write!(
            f,
            "Permits {{ free: {}, waiting: {} }}",
            s.free,
            s.waiting.len()
        )
    }
}

/// One permit; handed on (or returned) when dropped.
#[derive(Debug)]
pub struct Permit(Option<Permits>);

impl Permits {
    /// `n` permits (at least one).
    pub fn new(n: usize) -> Permits {
        Permits(Arc::new(Mutex::new(Shared {
            free: n.max(1),
            waiting: VecDeque::new(),
        })))
    }

    /// A permit, once one is free.
    pub async fn acquire(&self) -> Permit {
        let rx = {
            let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if s.free > 0 {
                s.free -= 1;
                return Permit(Some(self.clone()));
            }
            let (tx, rx) = oneshot::channel();
            s.waiting.push_back(tx);
            rx
        };
        // The sender waits in the shared state, which `self` keeps alive.
        rx.await.unwrap_or_else(|_| Permit(None))
    }

    /// Permits free now.
    pub fn free(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).free
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(permits) = self.0.take() else {
            return;
        };
        let mut s = permits.0.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(tx) = s.waiting.pop_front() {
            match tx.send(Permit(Some(permits.clone()))) {
                Ok(()) => return,
                // That waiter gave up: the next one, without counting
                // the permit handed back as dropped.
                Err(mut back) => back.0 = None,
            }
        }
        s.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn no_more_than_n_at_once_and_waiters_in_order() {
        let p = Permits::new(2);
        let a = p.acquire().now_or_never().expect("free");
        let _b = p.acquire().now_or_never().expect("free");
        let mut third = Box::pin(p.acquire());
        let mut fourth = Box::pin(p.acquire());
        assert!((&mut third).now_or_never().is_none(), "none free");
        assert!((&mut fourth).now_or_never().is_none());
        drop(a);
        assert!((&mut fourth).now_or_never().is_none(), "the third is first");
        let c = (&mut third).now_or_never().expect("handed on");
        drop(c);
        assert!(fourth.now_or_never().is_some());
    }

    #[test]
    fn a_waiter_that_gives_up_loses_no_permit() {
        let p = Permits::new(1);
        let a = p.acquire().now_or_never().expect("free");
        let mut gone = Box::pin(p.acquire());
        assert!((&mut gone).now_or_never().is_none());
        drop(gone);
        drop(a);
        assert_eq!(p.free(), 1);
        // Handed a permit, then gone before it looked: the permit returns.
        let a = p.acquire().now_or_never().expect("free");
        let mut late = Box::pin(p.acquire());
        assert!((&mut late).now_or_never().is_none());
        drop(a);
        drop(late);
        assert_eq!(p.free(), 1);
    }
}
