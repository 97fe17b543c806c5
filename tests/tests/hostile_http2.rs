//! Hostile HTTP/2 on the CSI socket (issue 29): floods of CONTINUATION,
//! SETTINGS and PING frames, an HPACK header-list bomb, and many idle
//! connections. The driver's resident memory stays bounded during and
//! after each (read from /proc), a flooding connection is closed or
//! throttled, and another client is served all along. Runs without root.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK literal without indexing, new name.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    int(out, 0, 7, name.len());
    out.extend_from_slice(name);
    int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

fn int(out: &mut Vec<u8>, first: u8, bits: u32, mut value: usize) {
    let max = (1usize << bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// The start of a request to Identity/Probe with `authority`.
fn request_headers(authority: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    literal(&mut b, b":method", b"POST");
    literal(&mut b, b":scheme", b"http");
    literal(&mut b, b":path", b"/csi.v1.Identity/Probe");
    literal(&mut b, b":authority", authority);
    literal(&mut b, b"content-type", b"application/grpc");
    b
}

fn socket(d: &Driver) -> PathBuf {
    d.root().join("csi.sock")
}

/// A connection that has sent the preface and empty SETTINGS.
fn open(sock: &Path) -> UnixStream {
    let mut s = UnixStream::connect(sock).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    s.write_all(PREFACE).unwrap();
    s.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    s
}

/// Resident and peak resident memory of `pid`, in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// How a flood ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The driver closed the connection (after a GOAWAY with this code, if
    /// one came).
    Closed(Option<u32>),
    /// The driver stopped reading: the flood cannot go on.
    Throttled,
    /// Everything was sent and the connection is still open.
    Sent,
}

/// Writes `unit` again and again, up to `limit` bytes; the bytes sent and
/// how it ended.
fn flood(mut s: UnixStream, unit: &[u8], limit: usize) -> (usize, Ended) {
    let mut sent = 0;
    while sent < limit {
        match s.write_all(unit) {
            Ok(()) => sent += unit.len(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return (sent, Ended::Throttled);
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return (sent, Ended::Throttled);
            }
            Err(_) => return (sent, Ended::Closed(goaway(&mut s))),
        }
    }
    (sent, Ended::Sent)
}

/// The error code of the GOAWAY the driver sent on `s`, if it sent one.
fn goaway(s: &mut UnixStream) -> Option<u32> {
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 || got.len() > 64 << 20 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let mut at = 0;
    while got.len() >= at + 9 {
        let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
        let payload = got.get(at + 9..at + 9 + len)?;
        if got[at + 3] == GOAWAY && len >= 8 {
            return Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
        }
        at += 9 + len;
    }
    None
}

/// Identity/Probe on a fresh connection answers.
async fn still_serves(d: &Driver, after: &str) {
    let mut csi = d.client().await;
    let probe = tokio::time::timeout(
        Duration::from_secs(10),
        csi.identity
            .probe(volplane_proto::csi::ProbeRequest::default()),
    )
    .await;
    assert!(
        matches!(probe, Ok(Ok(_))),
        "after {after} the driver no longer serves: {probe:?}"
    );
}

/// Runs `attack` against the driver in a thread; prints and checks the
/// driver's memory before, at its peak and after.
async fn measured<T: Send + 'static>(
    d: &Driver,
    what: &str,
    attack: impl FnOnce(PathBuf) -> T + Send + 'static,
) -> T {
    still_serves(d, "start").await;
    let pid = d.pid();
    let (before, _) = memory(pid);
    let sock = socket(d);
    let result = tokio::task::spawn_blocking(move || attack(sock))
        .await
        .unwrap();
    still_serves(d, what).await;
    let (after, peak) = memory(pid);
    eprintln!(
        "{:5} {what}: resident {} MiB before, {} MiB at the peak, {} MiB after",
        d.runtime.flag(),
        before / 1024,
        peak / 1024,
        after / 1024
    );
    assert!(
        peak < before + 64 * 1024,
        "{what}: the driver grew from {before} KiB to {peak} KiB"
    );
    result
}

