//! How much one client may make a server hold: the bounds every socket
//! volplane serves (CSI, plugin registration) applies on both runtimes.
//!
//! Memory a socket can be made to hold is at most about
//! `connections × (per-connection buffers + flow-control window)` plus
//! `streams × connections` requests being decoded, each at most `message`
//! bytes. With the defaults a client that floods gets its connection
//! closed with GOAWAY long before that, and a client that only opens
//! connections is refused once `connections` are open.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bounds of one served socket. [`Limits::DEFAULT`] documents each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections per socket. A connection past it is accepted and
    /// closed at once, with a warning. The kubelet, the sidecars and
    /// csi-sanity each hold one or two.
    pub connections: usize,
    /// SETTINGS_MAX_CONCURRENT_STREAMS: requests in flight per connection.
    /// Not below 100: grpc-go and h2 clients open up to 100 streams before
    /// the server's SETTINGS reach them, and a stream past the limit is
    /// refused (REFUSED_STREAM), which a tonic client reports as
    /// UNAVAILABLE.
    pub streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE, in bytes as HTTP/2 counts them
    /// (name + value + 32 per header). A request over it is refused; a
    /// connection that keeps sending one header block (a CONTINUATION
    /// flood) is closed with GOAWAY(ENHANCE_YOUR_CALM).
    pub header_list: u32,
    /// The largest request message, in bytes: gRPC's usual 4 MiB. A larger
    /// one is RESOURCE_EXHAUSTED before it is read.
    pub message: usize,
    /// Streams a client may reset before they are accepted, per connection
    /// (the HTTP/2 rapid-reset bound); past it, GOAWAY(ENHANCE_YOUR_CALM).
    pub pending_resets: usize,
}

impl Limits {
    /// The defaults, each documented on its field.
    pub const DEFAULT: Limits = Limits {
        connections: 128,
        streams: 128,
        header_list: 16 * 1024,
        message: 4 * 1024 * 1024,
        pending_resets: 20,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// HTTP/2's smallest SETTINGS_MAX_FRAME_SIZE, which volplane's servers
/// keep: a larger frame closes the connection (FRAME_SIZE_ERROR).
pub const MAX_FRAME: usize = 16_384;

/// Counts the open connections of one socket against
/// [`Limits::connections`].
#[derive(Debug, Clone)]
pub struct ConnectionSlots {
    open: Arc<AtomicUsize>,
    max: usize,
}

/// One open connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnectionSlots {
    /// Slots for at most `max` connections.
    pub fn new(max: usize) -> ConnectionSlots {
        ConnectionSlots {
            open: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A place for one more connection, or None (with a warning naming
    /// `socket`) when `max` are open.
    pub fn take(&self, socket: &std::path::Path) -> Option<Slot> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            });
        match taken {
            Ok(_) => Some(Slot(self.open.clone())),
            Err(_) => {
                tracing::warn!(
                    socket = %socket.display(),
                    limit = self.max,
                    "refusing a connection: {} are open, the limit",
                    self.max
                );
                None
            }
        }
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_freed_when_dropped() {
        let slots = ConnectionSlots::new(2);
        let here = std::path::Path::new("/x.sock");
        let a = slots.take(here).unwrap();
        let _b = slots.take(here).unwrap();
        assert!(slots.take(here).is_none(), "the third is refused");
        drop(a);
        assert_eq!(slots.open(), 1);
        assert!(slots.take(here).is_some());
    }
}
