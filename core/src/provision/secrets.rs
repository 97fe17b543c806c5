//! B2.9–B2.11: the Secrets a provisioned volume's calls use, resolved from
//! the class when the claim is provisioned, before CreateVolume (as
//! upstream's prepareProvision does), and written on the PV.

use super::*;
use crate::control::secrets::{self, Tokens};

/// The Secret references of one provisioned volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct VolumeSecrets {
    /// CreateVolume's and DeleteVolume's (on the PV as the deletion
    /// annotations).
    pub provisioner: Option<SecretReference>,
    pub controller_publish: Option<SecretReference>,
    pub node_stage: Option<SecretReference>,
    pub node_publish: Option<SecretReference>,
    pub controller_expand: Option<SecretReference>,
    pub node_expand: Option<SecretReference>,
    /// ControllerModifyVolume's (on the PV as annotations, read by the
    /// resizer).
    pub controller_modify: Option<SecretReference>,
}

impl VolumeSecrets {
    /// Resolves every operation's reference for the volume `pv_name` of
    /// `claim` under `class`; the first that cannot be resolved is the
    /// error, in upstream's words.
    pub(super) fn resolve(
        class: &StorageClass,
        pv_name: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<VolumeSecrets, String> {
        let tokens = Tokens {
            pv_name,
            claim: Some(claim),
        };
        let of = |p| secrets::secret_ref(p, &class.parameters, tokens).map_err(|e| e.to_string());
        Ok(VolumeSecrets {
            provisioner: of(&secrets::PROVISIONER)?,
            controller_publish: of(&secrets::CONTROLLER_PUBLISH)?,
            node_stage: of(&secrets::NODE_STAGE)?,
            node_publish: of(&secrets::NODE_PUBLISH)?,
            controller_expand: of(&secrets::CONTROLLER_EXPAND)?,
            node_expand: of(&secrets::NODE_EXPAND)?,
            controller_modify: of(&secrets::CONTROLLER_MODIFY)?,
        })
    }

    /// Writes the references on the PV: the five in `spec.csi`, the
    /// provisioner's as the deletion annotations (empty when there is none),
    /// the controller-modify one as its annotations (when there is one).
    pub(super) fn write_on(&self, pv: &mut PersistentVolume) {
        if let Some(csi) = &mut pv.spec.csi {
            csi.controller_publish_secret_ref = self.controller_publish.clone();
            csi.node_stage_secret_ref = self.node_stage.clone();
            csi.node_publish_secret_ref = self.node_publish.clone();
            csi.controller_expand_secret_ref = self.controller_expand.clone();
            csi.node_expand_secret_ref = self.node_expand.clone();
        }
        let (name, namespace) = self
            .provisioner
            .as_ref()
            .map(|r| (r.name.clone(), r.namespace.clone()))
            .unwrap_or_default();
        let ann = &mut pv.metadata.annotations;
        ann.insert(names::ANN_DELETION_SECRET_NAME.into(), name);
        ann.insert(names::ANN_DELETION_SECRET_NAMESPACE.into(), namespace);
        if let Some(r) = &self.controller_modify {
            ann.insert(names::ANN_MODIFY_SECRET_NAME.into(), r.name.clone());
            ann.insert(
                names::ANN_MODIFY_SECRET_NAMESPACE.into(),
                r.namespace.clone(),
            );
        }
    }
}

impl ProvisionerReconciler {
    /// Reads the provisioner Secret of the claim `uid` (upstream's
    /// getCredentials); the claim is looked at again with its data.
    pub(super) fn get_secret(
        &mut self,
        cx: &mut Cx<Self>,
        claim: &ObjectKey,
        uid: String,
        secret: SecretReference,
    ) {
        let get = secrets::get(&secret);
        let call = Call::GetSecret {
            uid,
            claim: claim.clone(),
            secret,
        };
        cx.api_holding([call.key().to_string()], get, call);
    }

    /// The provisioner Secret was read, or not: its data is kept for the
    /// claim's CreateVolume (not cached: no other pass needs it), or the
    /// claim fails with upstream's message and backs off.
    pub(super) fn secret_read(
        &mut self,
        cx: &mut Cx<Self>,
        uid: String,
        claim: ObjectKey,
        secret: SecretReference,
        result: ApiResult,
    ) {
        let present = self
            .claim(cx, &claim)
            .is_some_and(|c| c.metadata.uid == uid);
        match secrets::read(&secret, result) {
            // Kept only while the claim is there to be provisioned.
            Ok(data) if present => {
                self.credentials.insert(uid, data);
                cx.mark(claim);
            }
            Ok(_) => {}
            Err(e) => self.refuse(cx, &claim, uid, e.to_string()),
        }
    }
}

impl ProvisionerReconciler {
    /// B5.4: the Secret a volume's DeleteVolume uses: the one its deletion
    /// annotations name (none when they are empty), or, on a PV without
    /// them, the one its StorageClass names (none when the class is gone).
    pub(super) fn deletion_secret(
        &self,
        cx: &Cx<Self>,
        pv: &PersistentVolume,
    ) -> Result<Option<SecretReference>, secrets::SecretError> {
        let ann = |k| pv.metadata.annotation(k);
        match (
            ann(names::ANN_DELETION_SECRET_NAME),
            ann(names::ANN_DELETION_SECRET_NAMESPACE),
        ) {
            (Some(""), Some("")) => Ok(None),
            (Some(name), Some(namespace)) if secrets::valid_ref(name, namespace).is_some() => {
                Ok(secrets::valid_ref(name, namespace))
            }
            (Some(name), Some(namespace)) => Err(secrets::SecretError::AnnotationsRef {
                pv: pv.name().to_string(),
                name_key: names::ANN_DELETION_SECRET_NAME,
                namespace_key: names::ANN_DELETION_SECRET_NAMESPACE,
                name: name.to_string(),
                namespace: namespace.to_string(),
            }),
            _ => {
                let class = pv.spec.storage_class_name.as_deref().unwrap_or("");
                let Some(class) = self.class(cx, class) else {
                    return Ok(None);
                };
                let tokens = Tokens {
                    pv_name: pv.name(),
                    claim: None,
                };
                secrets::secret_ref(&secrets::PROVISIONER, &class.parameters, tokens)
            }
        }
    }

    pub(super) fn get_deletion_secret(
        &mut self,
        cx: &mut Cx<Self>,
        pv: String,
        secret: SecretReference,
    ) {
        let get = secrets::get(&secret);
        cx.api_holding([pv.clone()], get, Call::GetDeletionSecret { pv, secret });
    }

    /// A deletion Secret was read, or not: deletion goes on with its data,
    /// or without any when it could not be read (the Secret may have gone
    /// before the volume, as upstream allows).
    pub(super) fn deletion_secret_read(
        &mut self,
        cx: &mut Cx<Self>,
        pv: String,
        secret: SecretReference,
        result: ApiResult,
    ) {
        let data = secrets::read(&secret, result).unwrap_or_default();
        self.deletion_credentials.insert(pv.clone(), data);
        cx.mark(ObjectKey::new(Kind::PersistentVolume, "", &pv));
    }
}
