//! `volplane controller`'s roles (volplane-kube) against a played API
//! server and a real driver process: with the binder standing in for
//! kube-controller-manager, a claim is provisioned (CreateVolume → a PV with
//! upstream's fields → Bound), a VolumeAttachment is carried out
//! (ControllerPublish → status.attached), a resize reaches the PV
//! (ControllerExpandVolume), a VolumeAttributesClass change reaches the
//! driver (ControllerModifyVolume), and deleting the claim deletes the
//! volume.

mod common;

use std::time::{Duration, Instant};

use common::{Driver, NODE, Runtime};
use serde_json::{Value, json};
use volplane_kube::controller::{self, ControllerConfig, Flags, Switches};
use volplane_kube::fake::FakeApi;
use volplane_proto::client::CsiClient;

const DRIVER: &str = "volplane.csi.io";
const CLASS: &str = "/apis/storage.k8s.io/v1/storageclasses/fast";
const CLAIM: &str = "/api/v1/namespaces/default/persistentvolumeclaims/data";

fn seed(api: &FakeApi) {
    api.put(
        CLASS,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "fast"}, "provisioner": DRIVER,
               "reclaimPolicy": "Delete", "allowVolumeExpansion": true,
               "volumeBindingMode": "Immediate",
               "parameters": {
                   "csi.storage.k8s.io/provisioner-secret-name": "provisioner",
                   "csi.storage.k8s.io/provisioner-secret-namespace": "storage"}}),
    );
    // The provisioner reads it with a get (deploy/rbac.yaml grants just that).
    api.put(
        "/api/v1/namespaces/storage/secrets/provisioner",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "provisioner", "namespace": "storage"},
               "data": {"password": "czNjcjN0"}}),
    );
    api.put(
        &format!("/api/v1/nodes/{NODE}"),
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": NODE, "labels": {"topology.volplane.io/zone": "local"}},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    api.put(
        &format!("/apis/storage.k8s.io/v1/csinodes/{NODE}"),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": NODE},
               "spec": {"drivers": [{"name": DRIVER, "nodeID": NODE,
                                     "topologyKeys": ["topology.volplane.io/zone"]}]}}),
    );
    api.put(
        CLAIM,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "namespace": "default",
                            "annotations": {"example.com/keep": "me"}},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                        "resources": {"requests": {"storage": "64Mi"}}}}),
    );
}

