//! The storage appliance: volumes as sparse image files in one directory,
//! served over [`api`](crate::api). Busy answers (503) and slow ones are
//! injected on a fixed rhythm, so tests see the same faults every run.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::api::{Create, Expand, Faults, Page, Problem, Stats, VolumeInfo, is_volume_id};
use crate::http::{self, Message};

/// How the appliance runs.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Where the images and their records live.
    pub dir: PathBuf,
    /// The tokens it accepts for anything.
    pub tokens: Vec<String>,
    /// The tokens it accepts for reading only (GET).
    pub readers: Vec<String>,
    /// Every n-th request is answered 503 (0: never).
    pub busy_every: u64,
    /// The first request and every n-th after it wait [`Settings::slow`]
    /// before they act (0: never).
    pub slow_every: u64,
    /// How long a slow request waits.
    pub slow: Duration,
}

/// What the appliance holds.
#[derive(Debug, Default)]
struct Held {
    volumes: BTreeMap<String, VolumeInfo>,
    next_id: u64,
    fence: u64,
}

/// The appliance.
#[derive(Debug)]
pub struct Appliance {
    settings: Settings,
    held: Mutex<Held>,
    requests: AtomicU64,
    unauthorized: AtomicU64,
    fenced: AtomicU64,
    busy: AtomicU64,
    /// Changes still to be slowed by `POST /v1/faults`, and by how much (ms).
    slow_next: AtomicU64,
    slow_next_ms: AtomicU64,
    /// Expansions answer without growing anything.
    short_expand: std::sync::atomic::AtomicBool,
}

type Answer = (u16, Vec<u8>);

fn json<T: serde::Serialize>(code: u16, value: &T) -> Answer {
    (code, serde_json::to_vec(value).unwrap_or_default())
}

fn problem(code: u16, error: impl Into<String>) -> Answer {
    json(
        code,
        &Problem {
            error: error.into(),
        },
    )
}

