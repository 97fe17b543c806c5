//! [`Lifecycle`]: a volume's life as one pod after another uses it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use volplane_core::check::CallSecrets;

use super::steps::{Run, STEPS};
use super::{Csi, Error, Report};

/// A volume's life as one pod after another uses it: create, attach (when
/// the driver attaches), stage, publish to two pods, write through one and
/// read through the other, unpublish, unstage, detach, delete. Each step
/// is also sent twice, as a CO retrying after a timeout does; the second
/// must succeed too. A call answered UNAVAILABLE, ABORTED or
/// DEADLINE_EXCEEDED is tried again a while later, as a CO does.
///
/// Whatever happens, what the run made is put away before it returns: a
/// run that fails unpublishes, unstages, detaches and deletes what it had
/// got to (through the driver's own calls, answers ignored) and then
/// reports the first failure.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    kubelet: PathBuf,
    name: String,
    parameters: HashMap<String, String>,
    bytes: i64,
    node_id: Option<String>,
    secrets: CallSecrets,
    block: bool,
}

impl Lifecycle {
    /// A lifecycle with paths under `kubelet_dir` (the driver's).
    pub fn new(kubelet_dir: impl Into<PathBuf>) -> Lifecycle {
        Lifecycle {
            kubelet: kubelet_dir.into(),
            name: "pvc-volplane-testing".into(),
            parameters: HashMap::new(),
            bytes: 64 << 20,
            node_id: None,
            secrets: CallSecrets::default(),
            block: false,
        }
    }

    /// The StorageClass parameters CreateVolume gets.
    pub fn parameter(mut self, key: &str, value: &str) -> Self {
        self.parameters.insert(key.into(), value.into());
        self
    }

    /// The volume's name (CreateVolume.name).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// The volume's size (CreateVolume's required_bytes; 64 MiB by default).
    pub fn bytes(mut self, bytes: i64) -> Self {
        self.bytes = bytes;
        self
    }

    /// The secrets each call carries, as csi-sanity's secrets file gives
    /// them ([`secrets_file`](super::secrets_file), or
    /// [`CallSecrets::everywhere`]).
    pub fn secrets(mut self, secrets: CallSecrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// A raw block volume: published as a device file at each target, the
    /// data shared through the device itself.
    pub fn block(mut self) -> Self {
        self.block = true;
        self
    }

    /// Runs it against `csi`; the first step that fails ends it with what
    /// was asked and answered, after what was made is put away.
    pub async fn run(&self, csi: &Csi) -> Result<Report, Error> {
        let mut run = Run::start(self, csi).await?;
        for &step in STEPS {
            if let Err(e) = run.step(csi, step).await {
                run.put_away(csi).await;
                return Err(e);
            }
        }
        Ok(run.report)
    }

    /// Hostile node paths: with the volume created, attached and staged,
    /// NodePublish and NodeStage to paths outside the kubelet directory
    /// (outright, by `..`, through a symbolic link in it) and with a volume
    /// id that is a path are each refused — INVALID_ARGUMENT,
    /// FAILED_PRECONDITION or NOT_FOUND, never OK or INTERNAL — and nothing
    /// appears outside; then the volume goes as usual. The report's steps
    /// say how each was answered.
    pub async fn run_hostile(&self, csi: &Csi) -> Result<Report, Error> {
        super::hostile::run(self, csi).await
    }

    /// Runs it with the driver killed and started again between every two
    /// steps: `restart` does both (SIGKILL, as a crash would, then start;
    /// it may block), and the lifecycle reconnects to `endpoint`. What the
    /// driver answered before a kill must still hold after it.
    pub async fn run_restarting(
        &self,
        endpoint: &str,
        mut restart: impl FnMut(),
    ) -> Result<Report, Error> {
        let mut csi = Csi::connect(endpoint).await?;
        let mut run = Run::start(self, &csi).await?;
        for (i, &step) in STEPS.iter().enumerate() {
            if let Err(e) = run.step(&csi, step).await {
                run.put_away(&csi).await;
                return Err(e);
            }
            if i + 1 < STEPS.len() {
                restart();
                run.report.restarts += 1;
                csi = Csi::connect(endpoint).await?;
            }
        }
        Ok(run.report)
    }

    pub(crate) fn staging(&self, volume_id: &str) -> PathBuf {
        self.kubelet
            .join("plugins/kubernetes.io/csi/volplane-testing")
            .join(volume_id)
            .join("globalmount")
    }

    pub(crate) fn target(&self, pod: usize) -> PathBuf {
        self.kubelet
            .join(format!("pods/pod-{pod}/volumes/kubernetes.io~csi"))
            .join(&self.name)
            .join("mount")
    }

    pub(crate) fn kubelet(&self) -> &Path {
        &self.kubelet
    }

    pub(crate) fn volume_name(&self) -> &str {
        &self.name
    }

    pub(crate) fn parameters(&self) -> &HashMap<String, String> {
        &self.parameters
    }

    pub(crate) fn required_bytes(&self) -> i64 {
        self.bytes
    }

    pub(crate) fn node_id(&self) -> Option<&str> {
        self.node_id.as_deref()
    }

    pub(crate) fn is_block(&self) -> bool {
        self.block
    }

    /// The secrets the call `key` names carries, as the wire has them.
    pub(crate) fn secret(&self, key: &str) -> HashMap<String, String> {
        self.secrets.get(key).0.into_iter().collect()
    }
}