/// Waits up to 30 s for `f` to find what it looks for in the server.
async fn eventually<T>(what: &str, api: &FakeApi, f: impl Fn(&FakeApi) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f(api) {
            return t;
        }
        if Instant::now() > deadline {
            let log: Vec<String> = api
                .log()
                .iter()
                .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
                .collect();
            let tail = log[log.len().saturating_sub(25)..].join("\n");
            panic!("{what}: not within 30 s; the last requests:\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The roles, with the binder standing in for kube-controller-manager's.
fn with_binder() -> ControllerConfig {
    ControllerConfig {
        flags: Flags {
            switches: Switches {
                binder: true,
                ..Switches::default()
            },
            ..Flags::default()
        },
        ..ControllerConfig::default()
    }
}

type Stop = tokio::sync::oneshot::Sender<()>;
type Running = tokio::task::JoinHandle<Result<(), controller::ControllerError>>;

/// `volplane controller`'s roles on tokio against `api` and the driver at
/// `endpoint`, until the sender is sent to.
async fn run_on_tokio(api: &FakeApi, endpoint: &str, config: ControllerConfig) -> (Stop, Running) {
    let ch = volplane_tokio::connect(endpoint).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = api.client();
    let run = tokio::spawn(controller::run(
        std::sync::Arc::new(volplane_tokio::Tokio),
        move |_: &str| client.clone(),
        CsiClient::new(ch, None),
        config,
        async move {
            let _ = stopped.await;
        },
    ));
    (stop, run)
}

fn bound_pv(api: &FakeApi) -> Option<(String, Value)> {
    let claim = api.get(CLAIM)?;
    if claim["status"]["phase"] != json!("Bound") {
        return None;
    }
    let name = claim["spec"]["volumeName"].as_str()?.to_string();
    let pv = api.get(&format!("/api/v1/persistentvolumes/{name}"))?;
    Some((name, pv))
}

/// The roles on smol (kube-rs's futures inside async-compat's tokio
/// context): a claim provisioned and Bound through the API, then deleted
/// with its volume.
#[test]
fn a_claim_is_provisioned_and_deleted_with_the_roles_on_smol() {
    use std::sync::Arc;
    use volplane_kube::runtime::{TokioContext, with_tokio};
    require_root!();
    let d = Driver::start(Runtime::Smol);
    let api = FakeApi::default();
    seed(&api);
    let executor = volplane_smol::Runtime::new(2).expect("smol's threads start");
    let rt: Arc<dyn volplane_service::drive::Runtime> = Arc::new(TokioContext(Arc::new(executor)));
    smol::block_on(with_tokio(async {
        let ch = volplane_smol::connect(&d.endpoint).await.unwrap();
        let csi = CsiClient::new(ch, Some(http::Uri::from_static("http://localhost")));
        let config = with_binder();
        let (stop, stopped) = futures::channel::oneshot::channel::<()>();
        let (done, ended) = futures::channel::oneshot::channel();
        let client = api.client();
        let run = controller::run(
            rt.clone(),
            move |_: &str| client.clone(),
            csi,
            config,
            async move {
                let _ = stopped.await;
            },
        );
        rt.spawn(Box::pin(async move {
            let _ = done.send(run.await.map_err(|e| e.to_string()));
        }));
        let (pv_name, _) = eventually("the claim Bound to a provisioned PV", &api, bound_pv).await;
        api.delete_as_user(CLAIM).expect("the claim exists");
        let pv_path = format!("/api/v1/persistentvolumes/{pv_name}");
        eventually("the PV deleted", &api, |a| {
            a.get(&pv_path).is_none().then_some(())
        })
        .await;
        let _ = stop.send(());
        ended.await.unwrap().unwrap();
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_provisioned_attached_resized_and_deleted_through_the_api() {
    require_root!();
    let d = Driver::start_with(Runtime::Tokio, &["--mutable-parameter=tier"]);
    let api = FakeApi::default();
    seed(&api);
    let config = with_binder();
    let metrics = config.metrics.clone();
    let (stop, run) = run_on_tokio(&api, &d.endpoint, config).await;

    let (pv_name, pv) = eventually("the claim Bound to a provisioned PV", &api, bound_pv).await;
    assert_eq!(pv["spec"]["csi"]["driver"], json!(DRIVER));
    assert!(
        pv["spec"]["csi"]["volumeHandle"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    );
    assert_eq!(pv["spec"]["storageClassName"], json!("fast"));
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], json!("Delete"));
    assert_eq!(pv["spec"]["claimRef"]["name"], json!("data"));
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
        json!(DRIVER)
    );
    assert_eq!(
        pv["metadata"]["annotations"]["volume.kubernetes.io/provisioner-deletion-secret-namespace"],
        json!("storage")
    );
    let claim = api.get(CLAIM).unwrap();
    assert_eq!(
        claim["metadata"]["annotations"]["example.com/keep"],
        json!("me"),
        "a field volplane does not own survives"
    );
    let writes: Vec<_> = api
        .log()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect();
    assert!(
        !writes.is_empty()
            && writes
                .iter()
                .all(|r| r.content_type == "application/merge-patch+json")
    );
    assert!(
        writes
            .iter()
            .all(|r| r.body["metadata"]["resourceVersion"].is_string()),
        "every update is preconditioned"
    );

    // kube-controller-manager's attach/detach controller asks for an attachment.
    let va = "/apis/storage.k8s.io/v1/volumeattachments/csi-test";
    api.put(
        va,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
               "metadata": {"name": "csi-test"},
               "spec": {"attacher": DRIVER, "nodeName": NODE,
                        "source": {"persistentVolumeName": pv_name}}}),
    );
    eventually("the attachment carried out", &api, |a| {
        (a.get(va)?["status"]["attached"] == json!(true)).then_some(())
    })
    .await;

    // The user grows the claim.
    let mut grown = api.get(CLAIM).unwrap();
    grown["spec"]["resources"]["requests"]["storage"] = json!("128Mi");
    api.put(CLAIM, grown);
    let pv_path = format!("/api/v1/persistentvolumes/{pv_name}");
    eventually("the PV grown", &api, |a| {
        (a.get(&pv_path)?["spec"]["capacity"]["storage"] == json!("128Mi")).then_some(())
    })
    .await;

    // The user names a VolumeAttributesClass: the resizer modifies the
    // volume (ControllerModifyVolume), then the PV and the claim say so.
    api.put(
        "/apis/storage.k8s.io/v1/volumeattributesclasses/gold",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
               "metadata": {"name": "gold"}, "driverName": DRIVER,
               "parameters": {"tier": "gold"}}),
    );
    let mut modified = api.get(CLAIM).unwrap();
    modified["spec"]["volumeAttributesClassName"] = json!("gold");
    api.put(CLAIM, modified);
    eventually("the claim's volume modified to gold", &api, |a| {
        let status = &a.get(CLAIM)?["status"];
        (status["currentVolumeAttributesClassName"] == json!("gold")
            && status.get("modifyVolumeStatus").is_none())
        .then_some(())
    })
    .await;
    let pv = api.get(&pv_path).unwrap();
    assert_eq!(pv["spec"]["volumeAttributesClassName"], json!("gold"));
    let ch = volplane_tokio::connect(&d.endpoint).await.unwrap();
    let volume = CsiClient::new(ch, None)
        .controller
        .controller_get_volume(volplane_proto::csi::ControllerGetVolumeRequest {
            volume_id: pv["spec"]["csi"]["volumeHandle"].as_str().unwrap().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        volume.volume.unwrap().volume_context["tier"],
        "gold",
        "the class's parameters reached the driver"
    );

    // The attachment goes (kube-controller-manager deletes it): the
    // attacher unpublishes and lets it go.
    api.delete_as_user(va).expect("the attachment exists");
    eventually("the attachment released", &api, |a| {
        a.get(va).is_none().then_some(())
    })
    .await;
    // The claim goes: the binder releases the PV and the provisioner deletes
    // the volume, then the PV.
    api.delete_as_user(CLAIM).expect("the claim exists");
    eventually("the PV deleted", &api, |a| {
        a.get(&pv_path).is_none().then_some(())
    })
    .await;
    let _ = stop.send(());
    run.await.unwrap().unwrap();
    let ch = volplane_tokio::connect(&d.endpoint).await.unwrap();
    let left = CsiClient::new(ch, None)
        .controller
        .list_volumes(volplane_proto::csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        left.entries.is_empty(),
        "DeleteVolume reached the driver: {left:?}"
    );
    // --http-endpoint: the calls counted as csi-lib-utils does, and
    // /healthz from the driver's Probe.
    let text = metrics.encode();
    assert!(
        text.contains(r#"method_name="/csi.v1.Controller/CreateVolume",grpc_status_code="OK"} 1"#),
        "{text}"
    );
    // client-go's workqueue metrics under the sidecars' queue names, and
    // external-provisioner's provision counter.
    for family in [
        r#"workqueue_adds_total{name="claims"}"#,
        r#"workqueue_adds_total{name="csi-attacher-va"}"#,
        r#"workqueue_work_duration_seconds_count{name="claims"}"#,
        "controller_persistentvolumeclaim_provision_total{class=",
    ] {
        assert!(text.contains(family), "no {family} in:\n{text}");
    }
    let listener = volplane_tokio::bind_http("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let probe = volplane_cli::controller::health_probe(&d.endpoint, Duration::from_secs(5));
    tokio::spawn(volplane_tokio::serve_http(
        listener,
        metrics,
        probe,
        std::future::pending(),
    ));
    let healthz = common::http_get(&address, "/healthz").await.unwrap();
    assert!(
        healthz.starts_with("HTTP/1.1 200") && healthz.ends_with("ok\n"),
        "{healthz}"
    );
    let served = common::http_get(&address, "/metrics").await.unwrap();
    assert!(
        served.starts_with("HTTP/1.1 200")
            && served.contains("csi_sidecar_operations_seconds_bucket"),
        "{served}"
    );
    // deploy/rbac.yaml grants every request the roles made.
    let granted = granted();
    let missing: std::collections::BTreeSet<String> = api
        .log()
        .iter()
        .map(|r| rbac_of(&r.method, &r.path, &r.query))
        .filter(|p| !granted.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "deploy/rbac.yaml does not grant {missing:?}"
    );
}

/// `verb group/resource` of a request the controller made, as RBAC names it.
fn rbac_of(method: &str, path: &str, query: &str) -> String {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, mut rest) = if segs[0] == "api" {
        ("", &segs[2..])
    } else {
        (segs[1], &segs[3..])
    };
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        rest = &rest[2..];
    }
    let resource = match rest {
        [r, _, sub] => format!("{r}/{sub}"),
        [r, ..] => r.to_string(),
        [] => String::new(),
    };
    let verb = match (method, rest.len()) {
        ("GET", 1) if query.contains("watch=true") => "watch",
        ("GET", 1) => "list",
        ("GET", _) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        _ => "?",
    };
    format!("{verb} {group}/{resource}")
}

/// Every `verb group/resource` deploy/rbac.yaml grants.
fn granted() -> std::collections::BTreeSet<String> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(include_str!("../../deploy/rbac.yaml")).unwrap();
    let mut out = std::collections::BTreeSet::new();
    for d in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        for rule in d["rules"].as_array().unwrap() {
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        out.insert(format!(
                            "{} {}/{}",
                            v.as_str().unwrap(),
                            g.as_str().unwrap(),
                            r.as_str().unwrap()
                        ));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn rbac_of_names_requests_as_rbac_does() {
    assert_eq!(
        rbac_of(
            "PATCH",
            "/api/v1/namespaces/default/persistentvolumeclaims/data/status",
            ""
        ),
        "patch /persistentvolumeclaims/status"
    );
    assert_eq!(
        rbac_of(
            "GET",
            "/apis/storage.k8s.io/v1/volumeattachments",
            "watch=true"
        ),
        "watch storage.k8s.io/volumeattachments"
    );
    assert_eq!(
        rbac_of(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
            ""
        ),
        "create events.k8s.io/events"
    );
}

/// The binder, with a panic planted in `what` (the role when its caches
/// sync, or an informer), as a bug would be.
fn planted_panic(what: &'static str) -> ControllerConfig {
    ControllerConfig {
        panic_in: Some(what),
        ..with_binder()
    }
}

/// Where a panic is planted, and what the controller must end with (a
/// controller that went on would never end: the test's stop never comes).
const PLANTED: [(&str, &str); 2] = [
    ("binder", "role binder panicked"),
    (
        "PersistentVolume informer",
        "the PersistentVolume informer panicked",
    ),
];

fn says_it_panicked(ended: Result<(), String>, said: &str) {
    let why = ended.expect_err("the controller went on without what panicked");
    assert!(why.contains(said) && why.contains("started again"), "{why}");
}

/// A panicking role or informer ends the controller (its pod restarts)
/// instead of dying alone while the process holds its Lease and looks
/// healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_or_informer_that_panics_stops_the_controller_on_tokio() {
    require_root!();
    let d = Driver::start(Runtime::Tokio);
    let api = FakeApi::default();
    seed(&api);
    for (planted, said) in PLANTED {
        let ch = volplane_tokio::connect(&d.endpoint).await.unwrap();
        let client = api.client();
        let ended = controller::run(
            std::sync::Arc::new(volplane_tokio::Tokio),
            move |_: &str| client.clone(),
            CsiClient::new(ch, None),
            planted_panic(planted),
            std::future::pending(),
        )
        .await;
        says_it_panicked(ended.map_err(|e| e.to_string()), said);
    }
}

#[test]
fn a_role_or_informer_that_panics_stops_the_controller_on_smol() {
    use std::sync::Arc;
    use volplane_kube::runtime::{TokioContext, with_tokio};
    require_root!();
    let d = Driver::start(Runtime::Smol);
    let api = FakeApi::default();
    seed(&api);
    let executor = volplane_smol::Runtime::new(2).expect("smol's threads start");
    let rt: Arc<dyn volplane_service::drive::Runtime> = Arc::new(TokioContext(Arc::new(executor)));
    smol::block_on(with_tokio(async {
        for (planted, said) in PLANTED {
            let ch = volplane_smol::connect(&d.endpoint).await.unwrap();
            let csi = CsiClient::new(ch, Some(http::Uri::from_static("http://localhost")));
            let client = api.client();
            let ended = controller::run(
                rt.clone(),
                move |_: &str| client.clone(),
                csi,
                planted_panic(planted),
                std::future::pending(),
            )
            .await;
            says_it_panicked(ended.map_err(|e| e.to_string()), said);
        }
    }));
}

/// A role polls its machine for no more calls than its rate limit and
/// workers can take (`calls_ahead`): the rest stays undecided in the
/// machine. With a burst of 1 and one worker (8 calls ahead at most) and
/// 60 claims, every claim is still provisioned, Bound and deleted with
/// its volume — a role held back is drained again as its calls complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_claims_go_through_a_role_that_holds_few_calls_ahead() {
    require_root!();
    let d = Driver::start(Runtime::Tokio);
    let api = FakeApi::default();
    seed(&api);
    let claims: Vec<String> = (0..60)
        .map(|i| format!("/api/v1/namespaces/default/persistentvolumeclaims/many-{i:02}"))
        .collect();
    for (i, path) in claims.iter().enumerate() {
        api.put(
            path,
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": format!("many-{i:02}"), "namespace": "default"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                            "resources": {"requests": {"storage": "1Mi"}}}}),
        );
    }
    assert_eq!(controller::calls_ahead(1, 1), 8);
    let config = ControllerConfig {
        kube_api: (1_000.0, 1),
        worker_threads: 1,
        ..with_binder()
    };
    let (stop, run) = run_on_tokio(&api, &d.endpoint, config).await;
    let volume_of = |a: &FakeApi, path: &str| {
        let claim = a.get(path)?;
        (claim["status"]["phase"] == json!("Bound"))
            .then(|| claim["spec"]["volumeName"].as_str().map(str::to_string))?
    };
    let volumes = eventually("every claim Bound", &api, |a| {
        claims
            .iter()
            .map(|c| volume_of(a, c))
            .collect::<Option<Vec<_>>>()
    })
    .await;
    assert_eq!(
        volumes
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        claims.len(),
        "one volume per claim"
    );
    for c in &claims {
        api.delete_as_user(c).expect("the claim exists");
    }
    eventually("every PV deleted", &api, |a| {
        volumes
            .iter()
            .all(|v| a.get(&format!("/api/v1/persistentvolumes/{v}")).is_none())
            .then_some(())
    })
    .await;
    let _ = stop.send(());
    run.await.unwrap().unwrap();
}
