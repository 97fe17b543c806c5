//! What the scale benchmark measures: the processes (RSS, CPU), the API
//! server's request counts (`apiserver_request_total`, and the audit log's
//! per client), and the objects a watch sees done.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;

use crate::common::cluster::Cluster;
use crate::common::hostpath::Killed;

/// The User-Agent of this harness's own requests, left out of the counts.
pub const HARNESS: &str = "volplane-bench-harness";

/// A process measured: its name and the process.
pub struct Measured {
    pub name: &'static str,
    pub process: Killed,
}

impl Measured {
    pub fn start(name: &'static str, mut command: Command, cluster: &Cluster) -> Measured {
        let log = std::fs::File::create(cluster.dir().join(format!("{name}.log"))).unwrap();
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        Measured {
            name,
            process: Killed(child),
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// A field of /proc/<pid>/status, in KiB (VmRSS, VmHWM).
    pub fn kib(&self, field: &str) -> u64 {
        crate::common::process::status_kib(self.pid(), field)
    }

    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.process.0.try_wait() {
            panic!("{} exited ({status}); see its log", self.name);
        }
    }
}

/// A control plane whose API server keeps an audit log of every request
/// (metadata only), to count the requests of each client.
pub fn audited_cluster(apiserver: &Path) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = dir.path().join("audit.jsonl");
    let extra = [
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-maxsize=0".into(),
    ];
    Cluster::start_with(apiserver, dir, &extra)
}

/// The harness's client: the admin's, with its own User-Agent.
pub async fn harness_client(cluster: &Cluster) -> kube::Client {
    let _ready = cluster.client().await;
    let mut config = volplane_cli::controller::kube_config(Some(&cluster.kubeconfig))
        .await
        .unwrap();
    config
        .headers
        .retain(|(n, _)| n != http::header::USER_AGENT);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(HARNESS),
    ));
    kube::Client::try_from(config).unwrap()
}

/// What the API server counted: `apiserver_request_total` summed, and
/// the audit log's requests per client so far.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    total: f64,
    by_client: BTreeMap<String, u64>,
    /// How far the audit log has been read.
    read: u64,
}

