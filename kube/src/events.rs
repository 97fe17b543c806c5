//! The machines' events as Kubernetes events (events.k8s.io/v1), with the
//! machines' reasons, about the object they name. A repeat within six
//! minutes (the same type, reason, reporter and object; the note may
//! differ) continues the first one's series, as client-go's recorder and
//! kube-runtime's do. The series are kept in the order they were last
//! seen, so forgetting the old ones costs nothing per event: kube-runtime's
//! recorder walks every series of the last six minutes on each event,
//! quadratic at ten thousand claims.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use volplane_core::control::{Event, EventType};

use crate::api::Seen;
use crate::resources::api_resource;

/// How long a series goes on after its last event.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// The most series remembered at once: past it, the longest quiet is
/// forgotten first (its next repeat starts a new event), so a burst of
/// events never grows the cache without bound.
const MOST_SERIES: usize = 16_384;

/// What makes a repeat: all but the note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    reference: (String, String, String, String),
}

/// A series: when its event was first made (its name is the object's and
/// this stamp, [`event_name`], so no name is kept: thousands of small
/// strings living minutes among short-lived allocations can keep pages of
/// the heap resident), how many so far, and when the last came.
#[derive(Debug)]
struct Series {
    stamp: i128,
    count: i32,
    last: Instant,
}

/// An event's name, as client-go makes it: the object's name and the
/// event's time in nanoseconds, in hex.
fn event_name(object: &str, stamp: i128) -> String {
    format!("{object}.{stamp:x}")
}

/// The series of the last [`SERIES_TTL`], and the order they were last
/// seen in (an entry is stale when its series was seen again since).
#[derive(Debug, Default)]
struct SeriesCache {
    /// By the key's hash: at ten thousand claims the keys' strings were
    /// most of the cache, and two keys of one hash (one in 2^64) only
    /// continue each other's series.
    by_key: HashMap<u64, Series>,
    order: VecDeque<(Instant, u64)>,
}

impl Key {
    fn digest(&self) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(self)
    }
}

impl SeriesCache {
    /// Forgets the series whose last event is older than the TTL, and the
    /// longest quiet beyond [`MOST_SERIES`].
    fn expire(&mut self, now: Instant) {
        while let Some((t, _)) = self.order.front() {
            let full = self.by_key.len() > MOST_SERIES || self.order.len() > 2 * MOST_SERIES;
            if !full && now.saturating_duration_since(*t) < SERIES_TTL {
                break;
            }
            let Some((t, key)) = self.order.pop_front() else {
                break;
            };
            if self.by_key.get(&key).is_some_and(|s| s.last == t) {
                self.by_key.remove(&key);
            }
        }
    }

    /// The event `key` repeats, counted (its first event's stamp and the
    /// new count), or `None` for a first one.
    fn repeat(&mut self, key: &Key, now: Instant) -> Option<(i128, i32)> {
        self.expire(now);
        let key = key.digest();
        let s = self.by_key.get_mut(&key)?;
        s.count += 1;
        s.last = now;
        self.order.push_back((now, key));
        Some((s.stamp, s.count))
    }

    /// A first event, created with the stamp `stamp`.
    fn started(&mut self, key: Key, stamp: i128, now: Instant) {
        self.expire(now);
        let key = key.digest();
        self.order.push_back((now, key));
        self.by_key.insert(
            key,
            Series {
                stamp,
                count: 1,
                last: now,
            },
        );
    }
}

