//! A one-shot reply slot: the pump fills it once, the RPC handler waits.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::loom::{Arc, Mutex};

enum Slot<T> {
    Waiting(Option<Waker>),
    Filled(T),
    /// The filling side was dropped without an answer.
    Abandoned,
    Taken,
}

/// The side that answers.
pub struct ReplySender<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

/// The side that waits; a future of `Option<T>` (`None`: no answer will come).
pub struct ReplyReceiver<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> std::fmt::Debug for ReplySender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplySender")
    }
}

impl<T> std::fmt::Debug for ReplyReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplyReceiver")
    }
}

/// A new reply slot.
pub fn slot<T>() -> (ReplySender<T>, ReplyReceiver<T>) {
    let slot = Arc::new(Mutex::new(Slot::Waiting(None)));
    (ReplySender { slot: slot.clone() }, ReplyReceiver { slot })
}

impl<T> ReplySender<T> {
    /// Fills the slot and wakes the waiter.
    pub fn send(self, value: T) {
        let waker = {
            let mut s = self.slot.lock().expect("reply lock");
            match std::mem::replace(&mut *s, Slot::Filled(value)) {
                Slot::Waiting(w) => w,
                _ => None,
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.slot.lock().expect("reply lock");
            match std::mem::replace(&mut *s, Slot::Abandoned) {
                Slot::Waiting(w) => w,
                other => {
                    *s = other;
                    None
                }
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Future for ReplyReceiver<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.slot.lock().expect("reply lock");
        match std::mem::replace(&mut *s, Slot::Taken) {
            Slot::Filled(v) => Poll::Ready(Some(v)),
            Slot::Abandoned | Slot::Taken => Poll::Ready(None),
            Slot::Waiting(_) => {
                *s = Slot::Waiting(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}