both_runtimes!(
    a_continuation_flood_is_closed_with_goaway,
    a_continuation_flood_is_closed_with_goaway_on
);

/// A header block that never ends: each connection is closed with GOAWAY
/// after a few frames (ENHANCE_YOUR_CALM, or COMPRESSION_ERROR when what
/// was sent cannot be headers), for an authority h2 accepts and for a
/// socket path (which volplane rewrites).
async fn a_continuation_flood_is_closed_with_goaway_on(rt: Runtime) {
    let d = Driver::start(rt);
    for authority in [&b"localhost"[..], b"/var/lib/kubelet/plugins/x/csi.sock"] {
        let what = format!(
            "CONTINUATION flood (:authority {})",
            String::from_utf8_lossy(authority)
        );
        let (sent, ended) = measured(&d, &what, move |sock| {
            let mut s = open(&sock);
            s.write_all(&frame(HEADERS, 0, 1, &request_headers(authority)))
                .unwrap();
            let unit = frame(CONTINUATION, 0, 1, &[b'a'; 16_384]);
            flood(s, &unit, 512 << 20)
        })
        .await;
        eprintln!("      sent {} KiB: {ended:?}", sent / 1024);
        assert!(
            matches!(
                ended,
                Ended::Closed(Some(ENHANCE_YOUR_CALM | COMPRESSION_ERROR))
            ),
            "{what}: {ended:?}"
        );
    }
}

both_runtimes!(
    settings_and_ping_floods_are_throttled,
    settings_and_ping_floods_are_throttled_on
);

/// SETTINGS and PING frames, each asking for an answer the flooder never
/// reads: the driver stops reading instead of queueing answers.
async fn settings_and_ping_floods_are_throttled_on(rt: Runtime) {
    let d = Driver::start(rt);
    let settings = frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]);
    let ping = frame(PING, 0, 0, &[7; 8]);
    for (what, unit) in [("SETTINGS flood", settings), ("PING flood", ping)] {
        let (sent, ended) = measured(&d, what, move |sock| {
            let unit = unit.repeat(1024);
            flood(open(&sock), &unit, 1 << 30)
        })
        .await;
        eprintln!("      sent {} KiB: {ended:?}", sent / 1024);
        assert_ne!(ended, Ended::Sent, "{what}: 1 GiB was taken in");
    }
}

both_runtimes!(
    a_header_list_bomb_is_refused,
    a_header_list_bomb_is_refused_on
);

/// HPACK: one 4,000-byte header in the dynamic table, then 4,000
/// one-byte references to it — 16 MB of headers from 8 KiB sent, 200
/// times over, with each kind of authority.
async fn a_header_list_bomb_is_refused_on(rt: Runtime) {
    let d = Driver::start(rt);
    for authority in [&b"localhost"[..], b"/var/lib/kubelet/plugins/x/csi.sock"] {
        let what = format!(
            "header-list bomb x200 (:authority {})",
            String::from_utf8_lossy(authority)
        );
        measured(&d, &what, move |sock| {
            let mut block = request_headers(authority);
            block.push(0x40); // literal with incremental indexing
            int(&mut block, 0, 7, 5);
            block.extend_from_slice(b"x-big");
            int(&mut block, 0, 7, 4000);
            block.extend(std::iter::repeat_n(b'a', 4000));
            block.extend(std::iter::repeat_n(0x80 | 62, 4000));
            let mut wire = Vec::new();
            let chunks: Vec<&[u8]> = block.chunks(16_384).collect();
            for (i, part) in chunks.iter().enumerate() {
                let flags = if i + 1 == chunks.len() {
                    END_HEADERS
                } else {
                    0
                };
                let kind = if i == 0 { HEADERS } else { CONTINUATION };
                wire.extend(frame(kind, flags, 1, part));
            }
            for _ in 0..200 {
                let mut s = open(&sock);
                let _ = s.write_all(&wire);
                // Read what the driver answers (a refusal), then hang up.
                let _ = goaway(&mut s);
            }
        })
        .await;
    }
}

