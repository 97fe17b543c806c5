//! Which connections a served socket keeps, so that no client can lock the
//! others out: the table both runtimes' accept loops admit connections
//! through and their stream wrappers report to.
//!
//! - A connection that has not sent HTTP/2's preface within
//!   [`PREFACE_WITHIN`] is closed: a real client sends it at once.
//! - While there is room, every connection is admitted: the kubelet opens
//!   one connection per call, and a burst of mounts opens many at once.
//! - When every place is taken, a new connection from a process holding
//!   `n` takes the place of, in this order:
//!   1. the oldest connection that has not sent its preface within
//!      [`QUIET`];
//!   2. the quietest idle connection (no request in flight) of the process
//!      holding the most, if that process holds `n + 2` or more — places
//!      move toward processes that hold few, never away from them;
//!   3. the quietest connection, even with a request in flight, of the
//!      process holding the most beyond [`Limits::per_process`], if `n` is
//!      below that share — so one process cannot hold every place, even
//!      with requests it never finishes;
//!
//!   else it is refused. A client holding one or two connections therefore
//!   always gets in past a flood, however many processes flood, and a
//!   request in flight of a process within its share is never cut.
//! - A connection that has sent its preface is otherwise never closed for
//!   being idle: the CSI sidecars hold one connection for their whole life
//!   and exit when it is lost (csi-lib-utils' `ExitOnConnectionLoss`), so
//!   closing an idle sidecar's connection would restart its pod.
//!
//! Closing is cooperative: the table marks the connection and wakes its
//! reader, whose next read ends the stream (end of file), and HTTP/2 then
//! ends the connection; its place is free when its [`Admitted`] drops.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use crate::limits::Limits;

/// How long a connection may go without sending HTTP/2's preface.
pub const PREFACE_WITHIN: Duration = Duration::from_secs(10);
/// A connection without its preface for this long is taken for a new one
/// before any other (a real client sends the preface at once).
pub const QUIET: Duration = Duration::from_secs(1);
/// How often an accept loop should call [`ConnectionTable::sweep`].
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
const PREFACE_BYTES: u64 = 24;

/// The process at the other end of a unix socket (`SO_PEERCRED`), if the
/// kernel says.
pub fn peer_process(fd: BorrowedFd<'_>) -> Option<u32> {
    rustix::net::sockopt::socket_peercred(fd)
        .ok()
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
}

/// See the module documentation. Clones share the table.
#[derive(Debug, Clone)]
pub struct ConnectionTable {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    socket: PathBuf,
    limits: Limits,
    started: Instant,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
    /// Refusals, and closings to make room, not yet in the log.
    refused: Hushed,
    made_room: Hushed,
}

/// Log lines about a flood, at most one per [`LOG_EVERY`], each saying how
/// many happened since the last: a flood of connections must not become a
/// flood of log lines.
#[derive(Debug, Default)]
struct Hushed {
    last: Option<Duration>,
    unlogged: u64,
}