/// Records the machines' events.
#[derive(Clone)]
pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<SeriesCache>>,
    seen: Seen,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported by `controller` (the reporting controller, e.g.
    /// `volplane-provisioner`) from `instance` (this replica).
    pub fn new(client: Client, controller: &str, instance: &str, seen: Seen) -> Events {
        Events {
            client,
            controller: controller.into(),
            instance: instance.into(),
            series: Arc::default(),
            seen,
        }
    }

    /// Records `event`; a failure is logged (events are best effort, as in
    /// client-go).
    pub async fn record(&self, event: Event) {
        match event.type_ {
            EventType::Normal => {
                tracing::info!(object = %event.object, reason = event.reason, "{}", event.message)
            }
            EventType::Warning => {
                tracing::warn!(object = %event.object, reason = event.reason, "{}", event.message)
            }
        }
        if let Err(e) = self.publish(&event).await {
            tracing::warn!(object = %event.object, reason = event.reason, "event not recorded: {e}");
        }
    }

    async fn publish(&self, event: &Event) -> Result<(), kube::Error> {
        let r = api_resource(event.object.kind);
        let uid = self.seen.get(&event.object).map(|o| o.meta().uid.clone());
        let namespace = event.object.namespace.to_string();
        let reference = ObjectReference {
            api_version: Some(r.api_version.clone()),
            kind: Some(r.kind.clone()),
            name: Some(event.object.name.to_string()),
            namespace: (!namespace.is_empty()).then(|| namespace.clone()),
            uid: uid.clone().filter(|u| !u.is_empty()),
            ..ObjectReference::default()
        };
        let key = Key {
            warning: event.type_ == EventType::Warning,
            reason: event.reason.clone(),
            reference: (
                r.kind,
                namespace.clone(),
                event.object.name.to_string(),
                uid.unwrap_or_default(),
            ),
        };
        let events: Api<KubeEvent> = Api::namespaced(
            self.client.clone(),
            if namespace.is_empty() {
                "default"
            } else {
                &namespace
            },
        );
        let now = Instant::now();
        let time = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let repeat = self.lock().repeat(&key, now);
        if let Some((stamp, count)) = repeat {
            let name = event_name(&event.object.name, stamp);
            let series = EventSeries {
                count,
                last_observed_time: time,
            };
            let patch = serde_json::json!({ "series": series });
            events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(());
        }
        let stamp = time.0.as_nanosecond();
        let name = event_name(&event.object.name, stamp);
        let e = KubeEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: reference.namespace.clone(),
                ..ObjectMeta::default()
            },
            event_time: Some(time),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.into()),
            reason: Some(event.reason.clone()),
            action: Some(event.reason.clone()),
            note: Some(event.message.clone()),
            regarding: Some(reference),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..KubeEvent::default()
        };
        events.create(&PostParams::default(), &e).await?;
        self.lock().started(key, stamp, now);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeriesCache> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use volplane_core::model::{Kind, ObjectKey};

    fn key(reason: &str) -> Key {
        Key {
            warning: false,
            reason: reason.into(),
            reference: (
                "PersistentVolumeClaim".into(),
                "default".into(),
                "c".into(),
                "u".into(),
            ),
        }
    }

    #[test]
    fn a_repeat_within_the_ttl_continues_the_series_and_an_old_one_is_forgotten() {
        let mut cache = SeriesCache::default();
        let t0 = Instant::now();
        assert_eq!(cache.repeat(&key("A"), t0), None);
        cache.started(key("A"), 1, t0);
        let t1 = t0 + Duration::from_secs(300);
        assert_eq!(cache.repeat(&key("A"), t1), Some((1, 2)));
        // Six minutes after the first, but not after the last: still on.
        let t2 = t0 + Duration::from_secs(400);
        assert_eq!(cache.repeat(&key("A"), t2), Some((1, 3)));
        assert_eq!(cache.repeat(&key("B"), t2), None);
        // Six minutes after the last: a new series.
        let t3 = t2 + SERIES_TTL;
        assert_eq!(cache.repeat(&key("A"), t3), None);
        assert!(cache.by_key.is_empty());
        assert!(cache.order.is_empty());
    }

    #[test]
    fn a_burst_of_events_is_remembered_up_to_a_bound() {
        let mut cache = SeriesCache::default();
        let now = Instant::now();
        for i in 0..MOST_SERIES + 100 {
            cache.started(key(&format!("R{i}")), i as i128, now);
            cache.repeat(&key(&format!("R{i}")), now);
        }
        assert!(cache.by_key.len() <= MOST_SERIES + 1);
        assert!(cache.order.len() <= 2 * MOST_SERIES + 2);
        // The newest is still a series; the oldest was forgotten.
        let last = format!("R{}", MOST_SERIES + 99);
        assert!(cache.repeat(&key(&last), now).is_some());
        assert_eq!(cache.repeat(&key("R0"), now), None);
    }

    /// Against the played API server: the first event is created, a repeat
    /// patches its series, another reason is an event of its own.
    #[tokio::test]
    async fn repeats_are_one_event_with_a_series() {
        let api = crate::fake::FakeApi::default();
        let events = Events::new(
            api.client(),
            "volplane-provisioner",
            "pod-0",
            Seen::default(),
        );
        let object = ObjectKey::new(Kind::PersistentVolumeClaim, "default", "data");
        let event = |reason: &str, note: &str| Event::normal(object.clone(), reason, note);
        events.record(event("Provisioning", "first")).await;
        events.record(event("Provisioning", "again")).await;
        events.record(event("ProvisioningSucceeded", "done")).await;
        let log = api.log();
        let writes: Vec<(&str, &serde_json::Value)> = log
            .iter()
            .filter(|l| l.path.contains("/events"))
            .map(|l| (l.method.as_str(), &l.body))
            .collect();
        assert_eq!(writes.len(), 3, "{writes:?}");
        assert_eq!(writes[0].0, "POST");
        assert_eq!(writes[0].1["reason"], "Provisioning");
        assert_eq!(writes[0].1["reportingController"], "volplane-provisioner");
        assert_eq!(writes[0].1["reportingInstance"], "pod-0");
        assert_eq!(writes[0].1["regarding"]["name"], "data");
        assert_eq!(writes[1].0, "PATCH");
        assert_eq!(writes[1].1["series"]["count"], 2);
        let first = writes[0].1["metadata"]["name"].as_str().unwrap();
        assert!(first.starts_with("data."), "{first}");
        let patched = log.iter().find(|l| l.method == "PATCH").unwrap();
        assert!(
            patched.path.ends_with(&format!("/events/{first}")),
            "the repeat patches the first event: {}",
            patched.path
        );
        assert_eq!(writes[2].0, "POST");
        assert_eq!(writes[2].1["reason"], "ProvisioningSucceeded");
    }
}
