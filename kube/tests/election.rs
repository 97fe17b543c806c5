//! Leader election against a played API server, on tokio and on smol: one
//! leader at a time; a leader cut off from the API server stops acting
//! before another takes over; a leader that finishes hands the Lease over
//! at once; a replica waiting for the Lease stops at once on shutdown,
//! whatever the API server does.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::channel::oneshot;
use volplane_core::lease::LeaseTimings;
use volplane_kube::election::{ElectionError, LeaseConfig, lead, lease_name};
use volplane_kube::fake::FakeApi;
use volplane_kube::runtime::{TokioContext, with_tokio};
use volplane_service::drive::Runtime;

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
        metrics: volplane_service::metrics::Metrics::new(),
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
    async fn act(self, started: oneshot::Sender<Instant>) {
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        assert_eq!(before, 0, "two replicas acting at once");
        let _turn = Turn(self.0.clone());
        let _ = started.send(Instant::now());
        futures::future::pending::<()>().await
    }
}

/// Runs `task` on `rt`; its output comes back on the receiver, and
/// dropping the handle stops it.
fn spawn<T: Send + 'static>(
    rt: &Arc<dyn Runtime>,
    task: impl Future<Output = T> + Send + 'static,
) -> (oneshot::Receiver<T>, futures::future::AbortHandle) {
    let (tx, rx) = oneshot::channel();
    let (task, abort) = futures::future::abortable(task);
    rt.spawn(Box::pin(task.map(move |out| {
        if let Ok(out) = out {
            let _ = tx.send(out);
        }
    })));
    (rx, abort)
}

/// Candidate `name` on `rt`, acting as `acting` once it leads, until
/// `stop`: when it started acting, its outcome, and its abort handle.
#[allow(clippy::type_complexity)]
fn candidate(
    rt: &Arc<dyn Runtime>,
    api: &FakeApi,
    name: &str,
    acting: Acting,
    stop: impl Future<Output = ()> + Send + 'static,
) -> (
    oneshot::Receiver<Instant>,
    oneshot::Receiver<Result<Option<()>, ElectionError>>,
    futures::future::AbortHandle,
) {
    let (started, acts) = oneshot::channel();
    let election = lead(
        rt.clone(),
        api.client_named(name),
        config(name),
        acting.act(started),
        stop,
    );
    let (outcome, abort) = spawn(rt, election);
    (acts, outcome, abort)
}

/// `future` unless `limit` passes first.
async fn within<T>(rt: &Arc<dyn Runtime>, limit: Duration, future: impl Future<Output = T>) -> T {
    volplane_service::drive::within(&**rt, limit, future)
        .await
        .expect("within the time limit")
}

async fn cut_off_leader(rt: Arc<dyn Runtime>) {
    assert_eq!(
        lease_name("csi.Example.com/x"),
        "volplane-csi.example.com-x"
    );
    let api = FakeApi::default();
    let acting = Acting::default();
    let (a_acting, a, _a) = candidate(&rt, &api, "a", acting.clone(), std::future::pending());
    a_acting.await.expect("a leads");
    let (mut b_acting, _b, b) = candidate(&rt, &api, "b", acting.clone(), std::future::pending());
    rt.sleep(Duration::from_secs(3)).await;
    assert!(
        matches!(b_acting.try_recv(), Ok(None)),
        "b waits while a renews"
    );
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
    let b_start = within(&rt, Duration::from_secs(5), b_acting).await.unwrap();
    assert!(
        b_start > a_stopped,
        "b took over only after a stopped acting"
    );
    b.abort();
}

async fn finished_leader(rt: Arc<dyn Runtime>) {
    let api = FakeApi::default();
    let done = lead(
        rt.clone(),
        api.client_named("a"),
        config("a"),
        async { 7 },
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(done, Some(7));
    let lease =
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/volplane-csi.example.com";
    assert_eq!(
        api.get(lease).unwrap()["spec"]["holderIdentity"],
        "",
        "a released the lease: nobody has to wait out its duration"
    );
    let (b_acting, _b, b) = candidate(&rt, &api, "b", Acting::default(), std::future::pending());
    within(&rt, Duration::from_secs(5), b_acting).await.unwrap();
    assert_eq!(api.get(lease).unwrap()["spec"]["holderIdentity"], "b");
    b.abort();
}

/// A replica waiting for the Lease stops at once on shutdown, even when
/// the API server has stopped answering it.
async fn waiting_replica_stops(rt: Arc<dyn Runtime>) {
    let api = FakeApi::default();
    let (a_acting, _a, a) = candidate(&rt, &api, "a", Acting::default(), std::future::pending());
    a_acting.await.expect("a leads");
    let (shutdown, stop) = oneshot::channel::<()>();
    let (mut b_acting, b, _b) = candidate(&rt, &api, "b", Acting::default(), stop.map(|_| ()));
    rt.sleep(Duration::from_millis(500)).await;
    // b's requests go unanswered from now on, as with an API server down.
    api.cut_off("b");
    rt.sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    shutdown.send(()).unwrap();
    let ended = within(&rt, Duration::from_secs(2), b).await.unwrap();
    assert!(matches!(ended, Ok(None)), "{ended:?}");
    // Under the renew deadline (1 s): the election did not wait one out
    // (300 ms is typical; a loaded CI host gets slack).
    assert!(
        asked.elapsed() < Duration::from_millis(800),
        "stopped in {:?}",
        asked.elapsed()
    );
    assert!(!matches!(b_acting.try_recv(), Ok(Some(_))), "b never acted");
    a.abort();
}

fn tokio_rt() -> Arc<dyn Runtime> {
    Arc::new(volplane_tokio::Tokio)
}

/// smol's executor, with kube-rs's futures inside a tokio context.
fn on_smol<F: Future<Output = ()>>(case: impl FnOnce(Arc<dyn Runtime>) -> F) {
    let executor = volplane_smol::Runtime::new(2).expect("smol's threads start");
    let rt: Arc<dyn Runtime> = Arc::new(TokioContext(Arc::new(executor)));
    smol::block_on(with_tokio(case(rt)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_acting_before_another_takes_over_on_tokio() {
    cut_off_leader(tokio_rt()).await;
}

#[test]
fn a_cut_off_leader_stops_acting_before_another_takes_over_on_smol() {
    on_smol(cut_off_leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_finishes_hands_the_lease_over_at_once_on_tokio() {
    finished_leader(tokio_rt()).await;
}

#[test]
fn a_leader_that_finishes_hands_the_lease_over_at_once_on_smol() {
    on_smol(finished_leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waiting_for_the_lease_stops_at_once_on_tokio() {
    waiting_replica_stops(tokio_rt()).await;
}

#[test]
fn a_replica_waiting_for_the_lease_stops_at_once_on_smol() {
    on_smol(waiting_replica_stops);
}