/// See [`Hushed`].
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Hushed {
    /// One more; `Some(count)` when it is time to log `count` of them.
    fn note(&mut self, now: Duration) -> Option<u64> {
        self.unlogged += 1;
        if self
            .last
            .is_some_and(|last| now.saturating_sub(last) < LOG_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[derive(Debug)]
struct Entry {
    process: Option<u32>,
    opened: Duration,
    state: Arc<State>,
}

/// What a connection's stream wrapper and the table share.
#[derive(Debug, Default)]
struct State {
    /// Bytes the client has sent.
    read: AtomicU64,
    /// When it last sent any, since the table started, in milliseconds.
    last_read_ms: AtomicU64,
    /// Requests being answered ([`Requests`]).
    requests: AtomicU64,
    /// Set by the table: the next read ends the stream.
    closing: AtomicBool,
    reader: Mutex<Option<Waker>>,
}

impl State {
    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        if let Some(w) = self
            .reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            w.wake();
        }
    }

    fn proven(&self) -> bool {
        self.read.load(Ordering::Acquire) >= PREFACE_BYTES
    }

    fn idle(&self) -> bool {
        self.requests.load(Ordering::Acquire) == 0
    }
}

/// Counts the requests a connection is answering: the server's service
/// layer starts one per request (`crate::status::Answers`) and holds it
/// until the answer is ready. Clones count for the same connection.
#[derive(Debug, Clone)]
pub struct Requests(Arc<State>);

impl Requests {
    /// A request begins; it ends when the returned guard drops.
    pub fn start(&self) -> InFlight {
        self.0.requests.fetch_add(1, Ordering::AcqRel);
        InFlight(self.0.clone())
    }
}

/// One request being answered (see [`Requests`]).
#[derive(Debug)]
pub struct InFlight(Arc<State>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One admitted connection's place: its stream wrapper holds it, reports
/// what it reads through it, and asks it whether to end. Dropping it frees
/// the place.
#[derive(Debug)]
pub struct Admitted {
    id: u64,
    state: Arc<State>,
    shared: Arc<Shared>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.shared.lock().open.remove(&self.id);
    }
}

impl Admitted {
    /// Whether the table closed this connection; registers `cx`'s waker to
    /// be woken when it does. Ask before each read; when true, answer end
    /// of file.
    pub fn closing(&self, cx: &Context<'_>) -> bool {
        if self.state.closing.load(Ordering::Acquire) {
            return true;
        }
        let mut reader = self
            .state
            .reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*reader {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => *reader = Some(cx.waker().clone()),
        }
        drop(reader);
        self.state.closing.load(Ordering::Acquire)
    }

    /// The count of this connection's requests, for the service layer.
    pub fn requests(&self) -> Requests {
        Requests(self.state.clone())
    }

    /// The client sent `n` bytes.
    pub fn read(&self, n: usize) {
        self.read_at(n, self.shared.started.elapsed());
    }

    fn read_at(&self, n: usize, now: Duration) {
        if n > 0 {
            self.state.read.fetch_add(n as u64, Ordering::AcqRel);
            let now = now.as_millis() as u64;
            self.state.last_read_ms.store(now, Ordering::Release);
        }
    }
}

impl ConnectionTable {
    /// The table of the socket at `socket`, held to `limits`.
    pub fn new(socket: &Path, limits: &Limits) -> ConnectionTable {
        ConnectionTable {
            shared: Arc::new(Shared {
                socket: socket.to_path_buf(),
                limits: *limits,
                started: Instant::now(),
                table: Mutex::new(Table::default()),
            }),
        }
    }

    /// A place for a connection from `process` (see [`peer_process`]), or
    /// `None` (with a warning) when it may not have one; see the module
    /// documentation.
    pub fn admit(&self, process: Option<u32>) -> Option<Admitted> {
        self.admit_at(process, self.shared.started.elapsed())
    }

    fn admit_at(&self, process: Option<u32>, now: Duration) -> Option<Admitted> {
        let mut table = self.shared.lock();
        let live = |e: &&Entry| !e.state.closing.load(Ordering::Acquire);
        let socket = self.shared.socket.display();
        if table.open.values().filter(live).count() >= self.shared.limits.connections {
            let limit = self.shared.limits.connections;
            let Some(victim) = table.idlest(now, process, self.shared.limits.per_process) else {
                if let Some(refused) = table.refused.note(now) {
                    tracing::warn!(
                        socket = %socket,
                        limit,
                        refused,
                        "refusing connections: {limit} are open, the limit, and none may give way"
                    );
                }
                return None;
            };
            table.open[&victim].state.close();
            let pid = table.open[&victim].process;
            if let Some(closed) = table.made_room.note(now) {
                tracing::info!(
                    socket = %socket,
                    pid,
                    closed,
                    "closing idle connections to make room for new ones: {limit} are open, the limit"
                );
            }
        }
        let id = table.next;
        table.next += 1;
        let state = Arc::new(State::default());
        state
            .last_read_ms
            .store(now.as_millis() as u64, Ordering::Release);
        table.open.insert(
            id,
            Entry {
                process,
                opened: now,
                state: state.clone(),
            },
        );
        Some(Admitted {
            id,
            state,
            shared: self.shared.clone(),
        })
    }

    /// Closes the connections that have not sent their preface within
    /// [`PREFACE_WITHIN`]. Call it every [`SWEEP_EVERY`].
    pub fn sweep(&self) {
        self.sweep_at(self.shared.started.elapsed());
    }

    fn sweep_at(&self, now: Duration) {
        let table = self.shared.lock();
        let late = table.open.values().filter(|e| {
            !e.state.proven()
                && !e.state.closing.load(Ordering::Acquire)
                && now.saturating_sub(e.opened) >= PREFACE_WITHIN
        });
        let mut closed = 0;
        for e in late {
            e.state.close();
            closed += 1;
        }
        if closed > 0 {
            tracing::info!(
                socket = %self.shared.socket.display(),
                closed,
                "closed connections that sent no HTTP/2 preface within {}s",
                PREFACE_WITHIN.as_secs()
            );
        }
    }

    /// How many connections hold a place (those being closed included).
    pub fn open(&self) -> usize {
        self.shared.lock().open.len()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Table {
    /// The connection a new one from `process` may take the place of, if
    /// any (see the module documentation).
    fn idlest(&self, now: Duration, process: Option<u32>, share: usize) -> Option<u64> {
        let live: Vec<(u64, &Entry)> = self
            .open
            .iter()
            .filter(|(_, e)| !e.state.closing.load(Ordering::Acquire))
            .map(|(id, e)| (*id, e))
            .collect();
        let silent = live
            .iter()
            .filter(|(_, e)| !e.state.proven() && now.saturating_sub(e.opened) >= QUIET)
            .min_by_key(|(id, e)| (e.opened, *id));
        if let Some((id, _)) = silent {
            return Some(*id);
        }
        let mut held: BTreeMap<Option<u32>, usize> = BTreeMap::new();
        for (_, e) in &live {
            *held.entry(e.process).or_default() += 1;
        }
        let newcomer = held.get(&process).copied().unwrap_or(0);
        let quietest = |of: Option<u32>, idle_only: bool| {
            live.iter()
                .filter(|(_, e)| e.process == of && (!idle_only || e.state.idle()))
                .min_by_key(|(id, e)| (e.state.last_read_ms.load(Ordering::Acquire), *id))
                .map(|(id, _)| *id)
        };
        // The biggest holders first, each for an idle connection.
        let mut by_size: Vec<(Option<u32>, usize)> = held.into_iter().collect();
        by_size.sort_by_key(|(p, n)| (std::cmp::Reverse(*n), *p));
        let idle = by_size
            .iter()
            .take_while(|(_, n)| *n >= newcomer + 2)
            .find_map(|(p, _)| quietest(*p, true));
        if idle.is_some() {
            return idle;
        }
        // Past its share, a process gives way even with requests in flight.
        let (biggest, most) = by_size.first()?;
        (*most > share && newcomer < share)
            .then(|| quietest(*biggest, false))
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn table(connections: usize, per_process: usize) -> ConnectionTable {
        let limits = Limits {
            connections,
            per_process,
            ..Limits::DEFAULT
        };
        ConnectionTable::new(Path::new("/x.sock"), &limits)
    }

    fn closing(a: &Admitted) -> bool {
        a.closing(&Context::from_waker(Waker::noop()))
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn while_there_is_room_every_connection_is_admitted_and_places_are_freed_when_dropped() {
        let t = table(3, 1);
        let a = t.admit(Some(7)).unwrap();
        let _b = t.admit(Some(7)).unwrap();
        let _c = t
            .admit(Some(7))
            .expect("room: a burst of one process's calls");
        assert_eq!(t.open(), 3);
        drop(a);
        assert_eq!(t.open(), 2);
        assert!(t.admit(Some(7)).is_some());
    }

    /// `n` connections of `process`, each sent its preface and answering
    /// a request (held until the guards drop).
    fn answering(t: &ConnectionTable, process: u32, n: usize) -> (Vec<Admitted>, Vec<InFlight>) {
        let open: Vec<_> = (0..n)
            .map(|_| t.admit_at(Some(process), secs(0)).unwrap())
            .collect();
        let busy = open
            .iter()
            .map(|c| {
                c.read_at(100, secs(0));
                c.requests().start()
            })
            .collect();
        (open, busy)
    }

    #[test]
    fn a_request_in_flight_is_cut_only_past_its_process_share() {
        let t = table(4, 2);
        // The kubelet within its share of 2, and a flooder with requests it
        // never finishes, also within: full, nothing idle, refused.
        let _kubelet = answering(&t, 1, 2);
        let _flood = answering(&t, 2, 2);
        assert!(t.admit_at(Some(3), secs(5)).is_none());
        let third = t.admit_at(Some(2), secs(5));
        assert!(third.is_none(), "2 + 2 is not room for the flooder's third");
        // A flooder at 3 of 2 (it had room before): it gives way.
        let t = table(4, 2);
        let (k, _k_busy) = answering(&t, 1, 1);
        let (f, _f_busy) = answering(&t, 2, 3);
        let newcomer = t
            .admit_at(Some(3), secs(5))
            .expect("the flooder is past its share");
        assert!(f.iter().any(closing), "one of the flooder's");
        assert!(
            !closing(&k[0]) && !closing(&newcomer),
            "the kubelet's request goes on"
        );
    }

    #[test]
    fn a_full_table_gives_the_oldest_connection_silent_past_a_second_first() {
        let t = table(3, 8);
        let proven = t.admit_at(Some(1), secs(0)).unwrap();
        proven.read_at(24, secs(0));
        let silent_old = t.admit_at(Some(2), secs(1)).unwrap();
        let silent_new = t.admit_at(Some(3), secs(2)).unwrap();
        let at = Duration::from_millis(2500);
        let fourth = t.admit_at(Some(4), at).expect("silent_old is 1.5 s old");
        assert!(closing(&silent_old) && !closing(&silent_new) && !closing(&proven));
        // One just opened is not taken: its preface may be on its way.
        assert!(t.admit_at(Some(5), at).is_none(), "silent_new is 0.5 s old");
        let fifth = t.admit_at(Some(5), secs(4)).expect("silent_new is 2 s old");
        assert!(closing(&silent_new) && !closing(&fourth) && !closing(&fifth));
        assert_eq!(
            t.open(),
            5,
            "the closed ones hold their places until they end"
        );
        drop((silent_old, silent_new));
        assert_eq!(t.open(), 3);
    }

    #[test]
    fn places_move_from_the_biggest_holders_quietest_toward_those_holding_few() {
        let t = table(4, 8);
        let sidecar = t.admit_at(Some(1), secs(0)).unwrap();
        sidecar.read_at(100, secs(0));
        let flood: Vec<_> = (0..3)
            .map(|_| t.admit_at(Some(2), secs(0)).unwrap())
            .collect();
        for (i, f) in flood.iter().enumerate() {
            f.read_at(24, secs(i as u64));
        }
        let newcomer = t.admit_at(Some(3), secs(3)).expect("room made");
        assert!(closing(&flood[0]), "the flooder's quietest");
        assert!(!closing(&flood[1]) && !closing(&sidecar) && !closing(&newcomer));
        newcomer.read_at(24, secs(3));
        // The flooder (2 left, within its share of 8) may not take back
        // from one holding 1, nor the sidecar's second from the flooder
        // (2 < 1 + 2).
        assert!(t.admit_at(Some(2), secs(4)).is_none());
        assert!(t.admit_at(Some(1), secs(4)).is_none());
        assert!(!closing(&sidecar) && !closing(&newcomer) && !closing(&flood[2]));
    }

    #[test]
    fn a_connection_silent_past_the_preface_bound_is_closed_by_the_sweep() {
        let t = table(8, 8);
        let silent = t.admit_at(None, secs(0)).unwrap();
        let proven = t.admit_at(None, secs(0)).unwrap();
        proven.read_at(24, secs(0));
        t.sweep_at(secs(9));
        assert!(!closing(&silent), "not yet");
        t.sweep_at(PREFACE_WITHIN);
        assert!(closing(&silent) && !closing(&proven));
    }

    #[test]
    fn a_flood_is_logged_once_in_a_while_with_its_count() {
        let mut h = Hushed::default();
        assert_eq!(h.note(secs(0)), Some(1));
        assert_eq!(h.note(secs(1)), None);
        assert_eq!(h.note(secs(9)), None);
        assert_eq!(h.note(secs(10)), Some(3));
        assert_eq!(h.note(secs(30)), Some(1));
    }

    #[test]
    fn a_closed_connection_wakes_its_reader() {
        let t = table(1, 1);
        let a = t.admit_at(None, secs(0)).unwrap();
        let woken = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let waker = Waker::from(Arc::new(Flag(woken.clone())));
        assert!(!a.closing(&Context::from_waker(&waker)));
        t.sweep_at(PREFACE_WITHIN);
        assert!(woken.load(Ordering::SeqCst));
        assert!(closing(&a));
    }
}
