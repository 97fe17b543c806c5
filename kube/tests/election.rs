//! Leader election against a played API server: one leader at a time; a
//! leader cut off from the API server stops acting before another takes
//! over; a leader that finishes hands the Lease over at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use volplane_core::lease::LeaseTimings;
use volplane_kube::election::{ElectionError, LeaseConfig, lead, lease_name};
use volplane_kube::fake::FakeApi;

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: "kube-system".into(),
        name: lease_name("csi.example.com"),
        identity: identity.into(),
        timings: LeaseTimings {
            lease_duration: 1_500,
            renew_deadline: 1_000,
            retry_period: 200,
        },
    }
}

/// Counts who is acting; panics if two are.
#[derive(Clone, Default)]
struct Acting(Arc<AtomicUsize>);

struct Turn(Arc<AtomicUsize>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Acting {
    /// Work that acts until dropped.
    async fn act(self, started: tokio::sync::oneshot::Sender<Instant>) {
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        assert_eq!(before, 0, "two replicas acting at once");
        let _turn = Turn(self.0.clone());
        let _ = started.send(Instant::now());
        futures::future::pending::<()>().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_acting_before_another_takes_over() {
    assert_eq!(
        lease_name("csi.Example.com/x"),
        "volplane-csi.example.com-x"
    );
    let api = FakeApi::default();
    let acting = Acting::default();
    let (a_started, a_acting) = tokio::sync::oneshot::channel();
    let a = tokio::spawn(lead(
        api.client_named("a"),
        config("a"),
        acting.clone().act(a_started),
    ));
    a_acting.await.expect("a leads");
    let (b_started, mut b_acting) = tokio::sync::oneshot::channel();
    let b = tokio::spawn(lead(
        api.client_named("b"),
        config("b"),
        acting.clone().act(b_started),
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(b_acting.try_recv().is_err(), "b waits while a renews");
    let lease = api
        .get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/volplane-csi.example.com")
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2);

    // a's requests go unanswered from now on.
    api.cut_off("a");
    let lost = a.await.unwrap();
    let a_stopped = Instant::now();
    assert!(matches!(lost, Err(ElectionError::Lost(_))), "{lost:?}");
    let b_start = tokio::time::timeout(Duration::from_secs(5), b_acting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        b_start > a_stopped,
        "b took over only after a stopped acting"
    );
    b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_finishes_hands_the_lease_over_at_once() {
    let api = FakeApi::default();
    let done = lead(api.client_named("a"), config("a"), async { 7 })
        .await
        .unwrap();
    assert_eq!(done, 7);
    let lease =
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/volplane-csi.example.com";
    assert_eq!(
        api.get(lease).unwrap()["spec"]["holderIdentity"],
        "",
        "a released the lease: nobody has to wait out its duration"
    );
    let (b_started, b_acting) = tokio::sync::oneshot::channel();
    let b = tokio::spawn(lead(
        api.client_named("b"),
        config("b"),
        Acting::default().act(b_started),
    ));
    tokio::time::timeout(Duration::from_secs(5), b_acting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(api.get(lease).unwrap()["spec"]["holderIdentity"], "b");
    b.abort();
}
