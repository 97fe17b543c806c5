//! Informers against a played API server: list, then watch; after a 410
//! Gone the informer relists, and an object that went while no watch was
//! open is reported deleted.

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use volplane_core::control::Watch;
use volplane_core::model::Kind;
use volplane_kube::fake::FakeApi;
use volplane_kube::watch::{Feed, inform, retry_delay};

fn pv(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
           "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}})
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Feed>) -> Feed {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the informer said nothing within 10 s")
        .expect("the informer ended")
}

fn name(f: &Feed) -> String {
    match f {
        Feed::Watch(Watch::Applied(o)) => format!("applied {}", o.meta().name),
        Feed::Watch(Watch::Deleted(o)) => format!("deleted {}", o.meta().name),
        Feed::Listed(k) => format!("listed {}", k.as_str()),
    }
}

/// An informer of volumes on `api`, and what it feeds.
fn informer(api: &FakeApi) -> (tokio::task::JoinHandle<()>, mpsc::UnboundedReceiver<Feed>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(inform(
        std::sync::Arc::new(volplane_tokio::Tokio),
        api.client(),
        Kind::PersistentVolume,
        String::new(),
        volplane_kube::api::Seen::default(),
        move |f| {
            let _ = tx.send(f);
        },
    ));
    (task, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_410_reports_what_went_while_no_watch_was_open() {
    let api = FakeApi::default();
    api.put("/api/v1/persistentvolumes/a", pv("a"));
    api.put("/api/v1/persistentvolumes/b", pv("b"));
    let (task, mut rx) = informer(&api);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(name(&next(&mut rx).await));
    }
    assert_eq!(seen, ["applied a", "applied b", "listed PersistentVolume"]);
    // Live: a new volume arrives through the watch.
    api.put("/api/v1/persistentvolumes/c", pv("c"));
    assert_eq!(name(&next(&mut rx).await), "applied c");
    // b goes while watches are down, and the history is compacted: the
    // watch is answered 410 Gone, the informer relists.
    api.remove_silently("/api/v1/persistentvolumes/b");
    api.compact();
    let mut after = Vec::new();
    loop {
        let f = next(&mut rx).await;
        let done = matches!(f, Feed::Listed(_));
        after.push(name(&f));
        if done {
            break;
        }
    }
    assert_eq!(
        after,
        ["deleted b", "listed PersistentVolume"],
        "a and c unchanged: not repeated"
    );
    let relisted = api
        .log()
        .iter()
        .filter(|r| r.method == "GET" && !r.query.contains("watch=true"))
        .count();
    assert_eq!(relisted, 2, "listed once, relisted once after 410");
    task.abort();
}

/// More objects than one page (kube's informers ask for 500 at a time):
/// every one arrives once, through pages the played API server chained
/// with its continue token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_longer_than_a_page_arrives_whole() {
    let api = FakeApi::default();
    let names: Vec<String> = (0..1_201).map(|i| format!("pv-{i:04}")).collect();
    for n in &names {
        api.put(&format!("/api/v1/persistentvolumes/{n}"), pv(n));
    }
    let (task, mut rx) = informer(&api);
    let mut seen = Vec::new();
    loop {
        let f = next(&mut rx).await;
        if matches!(f, Feed::Listed(_)) {
            break;
        }
        seen.push(name(&f));
    }
    let expected: Vec<String> = names.iter().map(|n| format!("applied {n}")).collect();
    assert_eq!(seen, expected);
    let pages: Vec<String> = api
        .log()
        .iter()
        .filter(|r| r.method == "GET" && !r.query.contains("watch=true"))
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(pages.len(), 3, "500 + 500 + 201: {pages:?}");
    assert!(pages[1].contains("continue="), "{pages:?}");
    task.abort();
}

/// A list that keeps failing is retried less and less often, up to every
/// 30 s (kube's own backoff would start over at each attempt).
#[test]
fn retries_of_a_failing_list_back_off_to_30_s() {
    let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n).as_millis() as u64).collect();
    assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    assert_eq!(retry_delay(u32::MAX), Duration::from_secs(30));
}
