//! A real control plane on loopback for the tests that have one: etcd and
//! kube-apiserver (and, for the benchmarks, kube-controller-manager) in a
//! temporary directory, their logs shown when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

/// A user with no rights but those RBAC gives it ([`Cluster::limited_kubeconfig`]).
pub const LIMITED_USER: &str = "volplane-limited";
const LIMITED_TOKEN: &str = "volplane-test-limited-token";

/// A TCP port free on loopback now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// etcd and kube-apiserver on loopback, in a temporary directory.
pub struct Cluster {
    /// Where its files and logs are.
    pub dir: tempfile::TempDir,
    children: Vec<Child>,
    /// An admin's kubeconfig.
    pub kubeconfig: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A failure shows what each process said last.
        if std::thread::panicking()
            && let Ok(entries) = std::fs::read_dir(self.dir.path())
        {
            for e in entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let tail: Vec<&str> = text
                    .lines()
                    .rev()
                    .take(150)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                eprintln!("==> {} <==\n{}", e.path().display(), tail.join("\n"));
            }
        }
    }
}

impl Cluster {
    /// etcd (VOLPLANE_TEST_ETCD or PATH) and `apiserver`.
    pub fn start(apiserver: &Path) -> Cluster {
        Cluster::start_with(apiserver, tempfile::tempdir().unwrap(), &[])
    }

    /// As [`Cluster::start`], in `dir`, the API server given `extra`
    /// arguments too (an audit log, say).
    pub fn start_with(apiserver: &Path, dir: tempfile::TempDir, extra: &[String]) -> Cluster {
        let d = dir.path();
        let etcd = std::env::var("VOLPLANE_TEST_ETCD").unwrap_or_else(|_| "etcd".into());
        let (client, peer, secure) = (free_port(), free_port(), free_port());
        let log = |name: &str| std::fs::File::create(d.join(name)).unwrap();
        let etcd = Command::new(etcd)
            .args(["--data-dir", &d.join("etcd").display().to_string()])
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{client}"),
            ])
            .args([
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{client}"),
            ])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .stdout(Stdio::null())
            .stderr(log("etcd.log"))
            .spawn()
            .expect("etcd (VOLPLANE_TEST_ETCD or PATH)");
        let key = d.join("sa.key");
        let made = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(made.success(), "openssl genrsa");
        std::fs::write(
            d.join("tokens.csv"),
            format!("volplane-test-token,admin,admin-uid,system:masters\n{LIMITED_TOKEN},{LIMITED_USER},limited-uid\n"),
        )
        .unwrap();
        let apiserver = Command::new(apiserver)
            .args(["--etcd-servers", &format!("http://127.0.0.1:{client}")])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--secure-port", &secure.to_string()])
            .args(["--cert-dir", &d.join("certs").display().to_string()])
            .args([
                "--token-auth-file",
                &d.join("tokens.csv").display().to_string(),
            ])
            .args(["--authorization-mode", "RBAC"])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args(["--service-account-key-file", &key.display().to_string()])
            .args([
                "--service-account-signing-key-file",
                &key.display().to_string(),
            ])
            .args(["--service-cluster-ip-range", "10.96.0.0/24"])
            // As every cluster that runs CSI node plugins.
            .arg("--allow-privileged=true")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log("kube-apiserver.log"))
            .spawn()
            .expect("kube-apiserver");
        let server = format!("https://127.0.0.1:{secure}");
        let write_kubeconfig =
            |file: &str, token: &str| super::process::kubeconfig(d, file, &server, token);
        let kubeconfig = write_kubeconfig("kubeconfig", "volplane-test-token");
        write_kubeconfig("kubeconfig-limited", LIMITED_TOKEN);
        Cluster {
            dir,
            children: vec![etcd, apiserver],
            kubeconfig,
        }
    }

    /// An admin's client, once the API server answers.
    pub async fn client(&self) -> kube::Client {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(c) = volplane_cli::controller::kube_client(Some(&self.kubeconfig)).await
                && Api::<Namespace>::all(c.clone())
                    .get("default")
                    .await
                    .is_ok()
            {
                return c;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.path().join("kube-apiserver.log"))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                panic!(
                    "the API server did not come up within 90 s:\n{}",
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `volplane controller` against this cluster, as `pod`, with the
    /// kube-controller-manager stand-ins (binder, protection controllers).
    pub fn controller(&self, csi: &str, pod: &str, extra: &[&str]) -> Child {
        let mut args = vec![
            "--binder",
            "--pvc-protection",
            "--pv-protection",
            "--resync-period",
            "30s",
        ];
        args.extend_from_slice(extra);
        self.sidecars(csi, pod, &args)
    }

    /// `volplane controller` against this cluster, as `pod`, with the
    /// sidecars' roles only (another driver's, beside a [`Cluster::controller`]).
    pub fn sidecars(&self, csi: &str, pod: &str, extra: &[&str]) -> Child {
        self.sidecars_as(&self.kubeconfig, csi, pod, extra)
    }

    /// As [`Cluster::sidecars`], as the user of `kubeconfig`.
    pub fn sidecars_as(&self, kubeconfig: &Path, csi: &str, pod: &str, extra: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_volplane-under-test"))
            .args(["controller", "--csi-address", csi, "--kubeconfig"])
            .arg(kubeconfig)
            .args(extra)
            .env("POD_NAME", pod)
            // Where --enable-capacity keeps its objects.
            .env("NAMESPACE", "default")
            // The node --node-deployment provisions for.
            .env("NODE_NAME", super::NODE)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join(format!("{pod}.log"))).unwrap())
            .spawn()
            .unwrap()
    }

    /// A kubeconfig of [`LIMITED_USER`], who may do only what RBAC grants.
    pub fn limited_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig-limited")
    }

    /// A directory of this cluster's, for what a test runs beside it.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// The CPU time (user + system, in clock ticks) process `pid` has used.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// A ReadWriteOnce claim `name` in `default` of class `class` asking for `size`.