both_runtimes!(
    idle_connections_are_bounded_and_others_served,
    idle_connections_are_bounded_and_others_served_on
);

/// Connections from one process that say nothing after the preface:
/// while there is room they cost little and are kept (the kubelet opens a
/// connection per call); once the table is full, a client from another
/// process still gets in, taking an idle one's place.
async fn idle_connections_are_bounded_and_others_served_on(rt: Runtime) {
    let d = Driver::start(rt);
    let limit = volplane_proto::limits::Limits::DEFAULT.connections;
    let idle = measured(&d, "100 idle connections from one process", move |sock| {
        let idle = Flooder::start(&sock, 100, Reopen::Never);
        std::thread::sleep(Duration::from_millis(500));
        idle
    })
    .await;
    assert_eq!(idle.closed(), 0, "room for all 100: none closed");
    // Past the limit, from one process: it gives way to itself only
    // through its silent connections, and others still get in.
    let more = Flooder::start(&socket(&d), limit, Reopen::Never);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    still_serves(&d, "the table filled by one process").await;
    let closed = idle.closed() + more.closed();
    eprintln!(
        "{:5} {} connections opened by one process: {closed} closed",
        rt.flag(),
        100 + limit
    );
    // Past the limit some give way (the rest may still be on their way
    // out, or waiting to be accepted).
    assert!(closed > 0, "none of {} closed", 100 + limit);
    drop((idle, more));
    tokio::time::sleep(Duration::from_millis(300)).await;
    still_serves(&d, "the idle connections closed").await;
}

both_runtimes!(
    a_connection_flood_from_many_processes_locks_no_client_out,
    a_connection_flood_from_many_processes_locks_no_client_out_on
);

