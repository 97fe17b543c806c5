//! The external-attacher half (C2): VolumeAttachments of this driver become
//! ControllerPublish/ControllerUnpublish calls and status.

use super::*;
use crate::control::csi_map;
use crate::control::secrets;
use crate::driver::{ControllerPublish, ControllerUnpublish, Request, Response, Secrets};

impl AttachReconciler {
    fn node_id(&self, cx: &Cx<Self>, node: &str) -> Option<String> {
        match cx.cache().find(Kind::CsiNode, "", node) {
            Some(Object::CsiNode(n)) => n.driver(&self.config.driver).map(|d| d.node_id.clone()),
            _ => None,
        }
    }

    fn set_status(
        &mut self,
        cx: &mut Cx<Self>,
        va: &VolumeAttachment,
        f: impl FnOnce(&mut VolumeAttachmentStatus),
    ) {
        let mut v = va.clone();
        f(&mut v.status);
        if v.status != va.status {
            self.api(
                cx,
                va.metadata.name.clone(),
                ApiCall::UpdateStatus(Object::Va(v)),
            );
        }
    }

    fn attach_error(&mut self, cx: &mut Cx<Self>, va: &VolumeAttachment, message: String) {
        cx.fail(va.metadata.name.clone());
        let time = crate::store::timestamp(cx.now());
        self.set_status(cx, va, |s| {
            s.attached = false;
            s.attach_error = Some(VolumeError { time, message });
        });
    }

    /// The external-attacher's part for one volume: its
    /// VolumeAttachments published or unpublished, and (C2.7) the PV's
    /// finalizer kept while any references it.
    pub(super) fn attacher_pass(&mut self, cx: &mut Cx<Self>, volume: &str) {
        let finalizer = names::attacher_finalizer(&self.config.driver);
        let vas = self.vas_of(cx, volume);
        for va in &vas {
            let name = va.metadata.name.clone();
            let elsewhere = self
                .config
                .node
                .as_ref()
                .is_some_and(|n| *n != va.spec.node_name);
            if !self.ready(cx, &name) || elsewhere {
                continue;
            }
            if va.metadata.deleting() {
                self.detach(cx, va, &finalizer);
            } else if !va.status.attached {
                self.attach(cx, va, &finalizer);
            }
        }
        if !self.vas_of(cx, volume).is_empty() {
            return;
        }
        let Some(pv) = self.pv(cx, volume) else {
            return;
        };
        if pv.metadata.deleting() && pv.metadata.has_finalizer(&finalizer) && self.ready(cx, volume)
        {
            // Whatever else changed: the provisioner and the PV controller
            // write the volume too as it goes.
            let call = ApiCall::RemoveFinalizer {
                key: ObjectKey::new(Kind::PersistentVolume, "", volume),
                uid: pv.metadata.uid.clone(),
                finalizer,
            };
            self.api(cx, volume.to_string(), call);
        }
    }

    fn attach(&mut self, cx: &mut Cx<Self>, va: &VolumeAttachment, finalizer: &str) {
        if self.config.trivial {
            self.set_status(cx, va, |s| {
                s.attached = true;
                s.attach_error = None;
            });
            return;
        }
        let Some(pv) = self.pv(cx, va.pv_name()) else {
            return self.attach_error(
                cx,
                va,
                format!("PersistentVolume {:?} not found", va.pv_name()),
            );
        };
        if pv.metadata.deleting() {
            return self.attach_error(
                cx,
                va,
                format!("PersistentVolume {:?} is marked for deletion", pv.name()),
            );
        }
        if !pv.metadata.has_finalizer(finalizer) {
            if self.ready(cx, pv.name()) {
                let mut v = PersistentVolume::clone(&pv);
                v.metadata.add_finalizer(finalizer);
                self.api(cx, pv.name().to_string(), ApiCall::Update(Object::Pv(v)));
            }
            return;
        }
        let Some(node_id) = self.node_id(cx, &va.spec.node_name) else {
            return self.attach_error(
                cx,
                va,
                format!(
                    "CSINode {} does not contain driver {}",
                    va.spec.node_name, self.config.driver
                ),
            );
        };
        if !va.metadata.has_finalizer(finalizer)
            || va.metadata.annotation(names::ANN_VA_NODE_ID) != Some(node_id.as_str())
        {
            let mut v = va.clone();
            v.metadata.add_finalizer(finalizer);
            v.metadata
                .annotations
                .insert(names::ANN_VA_NODE_ID.into(), node_id);
            self.api(cx, va.metadata.name.clone(), ApiCall::Update(Object::Va(v)));
            return;
        }
        let Some(csi) = pv.spec.csi.clone() else {
            return self.attach_error(
                cx,
                va,
                format!("PersistentVolume {:?} is not a CSI volume", pv.name()),
            );
        };
        let capability = match csi_map::pv_capability(&pv, self.config.modes) {
            Ok(c) => c,
            Err(e) => return self.attach_error(cx, va, e.to_string()),
        };
        let Some(secrets) = self.secrets_for(cx, va, true, &csi.controller_publish_secret_ref)
        else {
            return;
        };
        let call = Request::ControllerPublish(ControllerPublish {
            volume_id: csi.volume_handle,
            node_id,
            capability,
            readonly: csi.read_only && self.config.publish_readonly,
            volume_context: csi.volume_attributes,
            secrets,
        });
        let va = va.metadata.name.clone();
        cx.csi_holding([va.clone()], None, call, Call::Publish { va });
    }