pub fn claim(
    name: &str,
    class: &str,
    size: &str,
) -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": size}}}
    }))
    .unwrap()
}

/// How many of `api`'s claims are Bound.
pub async fn bound_claims(api: &Api<k8s_openapi::api::core::v1::PersistentVolumeClaim>) -> usize {
    let list = api.list(&Default::default()).await.unwrap().items;
    list.iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .count()
}

/// How many PVs there are.
pub async fn volumes(client: &kube::Client) -> usize {
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    pvs.list(&Default::default()).await.unwrap().items.len()
}

/// Polls `count` every 250 ms until it reaches `goal` or `limit` passes;
/// returns how long it took and what it last counted.
pub async fn wait_for<F: std::future::Future<Output = usize>>(
    goal: usize,
    limit: Duration,
    count: impl Fn() -> F,
) -> (Duration, usize) {
    let start = Instant::now();
    loop {
        let n = count().await;
        if n == goal || start.elapsed() > limit {
            return (start.elapsed(), n);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates the object `value` describes, of the cluster-scoped kind `K`.
pub async fn create<K>(client: &kube::Client, value: serde_json::Value) -> K
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(value).unwrap();
    Api::<K>::all(client.clone())
        .create(&Default::default(), &object)
        .await
        .unwrap()
}

/// The number in the environment variable `name`, else `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The driver `volplane serve` is.
pub const DRIVER: &str = "volplane.csi.io";
/// The topology key `volplane serve` reports its zone under.
pub const ZONE_KEY: &str = "topology.volplane.io/zone";

/// Waits up to 60 s for `f`.
pub async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    f: impl Fn() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: not within 60 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The volume claim `name` is bound to, once it is Bound.
pub async fn bound(
    api: &Api<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    name: &str,
) -> Option<String> {
    let c = api.get(name).await.ok()?;
    (c.status?.phase.as_deref() == Some("Bound")).then(|| c.spec?.volume_name)?
}

/// What every test on a real API server starts from: the StorageClass
/// `volplane` (Immediate, expandable, dir volumes) and the node `NODE`
/// registered in `volplane serve`'s zone.
pub async fn seed(client: &kube::Client) {
    use k8s_openapi::api::storage::v1::StorageClass;
    create::<StorageClass>(
        client,
        serde_json::json!({
            "metadata": {"name": "volplane"}, "provisioner": DRIVER, "reclaimPolicy": "Delete",
            "allowVolumeExpansion": true, "volumeBindingMode": "Immediate",
            "parameters": {"kind": "dir"}
        }),
    )
    .await;
    register_node(client, super::NODE, "local").await;
}

/// Node `name` as node-driver-registrar leaves it: labelled with its
/// topology segment (`zone`), the key listed in its CSINode entry.
pub async fn register_node(client: &kube::Client, name: &str, zone: &str) {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::storage::v1::CSINode;
    create::<Node>(
        client,
        serde_json::json!({"metadata": {"name": name, "labels": {ZONE_KEY: zone}}}),
    )
    .await;
    create::<CSINode>(
        client,
        serde_json::json!({
            "metadata": {"name": name},
            "spec": {"drivers": [{"name": DRIVER, "nodeID": name, "topologyKeys": [ZONE_KEY]}]}
        }),
    )
    .await;
}

/// The note of the first event with `reason` about the object `name` in
/// `default`, waiting up to 60 s for one.
pub async fn event_note(client: &kube::Client, reason: &str, name: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    until(&format!("a {reason} event about {name}"), || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .map(|e| e.note.unwrap_or_default())
    })
    .await
}