/// 500 connections held by five processes — half never send the HTTP/2
/// preface, half send it and then nothing, each opened again as soon as
/// the driver closes it — while a client opens a fresh connection every
/// 100 ms for 6 s: every probe is answered within a second.
async fn a_connection_flood_from_many_processes_locks_no_client_out_on(rt: Runtime) {
    let d = Driver::start(rt);
    still_serves(&d, "start").await;
    // A sidecar's connection, held through the flood.
    let mut sidecar = d.client().await;
    let flooders: Vec<Flooder> = (0..5)
        .map(|_| Flooder::start(&socket(&d), 100, Reopen::Always))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let (mut probes, mut slowest) = (0, Duration::ZERO);
    while started.elapsed() < Duration::from_secs(6) {
        let asked = std::time::Instant::now();
        let probe = tokio::time::timeout(Duration::from_secs(1), async {
            let ch = volplane_tokio::connect(&d.endpoint)
                .await
                .map_err(|e| e.to_string())?;
            Csi::new(ch)
                .identity
                .probe(volplane_proto::csi::ProbeRequest::default())
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        assert!(
            matches!(probe, Ok(Ok(_))),
            "{} s into a flood of 500 connections, a probe on a fresh connection: {probe:?}",
            started.elapsed().as_secs_f64()
        );
        slowest = slowest.max(asked.elapsed());
        probes += 1;
        let held = sidecar
            .identity
            .probe(volplane_proto::csi::ProbeRequest::default())
            .await;
        assert!(
            held.is_ok(),
            "the connection held through the flood: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reopened: u64 = flooders.iter().map(Flooder::closed).sum();
    eprintln!(
        "{:5} 500 connections held by 5 processes (reopened {reopened} times): {probes} probes on fresh connections, the slowest {:.1} ms",
        rt.flag(),
        slowest.as_secs_f64() * 1e3
    );
    assert!(reopened > 0, "the driver closed none of the flood");
    drop(flooders);
    still_serves(&d, "the flood ended").await;
}

/// A child process holding connections to a socket; the even ones send
/// HTTP/2's preface, the odd ones nothing. Killed when dropped.
struct Flooder {
    pid: libc::pid_t,
    /// Shared with the child: how many of its connections the driver
    /// closed.
    counter: *mut u64,
}

// The counter is written by the child only, read here with a volatile read.
unsafe impl Send for Flooder {}

/// Whether a flooder opens again a connection the driver closed.
#[derive(Clone, Copy, PartialEq)]
enum Reopen {
    Always,
    Never,
}

impl Flooder {
    fn start(sock: &Path, connections: usize, reopen: Reopen) -> Flooder {
        use std::os::unix::ffi::OsStrExt;
        // Everything the child needs is made before the fork: after it,
        // it only makes system calls.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let path = sock.as_os_str().as_bytes();
        assert!(path.len() < addr.sun_path.len(), "socket path too long");
        for (d, s) in addr.sun_path.iter_mut().zip(path) {
            *d = *s as libc::c_char;
        }
        let counter = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(counter, libc::MAP_FAILED);
        let counter = counter.cast::<u64>();
        let mut fds = vec![-1; connections];
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            unsafe { flood_in_child(&addr, &mut fds, counter, reopen) }
        }
        Flooder { pid, counter }
    }

    fn closed(&self) -> u64 {
        unsafe { std::ptr::read_volatile(self.counter) }
    }
}

impl Drop for Flooder {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            libc::munmap(self.counter.cast(), 8);
        }
    }
}

/// The flooder's life after the fork: system calls only.
unsafe fn flood_in_child(
    addr: &libc::sockaddr_un,
    fds: &mut [i32],
    counter: *mut u64,
    reopen: Reopen,
) -> ! {
    let connect = |i: usize| unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::connect(fd, (addr as *const libc::sockaddr_un).cast(), len) == 0
            && i.is_multiple_of(2)
        {
            libc::send(
                fd,
                PREFACE.as_ptr().cast(),
                PREFACE.len(),
                libc::MSG_NOSIGNAL,
            );
        }
        fd
    };
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        for (i, fd) in fds.iter_mut().enumerate() {
            *fd = connect(i);
        }
        let mut byte = 0u8;
        loop {
            for (i, fd) in fds.iter_mut().enumerate() {
                if *fd < 0 {
                    continue;
                }
                // What the driver sent (its SETTINGS) is read and dropped.
                let n = libc::recv(*fd, (&mut byte as *mut u8).cast(), 1, libc::MSG_DONTWAIT);
                if n == 0 || (n < 0 && *libc::__errno_location() != libc::EAGAIN) {
                    libc::close(*fd);
                    *fd = if reopen == Reopen::Always {
                        connect(i)
                    } else {
                        -1
                    };
                    std::ptr::write_volatile(counter, std::ptr::read_volatile(counter) + 1);
                }
            }
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

both_runtimes!(
    a_connection_without_the_preface_is_closed_after_the_bound,
    a_connection_without_the_preface_is_closed_after_the_bound_on
);

/// A connection that never sends HTTP/2's preface is closed once
/// `PREFACE_WITHIN` has passed, with no other connection arriving; one
/// that sent it stays.
async fn a_connection_without_the_preface_is_closed_after_the_bound_on(rt: Runtime) {
    use volplane_proto::connections::{PREFACE_WITHIN, SWEEP_EVERY};
    let d = Driver::start(rt);
    still_serves(&d, "start").await;
    // The first sends the preface, the second nothing.
    let two = Flooder::start(&socket(&d), 2, Reopen::Never);
    let opened = std::time::Instant::now();
    let limit = PREFACE_WITHIN + SWEEP_EVERY + Duration::from_secs(2);
    while two.closed() == 0 {
        assert!(opened.elapsed() < limit, "still open after {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = opened.elapsed();
    eprintln!(
        "{:5} a connection silent from the start: closed after {:.1} s",
        rt.flag(),
        after.as_secs_f64()
    );
    assert!(
        after >= PREFACE_WITHIN - Duration::from_millis(200),
        "closed after {after:?}"
    );
    tokio::time::sleep(SWEEP_EVERY * 2).await;
    assert_eq!(
        two.closed(),
        1,
        "the connection that sent its preface stays"
    );
}
