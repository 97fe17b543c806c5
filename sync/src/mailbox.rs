//! A many-senders, one-receiver queue with an async receive. Sending wakes
//! the receiver; the last sender dropping wakes it too, so it sees the end.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::loom::{Arc, Mutex};

struct State<T> {
    items: VecDeque<T>,
    waker: Option<Waker>,
    senders: usize,
    receiver_alive: bool,
}

/// The sending half; cheap to clone.
pub struct Sender<T> {
    shared: Arc<Mutex<State<T>>>,
}

/// The receiving half.
pub struct Receiver<T> {
    shared: Arc<Mutex<State<T>>>,
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sender")
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receiver")
    }
}

/// A new mailbox.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Mutex::new(State {
        items: VecDeque::new(),
        waker: None,
        senders: 1,
        receiver_alive: true,
    }));
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// The receiver is gone: the item comes back.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed<T>(pub T);

impl<T> Sender<T> {
    /// Queues `item` and wakes the receiver.
    pub fn send(&self, item: T) -> Result<(), Closed<T>> {
        let waker = {
            let mut s = self.shared.lock().expect("mailbox lock");
            if !s.receiver_alive {
                return Err(Closed(item));
            }
            s.items.push_back(item);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Sender<T> {
        self.shared.lock().expect("mailbox lock").senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock().expect("mailbox lock");
            s.senders -= 1;
            if s.senders == 0 { s.waker.take() } else { None }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.lock().expect("mailbox lock").receiver_alive = false;
    }
}

impl<T> Receiver<T> {
    /// The next item, if one is queued now.
    pub fn try_recv(&self) -> Option<T> {
        self.shared.lock().expect("mailbox lock").items.pop_front()
    }

    /// Polls for the next item: `Ready(None)` once every sender is gone and
    /// the queue is empty.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.shared.lock().expect("mailbox lock");
        if let Some(item) = s.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if s.senders == 0 {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Waits for the next item (`None`: every sender is gone).
    pub fn recv(&self) -> Recv<'_, T> {
        Recv { rx: self }
    }
}

/// The future of [`Receiver::recv`].
pub struct Recv<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> std::fmt::Debug for Recv<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recv")
    }
}

impl<T> Future for Recv<'_, T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.rx.poll_recv(cx)
    }
}
