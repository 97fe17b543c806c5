//! Informers: list + watch of one kind (kube-runtime's watcher: bookmarks,
//! relist on 410 Gone; backoff on errors of our own) turned into the machines' `Watch`
//! inputs. A relist reports what it found, and, once it is complete, every
//! object the previous list knew that it did not find as deleted — so a
//! machine never keeps an object that went while no watch was open.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::DynamicObject;
use kube::runtime::watcher::{self, Event};
use volplane_core::control::Watch;
use volplane_core::model::{Kind, Object, ObjectKey};
use volplane_service::drive::Runtime;

use crate::api::Seen;
use crate::convert::to_core;
use crate::resources::api;

/// What an informer tells its consumer.
#[derive(Debug, Clone, PartialEq)]
pub enum Feed {
    /// An object was added, changed or deleted.
    Watch(Watch),
    /// A list of the kind completed (the first one: the kind is synced).
    Listed(Kind),
}

/// One kind's informer state: what it has delivered, and the relist under
/// way. Pure: [`Informer::on_event`] turns watcher events into feed items.
#[derive(Debug, Clone)]
pub struct Informer {
    kind: Kind,
    /// What it delivered last, shared with the roles' caches (one copy
    /// of each object in the process, however many roles read it).
    known: BTreeMap<ObjectKey, Arc<Object>>,
    /// The keys a relist under way has found.
    relist: Option<BTreeSet<ObjectKey>>,
    /// The objects the process has seen (from watches and from writes'
    /// answers): an object read again is handed on as the copy kept there.
    seen: Seen,
}

impl Informer {
    /// An informer of `kind` that has delivered nothing yet, sharing its
    /// objects through `seen`.
    pub fn new(kind: Kind, seen: Seen) -> Informer {
        Informer {
            kind,
            known: BTreeMap::new(),
            relist: None,
            seen,
        }
    }

    /// What one watcher event means to the machines.
    pub fn on_event(&mut self, event: Event<DynamicObject>) -> Vec<Feed> {
        match event {
            Event::Init => {
                self.relist = Some(BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                let Some(o) = self.read(o) else {
                    return Vec::new();
                };
                if let Some(relist) = &mut self.relist {
                    relist.insert(o.key());
                }
                self.applied(o)
            }
            Event::InitDone => {
                let found = self.relist.take().unwrap_or_default();
                let (kept, gone) = std::mem::take(&mut self.known)
                    .into_iter()
                    .partition(|(k, _)| found.contains(k));
                self.known = kept;
                let mut out: Vec<Feed> = gone
                    .into_values()
                    .map(|o| Feed::Watch(Watch::Deleted(o)))
                    .collect();
                out.push(Feed::Listed(self.kind));
                out
            }
            Event::Apply(o) => match self.read(o) {
                Some(o) => self.applied(o),
                None => Vec::new(),
            },
            Event::Delete(o) => match self.read(o) {
                Some(o) => {
                    self.known.remove(&o.key());
                    if let Some(relist) = &mut self.relist {
                        relist.remove(&o.key());
                    }
                    vec![Feed::Watch(Watch::Deleted(o.into()))]
                }
                None => Vec::new(),
            },
        }
    }

    fn applied(&mut self, o: Object) -> Vec<Feed> {
        // A relist repeats what is known unchanged: nothing to tell.
        if self.known.get(&o.key()).is_some_and(|k| **k == o) {
            return Vec::new();
        }
        // The write's answer that made this version, if it came first, is
        // the copy the roles already hold.
        let o = self.seen.intern(Arc::new(o));
        self.known.insert(o.key(), o.clone());
        vec![Feed::Watch(Watch::Applied(o))]
    }

    /// The model's view of a watched object; one it cannot read is left out
    /// with a warning (a hostile or malformed object stops nothing).
    fn read(&self, o: DynamicObject) -> Option<Object> {
        let name = o.metadata.name.clone().unwrap_or_default();
        let mut v = match serde_json::to_value(&o) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(kind = self.kind.as_str(), name, "unreadable object: {e}");
                return None;
            }
        };
        // Watch events carry apiVersion and kind; list items may not.
        if let Some(map) = v.as_object_mut() {
            map.entry("kind")
                .or_insert_with(|| self.kind.as_str().into());
        }
        match to_core(v) {
            Ok(o) if o.kind() == self.kind => Some(o),
            Ok(o) => {
                tracing::warn!(
                    kind = self.kind.as_str(),
                    name,
                    "watch sent a {}",
                    o.kind().as_str()
                );
                None
            }
            Err(e) => {
                tracing::warn!(kind = self.kind.as_str(), name, "object left out: {e}");
                None
            }
        }
    }
}

/// Lists and watches `kind` (in `namespace`, or everywhere when it is
/// empty) until the stream ends, passing what it means to `feed`. A failed
/// list or watch is retried after 0.8 s, doubling to 30 s while the
/// failures go on (kube's own backoff starts over at every attempt, since
/// each begins with a fresh list); the first failure, a new reason and
/// each doubling of the run are logged, not every attempt.
pub async fn inform(
    rt: Arc<dyn Runtime>,
    client: Client,
    kind: Kind,
    namespace: String,
    seen: Seen,
    mut feed: impl FnMut(Feed),
) {
    let api = api(&client, kind, &namespace);
    let config = watcher::Config::default();
    let mut informer = Informer::new(kind, seen);
    let mut events = std::pin::pin!(watcher::watcher(api, config));
    let (mut failures, mut last_reason) = (0u32, String::new());
    while let Some(event) = events.next().await {
        let e = match event {
            Ok(e) => e,
            Err(e) => {
                failures += 1;
                let reason = not_served(&e).unwrap_or_else(|| e.to_string());
                if failures.is_power_of_two() || reason != last_reason {
                    warn_failed(kind, failures, &reason, not_served(&e).is_some());
                }
                last_reason = reason;
                rt.sleep(retry_delay(failures)).await;
                continue;
            }
        };
        if !matches!(e, Event::Init) {
            if failures > 0 {
                tracing::info!(kind = kind.as_str(), "{} is served again", kind.as_str());
            }
            (failures, last_reason) = (0, String::new());
        }
        informer.on_event(e).into_iter().for_each(&mut feed);
    }
}

/// How long the `n`th failure in a row waits: 0.8 s doubling to 30 s.
pub fn retry_delay(n: u32) -> Duration {
    let doubled = Duration::from_millis(800).saturating_mul(1 << n.saturating_sub(1).min(6));
    doubled.min(Duration::from_secs(30))
}

fn warn_failed(kind: Kind, failures: u32, reason: &str, not_served: bool) {
    let (k, n) = (kind.as_str(), failures);
    if not_served {
        tracing::warn!(
            kind = k,
            failures = n,
            "cannot list {k}: {reason}; the roles that watch it wait, and the list is retried with backoff"
        );
    } else {
        tracing::warn!(
            kind = k,
            failures = n,
            "watch of {k} failed, retrying with backoff: {reason}"
        );
    }
}

/// What a list error says, when it is that the kind is not served to us:
/// not found (its CRD is not installed) or forbidden (RBAC).
fn not_served(e: &watcher::Error) -> Option<String> {
    let (watcher::Error::InitialListFailed(kube::Error::Api(status))
    | watcher::Error::WatchStartFailed(kube::Error::Api(status))) = e
    else {
        return None;
    };
    match status.code {
        404 => Some(format!(
            "the API server does not serve it (is its CustomResourceDefinition installed?): {}",
            status.message
        )),
        403 => Some(format!("forbidden (RBAC): {}", status.message)),
        _ => None,
    }
}