    fn detach(&mut self, cx: &mut Cx<Self>, va: &VolumeAttachment, finalizer: &str) {
        if !va.metadata.has_finalizer(finalizer) {
            return;
        }
        let node_id = self.node_id(cx, &va.spec.node_name).or_else(|| {
            va.metadata
                .annotation(names::ANN_VA_NODE_ID)
                .map(str::to_string)
        });
        let csi = self.pv(cx, va.pv_name()).and_then(|pv| pv.spec.csi.clone());
        let (Some(node_id), Some(csi)) = (node_id, csi) else {
            // Nothing to unpublish from: the volume or the node is unknown.
            let mut v = va.clone();
            v.metadata.remove_finalizer(finalizer);
            self.api(cx, va.metadata.name.clone(), ApiCall::Update(Object::Va(v)));
            return;
        };
        let Some(secrets) = self.secrets_for(cx, va, false, &csi.controller_publish_secret_ref)
        else {
            return;
        };
        let call = Request::ControllerUnpublish(ControllerUnpublish {
            volume_id: csi.volume_handle,
            node_id: Some(node_id),
            secrets,
        });
        let va = va.metadata.name.clone();
        cx.csi_holding([va.clone()], None, call, Call::Unpublish { va });
    }

    /// The secrets `va`'s ControllerPublish (or Unpublish) gets from the
    /// PV's `controllerPublishSecretRef` (none without one); `None` while
    /// the Secret is being read (C2.3).
    fn secrets_for(
        &mut self,
        cx: &mut Cx<Self>,
        va: &VolumeAttachment,
        publish: bool,
        secret: &Option<SecretReference>,
    ) -> Option<Secrets> {
        let Some(secret) = secret else {
            return Some(Secrets::default());
        };
        let name = &va.metadata.name;
        let pv = va
            .spec
            .source
            .persistent_volume_name
            .as_deref()
            .unwrap_or("");
        if let Err(why) = secrets::pv_ref(pv, "controllerPublishSecretRef", secret) {
            if publish {
                self.attach_error(cx, va, why.to_string());
            } else {
                self.detach_error(cx, va, why.to_string());
            }
            return None;
        }
        if let Some(data) = self.credentials.remove(name) {
            return Some(data);
        }
        let call = Call::GetSecret {
            va: name.clone(),
            publish,
            secret: secret.clone(),
        };
        cx.api_holding([name.clone()], secrets::get(secret), call);
        None
    }

    /// The controller-publish Secret of `va` was read, or not: its data
    /// waits for the call, or the attach (detach) fails with upstream's
    /// message.
    pub(super) fn secret_read(
        &mut self,
        cx: &mut Cx<Self>,
        name: String,
        publish: bool,
        secret: &SecretReference,
        result: crate::control::ApiResult,
    ) {
        let va = match cx.cache().find(Kind::VolumeAttachment, "", &name) {
            Some(Object::Va(v)) => v.clone(),
            _ => return,
        };
        match secrets::read(secret, result) {
            Ok(data) => {
                self.credentials.insert(name.clone(), data);
            }
            Err(e) if publish => self.attach_error(cx, &va, e.to_string()),
            Err(e) => self.detach_error(cx, &va, e.to_string()),
        }
        self.mark_name(cx, &name);
    }

    fn detach_error(&mut self, cx: &mut Cx<Self>, va: &VolumeAttachment, message: String) {
        cx.fail(va.metadata.name.clone());
        let time = crate::store::timestamp(cx.now());
        self.set_status(cx, va, |s| {
            s.detach_error = Some(VolumeError { time, message });
        });
    }

    pub(super) fn csi_completed(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        let (name, publish) = match call {
            Call::Publish { va } => (va, true),
            Call::Unpublish { va } => (va, false),
            Call::Api { .. } | Call::GetSecret { .. } => return,
        };
        let va = match cx.cache().find(Kind::VolumeAttachment, "", &name) {
            Some(Object::Va(v)) => v.clone(),
            _ => return,
        };
        let finalizer = names::attacher_finalizer(&self.config.driver);
        match (publish, result) {
            (true, Ok(Response::Published { publish_context })) => {
                cx.succeed(&name);
                self.set_status(cx, &va, |s| {
                    s.attached = true;
                    s.attachment_metadata = publish_context;
                    s.attach_error = None;
                });
            }
            (true, Ok(other)) => self.attach_error(cx, &va, format!("unexpected answer {other:?}")),
            (true, Err(e)) => self.attach_error(cx, &va, e.go_error()),
            (false, Ok(_)) => {
                cx.succeed(&name);
                let mut v = va.clone();
                v.metadata.remove_finalizer(&finalizer);
                v.status.attached = false;
                self.api(cx, name, ApiCall::Update(Object::Va(v)));
            }
            (false, Err(e)) => self.detach_error(cx, &va, e.go_error()),
        }
    }
}
