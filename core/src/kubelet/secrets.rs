//! The Secrets a node call gets, as the kubelet's CSI plugin reads them:
//! NodeStageVolume the PV's `nodeStageSecretRef`, NodePublishVolume its
//! `nodePublishSecretRef`, NodeExpandVolume its `nodeExpandSecretRef`. Each
//! is read with a `get` right before its call, handed to that call alone
//! and dropped with it (a retry reads it again, so a rotated Secret is
//! used). A Secret that cannot be read fails the mount or the expansion
//! with a FailedMount warning saying which, and is retried with backoff.

use super::*;
use crate::control::secrets;
use crate::driver;
use crate::model::storage::CsiSource;

/// Which node call a Secret is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeSecret {
    /// NodeStageVolume.
    Stage,
    /// NodePublishVolume.
    Publish,
    /// NodeExpandVolume.
    Expand,
}

impl NodeSecret {
    /// The Secret the PV names for this call, if any.
    fn of(self, csi: &CsiSource) -> Option<&SecretReference> {
        match self {
            NodeSecret::Stage => csi.node_stage_secret_ref.as_ref(),
            NodeSecret::Publish => csi.node_publish_secret_ref.as_ref(),
            NodeSecret::Expand => csi.node_expand_secret_ref.as_ref(),
        }
    }

    /// The PV field that names it, in messages.
    fn field(self) -> &'static str {
        match self {
            NodeSecret::Stage => "nodeStageSecretRef",
            NodeSecret::Publish => "nodePublishSecretRef",
            NodeSecret::Expand => "nodeExpandSecretRef",
        }
    }

    /// The field as the kubelet's own messages spell it.
    fn upstream_field(self) -> &'static str {
        match self {
            NodeSecret::Stage => "NodeStageSecretRef",
            NodeSecret::Publish => "NodePublishSecretRef",
            NodeSecret::Expand => "NodeExpandSecretRef",
        }
    }

    /// The operation that fails without it, in the FailedMount warning.
    fn operation(self) -> &'static str {
        match self {
            NodeSecret::Stage => "MountVolume.MountDevice",
            NodeSecret::Publish => "MountVolume.SetUp",
            NodeSecret::Expand => "MountVolume.NodeExpandVolume",
        }
    }
}

impl KubeletReconciler {
    /// The secrets the PV `pv`'s `purpose` call gets: `Some` when known
    /// (empty when the PV names no Secret), `None` while the read is under
    /// way (the volume is busy until it answers).
    pub(super) fn node_secrets(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &str,
        csi: &CsiSource,
        purpose: NodeSecret,
    ) -> Option<driver::Secrets> {
        let Some(secret) = purpose.of(csi) else {
            return Some(driver::Secrets::default());
        };
        if let Err(why) = secrets::pv_ref(pv, purpose.field(), secret) {
            self.failed_mount_because(cx, pv, purpose.operation(), &why.to_string());
            return None;
        }
        if let Some(data) = self.credentials.remove(&(pv.to_string(), purpose)) {
            return Some(data);
        }
        let call = Call::GetSecret {
            pv: pv.to_string(),
            secret: secret.clone(),
            purpose,
        };
        cx.api_holding([pv.to_string()], secrets::get(secret), call);
        None
    }

    /// The read of a node call's Secret answered: its data waits for the
    /// call, or the mount fails saying why.
    pub(super) fn node_secret_read(
        &mut self,
        cx: &mut Cx<Self>,
        pv: String,
        secret: &SecretReference,
        purpose: NodeSecret,
        result: ApiResult,
    ) {
        self.mark_volume(cx, &pv);
        match secrets::read(secret, result) {
            // Kept only while the volume is there.
            Ok(data) => {
                if cx.cache().find(Kind::PersistentVolume, "", &pv).is_some() {
                    self.credentials.insert((pv, purpose), data);
                }
            }
            Err(e) => {
                let why = format!(
                    "fetching {} {}/{} failed: {e}",
                    purpose.upstream_field(),
                    secret.namespace,
                    secret.name
                );
                self.failed_mount_because(cx, &pv, purpose.operation(), &why);
            }
        }
    }

    /// Forgets the Secret data read for the PV `pv`.
    pub(super) fn drop_node_secrets(&mut self, pv: &str) {
        self.credentials.retain(|(p, _), _| p != pv);
    }
}