impl Requests {
    pub async fn now(client: &kube::Client, cluster: &Cluster, before: &Requests) -> Requests {
        // The audit log is written as requests complete: let it settle.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(request).await.unwrap();
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        let total = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "apiserver_request_total")
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum();
        let mut by_client = before.by_client.clone();
        let read = count_audit(
            &cluster.dir().join("audit.jsonl"),
            before.read,
            &mut by_client,
        );
        Requests {
            total,
            by_client,
            read,
        }
    }

    /// What was counted since `before`, per client and in all.
    pub fn since(&self, before: &Requests) -> (f64, BTreeMap<String, u64>) {
        let by = self
            .by_client
            .iter()
            .map(|(c, n)| (c.clone(), n - before.by_client.get(c).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        (self.total - before.total, by)
    }
}

/// Counts the audit log's events from byte `from` by client; returns how
/// far it read (whole lines only).
fn count_audit(path: &Path, from: u64, by_client: &mut BTreeMap<String, u64>) -> u64 {
    use std::io::{BufRead, Seek};
    let mut file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    file.seek(std::io::SeekFrom::Start(from)).unwrap();
    let mut read = from;
    let mut line = String::new();
    let detail = std::env::var_os("VOLPLANE_BENCH_DETAIL").is_some();
    while file.read_line(&mut line).unwrap() > 0 && line.ends_with('\n') {
        read += line.len() as u64;
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        let mut who = client_name(event["userAgent"].as_str().unwrap_or(""));
        if detail {
            let object = &event["objectRef"];
            let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
            who = format!(
                "{who} {}{} {}{}",
                if code >= 300 {
                    format!("({code}) ")
                } else {
                    String::new()
                },
                event["verb"].as_str().unwrap_or(""),
                object["resource"].as_str().unwrap_or(""),
                object["subresource"]
                    .as_str()
                    .map_or(String::new(), |s| format!("/{s}"))
            );
        }
        *by_client.entry(who).or_default() += 1;
        line.clear();
    }
    read
}

/// Who a User-Agent is: volplane's by role, others by program.
fn client_name(agent: &str) -> String {
    if let Some(rest) = agent.strip_prefix("volplane/") {
        let role = rest
            .split_once('(')
            .map_or("", |(_, r)| r.trim_end_matches(')'));
        return format!("volplane {role}");
    }
    agent
        .split(['/', ' '])
        .next()
        .filter(|p| !p.is_empty())
        .unwrap_or("(none)")
        .to_string()
}

/// Objects of one kind as a watch sees them: name → whether it is done
/// (a claim Bound, an attachment attached).
pub struct Watched {
    /// `None` until the first list completed.
    items: Arc<Mutex<Option<BTreeMap<String, bool>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watched {
    pub fn new<K>(api: Api<K>, done: fn(&K) -> bool) -> Watched
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    {
        let items: Arc<Mutex<Option<BTreeMap<String, bool>>>> = Arc::default();
        let shared = items.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            let mut relist = BTreeMap::new();
            while let Some(event) = events.next().await {
                let name = |o: &K| o.meta().name.clone().unwrap_or_default();
                match event {
                    Ok(watcher::Event::Init) => relist.clear(),
                    Ok(watcher::Event::InitApply(o)) => {
                        relist.insert(name(&o), done(&o));
                    }
                    Ok(watcher::Event::InitDone) => {
                        *shared.lock().unwrap() = Some(std::mem::take(&mut relist));
                    }
                    Ok(watcher::Event::Apply(o)) => {
                        if let Some(items) = &mut *shared.lock().unwrap() {
                            items.insert(name(&o), done(&o));
                        }
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        if let Some(items) = &mut *shared.lock().unwrap() {
                            items.remove(&name(&o));
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        Watched { items, task }
    }

    /// (how many there are, how many are done), once listed.
    fn count(&self) -> Option<(usize, usize)> {
        let items = self.items.lock().unwrap();
        let items = items.as_ref()?;
        Some((items.len(), items.values().filter(|d| **d).count()))
    }

    /// Waits until `goal` holds of the counts, checking that every process
    /// in `alive` still runs; panics after `limit`.
    pub async fn wait(
        &self,
        what: &str,
        limit: Duration,
        alive: &mut [&mut Measured],
        goal: impl Fn(usize, usize) -> bool,
    ) {
        let start = Instant::now();
        loop {
            let (all, done) = self.count().unwrap_or((usize::MAX, 0));
            if all != usize::MAX && goal(all, done) {
                return;
            }
            alive.iter_mut().for_each(|m| m.check_alive());
            assert!(
                start.elapsed() < limit,
                "{what}: not within {limit:?} ({all} objects, {done} done)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Creates `n` objects `make(i)` through `api`, 50 at a time.
pub async fn create_all<K>(api: &Api<K>, n: usize, make: impl Fn(usize) -> K)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let pp = PostParams::default();
    for start in (0..n).step_by(50) {
        let made: Vec<K> = (start..n.min(start + 50)).map(&make).collect();
        for r in futures::future::join_all(made.iter().map(|o| api.create(&pp, o))).await {
            r.unwrap();
        }
    }
}

/// Deletes the objects `names` through `api`, 50 at a time.
pub async fn delete_all<K>(api: &Api<K>, names: &[String])
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let dp = DeleteParams::default();
    for chunk in names.chunks(50) {
        futures::future::join_all(chunk.iter().map(|n| api.delete(n, &dp))).await;
    }
}

/// One phase's figures.
pub struct Phase {
    what: String,
    pub objects: usize,
    pub wall: Duration,
    /// `apiserver_request_total`'s increase over the phase.
    pub requests: f64,
    by_client: BTreeMap<String, u64>,
}

impl Phase {
    pub fn print(&self) {
        let per = |n: f64| n / self.objects.max(1) as f64;
        let clients: Vec<String> = self
            .by_client
            .iter()
            .filter(|(c, _)| !c.starts_with(HARNESS))
            .map(|(c, n)| format!("{c} {:.2}", per(*n as f64)))
            .collect();
        println!(
            "  {:<34} {:>7.1} s   requests per object: {:.2} in all (apiserver_request_total); {}",
            self.what,
            self.wall.as_secs_f64(),
            per(self.requests),
            clients.join(", ")
        );
    }
}

/// The phases of one configuration: each ends with the API server's
/// counts since the last.
pub struct Phases<'a> {
    client: &'a kube::Client,
    cluster: &'a Cluster,
    before: Requests,
    /// Those ended so far.
    pub ended: Vec<Phase>,
}

impl<'a> Phases<'a> {
    /// The counts from now on.
    pub async fn start(client: &'a kube::Client, cluster: &'a Cluster) -> Phases<'a> {
        let before = Requests::now(client, cluster, &Requests::default()).await;
        Phases {
            client,
            cluster,
            before,
            ended: Vec::new(),
        }
    }

    /// Ends the phase `what`, begun at `start`, over `objects` objects,
    /// and prints it.
    pub async fn end(&mut self, what: String, objects: usize, start: Instant) {
        let wall = start.elapsed();
        let after = Requests::now(self.client, self.cluster, &self.before).await;
        let (requests, by_client) = after.since(&self.before);
        self.before = after;
        let p = Phase {
            what,
            objects,
            wall,
            requests,
            by_client,
        };
        p.print();
        self.ended.push(p);
    }
}
