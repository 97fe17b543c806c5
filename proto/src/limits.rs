//! How much one client may make a server hold: the bounds every socket
//! volplane serves (CSI, plugin registration) applies on both runtimes.
//!
//! Memory a socket can be made to hold is at most about
//! `connections × (per-connection buffers + flow-control window)` plus
//! `streams × connections` requests being decoded, each at most `message`
//! bytes. With the defaults a client that floods gets its connection
//! closed with GOAWAY long before that, and a client that only opens
//! connections is held to its share of them (`crate::connections`).

/// The bounds of one served socket. [`Limits::DEFAULT`] documents each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections per socket. A connection past it takes the place
    /// of an idle one, or is closed at once with a warning when every one
    /// is in use (see `crate::connections`). The kubelet, the sidecars and
    /// csi-sanity each hold one or two.
    pub connections: usize,
    /// A process's share of a full socket (by `SO_PEERCRED`): past it, its
    /// connections give way to others' even with requests in flight (see
    /// `crate::connections`). Below the limit any process may hold more:
    /// the kubelet opens a connection per call.
    pub per_process: usize,
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
        per_process: 32,
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