impl Appliance {
    /// Opens the appliance over `settings.dir`, reading what it holds.
    pub fn open(settings: Settings) -> std::io::Result<Appliance> {
        std::fs::create_dir_all(&settings.dir)?;
        let mut held = Held::default();
        for e in std::fs::read_dir(&settings.dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".json").filter(|id| is_volume_id(id)) {
                let v: VolumeInfo = serde_json::from_slice(&std::fs::read(e.path())?)
                    .map_err(std::io::Error::other)?;
                let n: u64 = id[3..].parse().unwrap_or(0);
                held.next_id = held.next_id.max(n + 1);
                held.volumes.insert(v.id.clone(), v);
            }
        }
        let fence = std::fs::read_to_string(settings.dir.join("fence")).unwrap_or_default();
        held.fence = fence.trim().parse().unwrap_or(0);
        Ok(Appliance {
            settings,
            held: Mutex::new(held),
            requests: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
            fenced: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            slow_next: AtomicU64::new(0),
            slow_next_ms: AtomicU64::new(0),
            short_expand: false.into(),
        })
    }

    /// Serves one connection: one request, one answer.
    pub fn serve(&self, mut stream: TcpStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let answer = match http::read(&mut stream) {
            Ok(request) => self.answer(&request),
            Err(e) => problem(400, format!("unreadable request: {e}")),
        };
        let status = format!("HTTP/1.1 {} {}", answer.0, reason(answer.0));
        let headers = [("Content-Type", "application/json".to_string())];
        let _ = http::write(&mut stream, &status, &headers, &answer.1);
    }

    fn answer(&self, request: &Message) -> Answer {
        let (method, target) = request.start.split_once(' ').unwrap_or(("", ""));
        let target = target.split(' ').next().unwrap_or("");
        if (method, target) == ("GET", "/v1/stats") {
            return json(200, &self.stats()); // not counted: the tests' own look
        }
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let every = |k: u64| k > 0 && n.is_multiple_of(k);
        if every(self.settings.busy_every) {
            self.busy.fetch_add(1, Ordering::Relaxed);
            return problem(503, "busy: try again");
        }
        let bearer = request
            .header("authorization")
            .and_then(|a| a.strip_prefix("Bearer "));
        let full = bearer.is_some_and(|t| self.settings.tokens.iter().any(|k| k == t));
        let reader = bearer.is_some_and(|t| self.settings.readers.iter().any(|k| k == t));
        let allowed = full || (reader && method == "GET");
        if !allowed {
            self.unauthorized.fetch_add(1, Ordering::Relaxed);
            return if reader {
                problem(403, "a reader token cannot change anything")
            } else {
                problem(401, "a valid bearer token is required")
            };
        }
        // The first request, and every n-th after it, is slow.
        if self.settings.slow_every > 0 && (n - 1).is_multiple_of(self.settings.slow_every) {
            std::thread::sleep(self.settings.slow);
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if method != "GET" && parts != ["v1", "faults"] {
            let slowed = self
                .slow_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |k| k.checked_sub(1));
            if slowed.is_ok() {
                let ms = self.slow_next_ms.load(Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        match (method, parts.as_slice()) {
            ("POST", ["v1", "faults"]) => self.faults(&request.body),
            ("GET", ["v1", "volumes"]) => self.list(query),
            ("GET", ["v1", "volumes", id]) => self.get(id),
            ("POST", ["v1", "volumes"]) => self.change(request, |h, a| a.create(h, &request.body)),
            ("POST", ["v1", "volumes", id, "expand"]) => {
                self.change(request, |h, a| a.expand(h, id, &request.body))
            }
            ("DELETE", ["v1", "volumes", id]) => self.change(request, |h, a| a.delete(h, id)),
            _ => problem(404, format!("no such request: {method} {path}")),
        }
    }

    /// `POST /v1/faults {slow_next, slow_ms, short_expand}`: the next
    /// `slow_next` changes wait `slow_ms` before they act; with
    /// `short_expand`, expansions answer without growing anything.
    fn faults(&self, body: &[u8]) -> Answer {
        let Ok(f) = serde_json::from_slice::<Faults>(body) else {
            return problem(400, "the body is not {slow_next, slow_ms}");
        };
        self.slow_next_ms.store(f.slow_ms, Ordering::SeqCst);
        self.slow_next.store(f.slow_next, Ordering::SeqCst);
        self.short_expand.store(f.short_expand, Ordering::SeqCst);
        json(200, &f)
    }

    fn stats(&self) -> Stats {
        Stats {
            requests: self.requests.load(Ordering::Relaxed),
            unauthorized: self.unauthorized.load(Ordering::Relaxed),
            fenced: self.fenced.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            incarnation: self.held.lock().map_or(0, |h| h.fence),
        }
    }

    fn get(&self, id: &str) -> Answer {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.volumes.get(id) {
            Some(v) => json(200, v),
            None => problem(404, format!("volume {id} does not exist")),
        }
    }

    fn list(&self, query: &str) -> Answer {
        let mut start = "";
        let mut limit = 0usize;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("start", s)) => start = s,
                Some(("limit", l)) => limit = l.parse().unwrap_or(0),
                _ => return problem(400, format!("unknown query {pair:?}")),
            }
        }
        if !start.is_empty() && !is_volume_id(start) {
            return problem(400, format!("start {start:?} is no volume id"));
        }
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut rest = held
            .volumes
            .range(start.to_string()..)
            .map(|(_, v)| v.clone());
        let limit = if limit == 0 { usize::MAX } else { limit };
        let volumes: Vec<VolumeInfo> = rest.by_ref().take(limit).collect();
        let next = rest.next().map(|v| v.id).unwrap_or_default();
        json(200, &Page { volumes, next })
    }

    /// A change: refused from an incarnation older than the newest seen,
    /// which it raises. The check and the change are made under one lock,
    /// after any injected wait, so a late request is judged when it acts.
    fn change(
        &self,
        request: &Message,
        act: impl FnOnce(&mut Held, &Appliance) -> Answer,
    ) -> Answer {
        let Some(incarnation) = request
            .header("x-incarnation")
            .and_then(|i| i.parse::<u64>().ok())
        else {
            return problem(400, "X-Incarnation is required on a change");
        };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if incarnation < held.fence {
            self.fenced.fetch_add(1, Ordering::Relaxed);
            return problem(
                409,
                format!(
                    "fenced: incarnation {incarnation} is older than {}",
                    held.fence
                ),
            );
        }
        if incarnation > held.fence {
            held.fence = incarnation;
            if let Err(e) = std::fs::write(self.settings.dir.join("fence"), incarnation.to_string())
            {
                return problem(500, format!("record the fence: {e}"));
            }
        }
        act(&mut held, self)
    }

    fn create(&self, held: &mut Held, body: &[u8]) -> Answer {
        let Ok(c) = serde_json::from_slice::<Create>(body) else {
            return problem(400, "the body is not {name, bytes}");
        };
        if c.name.is_empty() || c.name.len() > 128 || c.bytes == 0 {
            return problem(400, "a name of 1–128 bytes and a size are required");
        }
        if let Some(v) = held.volumes.values().find(|v| v.name == c.name) {
            return if v.bytes >= c.bytes {
                json(200, v)
            } else {
                problem(
                    409,
                    format!("{} exists as {} with {} bytes", c.name, v.id, v.bytes),
                )
            };
        }
        let id = format!("ra-{:010}", held.next_id);
        let v = VolumeInfo {
            id: id.clone(),
            name: c.name,
            bytes: c.bytes,
        };
        let made = std::fs::File::create(self.image(&id))
            .and_then(|f| f.set_len(c.bytes))
            .and_then(|()| self.record(&v));
        if let Err(e) = made {
            let _ = std::fs::remove_file(self.image(&id));
            return problem(507, format!("cannot make {id}: {e}"));
        }
        held.next_id += 1;
        held.volumes.insert(id, v.clone());
        json(201, &v)
    }

    fn expand(&self, held: &mut Held, id: &str, body: &[u8]) -> Answer {
        let Ok(e) = serde_json::from_slice::<Expand>(body) else {
            return problem(400, "the body is not {bytes}");
        };
        let Some(v) = held.volumes.get_mut(id) else {
            return problem(404, format!("volume {id} does not exist"));
        };
        if e.bytes > v.bytes && !self.short_expand.load(Ordering::SeqCst) {
            let mut grown = v.clone();
            grown.bytes = e.bytes;
            let done = std::fs::OpenOptions::new()
                .write(true)
                .open(self.image(id))
                .and_then(|f| f.set_len(e.bytes))
                .and_then(|()| self.record(&grown));
            if let Err(err) = done {
                return problem(507, format!("cannot grow {id}: {err}"));
            }
            *v = grown;
        }
        json(200, &*v)
    }

    fn delete(&self, held: &mut Held, id: &str) -> Answer {
        if !held.volumes.contains_key(id) {
            return problem(404, format!("volume {id} does not exist"));
        }
        if attached(&self.image(id)) {
            return problem(
                409,
                format!("volume {id} is attached to a node: detach it first"),
            );
        }
        let _ = std::fs::remove_file(self.dir().join(format!("{id}.json")));
        let _ = std::fs::remove_file(self.image(id));
        held.volumes.remove(id);
        (204, Vec::new())
    }

    fn dir(&self) -> &Path {
        &self.settings.dir
    }

    /// The image of volume `id` (an id of the appliance's form).
    fn image(&self, id: &str) -> PathBuf {
        self.dir().join(format!("{id}.img"))
    }

    fn record(&self, v: &VolumeInfo) -> std::io::Result<()> {
        let path = self.dir().join(format!("{}.json", v.id));
        let temp = path.with_extension("json.new");
        std::fs::write(&temp, serde_json::to_vec(v).map_err(std::io::Error::other)?)?;
        std::fs::File::open(&temp)?.sync_all()?;
        std::fs::rename(&temp, &path)
    }
}

/// True when a loop device is backed by `image`.
fn attached(image: &Path) -> bool {
    std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|b| Path::new(b.trim_end()) == image)
        })
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Internal Server Error",
    }
}
