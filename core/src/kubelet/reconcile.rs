//! The reconciler's passes (D1.1, D2, D3).

use super::*;
use crate::control::Event;
use crate::control::csi_map;
use crate::driver::{self, Request};
use crate::model::names::{self, expansion, reason};
use crate::model::storage::CsiSource;

/// A pod's use of a volume that should be published.
#[derive(Debug, Clone, Hash)]
pub(super) struct Want {
    pod: Shared<Pod>,
    claim: Shared<PersistentVolumeClaim>,
    pv: Shared<PersistentVolume>,
    readonly: bool,
}

impl KubeletReconciler {
    /// What every pod of the node wants published, by (pod UID, PV name).
    pub(super) fn want(&self, cx: &Cx<Self>) -> BTreeMap<(String, String), Want> {
        let mut out = BTreeMap::new();
        for pod in cx.cache().shared_all::<Pod>() {
            self.wants_of_pod(cx, &pod, None, &mut out);
        }
        out
    }

    /// What the node's pods want of the volume `pv`, found through the
    /// claims bound to it and the pods naming them.
    fn want_of(&self, cx: &Cx<Self>, pv: &str) -> BTreeMap<(String, String), Want> {
        let mut out = BTreeMap::new();
        for (namespace, claim) in self.users.claims_of(pv) {
            for name in self.users.pods_of(namespace, claim) {
                if let Some(pod) = cx.cache().shared::<Pod>(namespace, name) {
                    self.wants_of_pod(cx, &pod, Some(pv), &mut out);
                }
            }
        }
        out
    }

    /// The volumes `pod` wants published (only `pv`'s when named).
    fn wants_of_pod(
        &self,
        cx: &Cx<Self>,
        pod: &Shared<Pod>,
        only: Option<&str>,
        out: &mut BTreeMap<(String, String), Want>,
    ) {
        if pod.terminated()
            || pod.metadata.deleting()
            || pod.node() != Some(self.config.node.as_str())
        {
            return;
        }
        for v in &pod.spec.volumes {
            let Some(src) = &v.persistent_volume_claim else {
                continue;
            };
            let Some(claim) = cx
                .cache()
                .shared::<PersistentVolumeClaim>(&pod.metadata.namespace, &src.claim_name)
            else {
                continue;
            };
            if only.is_some_and(|pv| pv != claim.volume_name()) {
                continue;
            }
            let Some(pv) = cx
                .cache()
                .shared::<PersistentVolume>("", claim.volume_name())
            else {
                continue;
            };
            if pv
                .spec
                .csi
                .as_ref()
                .is_none_or(|c| c.driver != self.config.driver)
            {
                continue;
            }
            let readonly = src.read_only || pv.spec.csi.as_ref().is_some_and(|c| c.read_only);
            out.insert(
                (pod.metadata.uid.clone(), pv.name().to_string()),
                Want {
                    pod: pod.clone(),
                    claim: claim.clone(),
                    pv: pv.clone(),
                    readonly,
                },
            );
        }
    }

    fn node(&self, cx: &Cx<Self>) -> Option<Shared<Node>> {
        cx.cache().shared("", &self.config.node)
    }

    fn csi_driver(&self, cx: &Cx<Self>) -> Option<CsiDriver> {
        match cx.cache().find(Kind::CsiDriver, "", &self.config.driver) {
            Some(Object::CsiDriver(d)) => Some(d.clone()),
            _ => None,
        }
    }

    fn ready(&self, cx: &Cx<Self>, pv: &str) -> bool {
        cx.idle(pv)
    }

    fn csi(&mut self, cx: &mut Cx<Self>, call: Call, request: Request) {
        let node = Some(self.config.node.clone());
        cx.csi_holding([call.key().to_string()], node, request, call);
    }

    fn api(&mut self, cx: &mut Cx<Self>, key: String, call: ApiCall) {
        let object = call.key();
        cx.api_holding([key.clone()], call, Call::Api { key, object });
    }

    /// A FailedMount warning on the pods using `pv`, and a backoff.
    pub(super) fn failed_mount(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &str,
        what: &str,
        e: &crate::Status,
    ) {
        self.failed_mount_because(cx, pv, what, &e.go_error());
    }

    /// A FailedMount warning on the pods using `pv` saying `why`, and a backoff.
    pub(super) fn failed_mount_because(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &str,
        what: &str,
        why: &str,
    ) {
        cx.fail(pv.to_string());
        let msg = format!("{what} failed for volume {pv:?} : {why}");
        let pods: Vec<ObjectKey> = self
            .want_of(cx, pv)
            .values()
            .map(|w| ObjectKey::new(Kind::Pod, &w.pod.metadata.namespace, &w.pod.metadata.name))
            .collect();
        for key in pods {
            if self.last_event.get(&key) != Some(&msg) {
                self.last_event.insert(key.clone(), msg.clone());
                cx.event(Event::warning(key, reason::FAILED_MOUNT, msg.clone()));
            }
        }
    }

    /// After NodeExpand: the claim's status capacity catches up with the PV (last step of resize).
    pub(super) fn expanded(&mut self, cx: &mut Cx<Self>, claim: &ObjectKey, bytes: u64) {
        let Some(shared) = cx.cache().get_shared(claim) else {
            return;
        };
        let Object::Pvc(c) = &*shared else {
            return;
        };
        // As upstream's MarkFSResizeFinished: the expansion leaves no
        // condition and no status behind.
        let mut c2 = c.clone();
        c2.status
            .capacity
            .insert("storage".into(), Quantity::from_bytes(bytes));
        c2.merge_resize_conditions(Vec::new(), false);
        c2.set_resize_status(None);
        cx.event(Event::normal(
            claim.clone(),
            reason::FILE_SYSTEM_RESIZE_SUCCESSFUL,
            format!(
                "MountVolume.NodeExpandVolume succeeded for volume {:?} {}",
                c.volume_name(),
                self.config.node
            ),
        ));
        self.api(
            cx,
            format!("claim:{}", claim),
            ApiCall::UpdateStatus(Object::Pvc(c2)),
        );
    }

    /// NodeExpandVolume failed for good: the claim says so (upstream's
    /// MarkNodeExpansionInfeasible and MarkNodeExpansionFailedCondition).
    /// An infeasible one waits for the resizer to say the node may try
    /// again.
    pub(super) fn expand_failed(
        &mut self,
        cx: &mut Cx<Self>,
        claim: &ObjectKey,
        e: &crate::Status,
    ) {
        if !e.is_final() {
            return;
        }
        let Some(Object::Pvc(c)) = cx.cache().get(claim) else {
            return;
        };
        let mut c = c.clone();
        let infeasible = e.is_infeasible().then_some(expansion::NODE_INFEASIBLE);
        c.mark_expansion_failed(expansion::NODE_RESIZE_ERROR, &e.go_error(), infeasible);
        self.api(
            cx,
            format!("claim:{claim}"),
            ApiCall::UpdateStatus(Object::Pvc(c)),
        );
    }

    /// The node's pass: what is in use is reported (D1.2).
    pub(super) fn node_pass(&mut self, cx: &mut Cx<Self>) {
        let want = self.want(cx);
        let node = self.node(cx);
        let mut in_use: BTreeSet<String> = BTreeSet::new();
        for w in want.values() {
            if let Some(c) = &w.pv.spec.csi {
                in_use.insert(names::unique_volume_name(&c.driver, &c.volume_handle));
            }
        }
        for d in self.actual.devices.values() {
            in_use.insert(names::unique_volume_name(&self.config.driver, &d.handle));
        }
        for m in self.actual.mounts.values() {
            in_use.insert(names::unique_volume_name(&self.config.driver, &m.handle));
        }
        self.report_in_use(cx, node.as_deref(), &in_use);
    }

    /// One volume's pass (D1.1): unpublish what no pod wants any more,
    /// make it ready for each pod that wants it, unstage it when unused.
    pub(super) fn volume_pass(&mut self, cx: &mut Cx<Self>, pv: &str) {
        let want = self.want_of(cx, pv);
        self.unpublish_pass(cx, pv, &want);
        let node = self.node(cx);
        let attach_required = self.csi_driver(cx).is_none_or(|d| d.attach_required());
        for ((pod_uid, pv_name), w) in &want {
            self.mount_pass(cx, node.as_deref(), attach_required, pod_uid, pv_name, w);
        }
        self.unstage_pass(cx, pv, &want);
    }

    /// D1.1 step one: unpublish the volume from pods that no longer want
    /// it (D2.4, D3.8).
    fn unpublish_pass(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &str,
        want: &BTreeMap<(String, String), Want>,
    ) {
        let gone: Vec<((String, String), PodMount)> = self
            .actual
            .mounts
            .iter()
            .filter(|(k, _)| k.1 == pv && !want.contains_key(k))
            .map(|(k, m)| (k.clone(), m.clone()))
            .collect();
        for ((pod, pv), m) in gone {
            if !self.ready(cx, &pv) {
                continue;
            }
            let request = Request::NodeUnpublish(driver::NodeUnpublish {
                volume_id: m.handle.clone(),
                target_path: m.target.clone(),
            });
            self.csi(cx, Call::Unpublish { pv, pod }, request);
        }
    }

    /// D1.2: volumes are reported in use before the kubelet waits for attach,
    /// and stay reported until unstaged.
    fn report_in_use(&mut self, cx: &mut Cx<Self>, node: Option<&Node>, in_use: &BTreeSet<String>) {
        let Some(node) = node else { return };
        let prefix = format!("kubernetes.io/csi/{}^", self.config.driver);
        let mut next: BTreeSet<String> = node
            .status
            .volumes_in_use
            .iter()
            .filter(|v| !v.starts_with(&prefix))
            .cloned()
            .collect();
        next.extend(in_use.iter().cloned());
        let have: BTreeSet<String> = node.status.volumes_in_use.iter().cloned().collect();
        let key = format!("node:{}", self.config.node);
        if next != have && cx.idle(&key) {
            let mut n = node.clone();
            n.status.volumes_in_use = next.into_iter().collect();
            self.api(cx, key, ApiCall::UpdateStatus(Object::Node(n)));
        }
    }

    /// A FailedMount warning on `pod`, once per message.
    fn warn_pod(&mut self, cx: &mut Cx<Self>, pod: &Pod, msg: String) {
        let key = ObjectKey::new(Kind::Pod, &pod.metadata.namespace, &pod.metadata.name);
        if self.last_event.get(&key) != Some(&msg) {
            self.last_event.insert(key.clone(), msg.clone());
            cx.event(Event::warning(key, reason::FAILED_MOUNT, msg));
        }
    }

    fn mount_pass(
        &mut self,
        cx: &mut Cx<Self>,
        node: Option<&Node>,
        attach_required: bool,
        pod_uid: &str,
        pv_name: &str,
        w: &Want,
    ) {
        if !self.ready(cx, pv_name) {
            return;
        }
        let Some(csi) = w.pv.spec.csi.clone() else {
            return;
        };
        if self.held_back(cx, pod_uid, pv_name, w) {
            return;
        }
        let Some(node) = node else { return };
        let Some(publish_context) = self.attached_context(cx, node, attach_required, &csi) else {
            return;
        };
        let capability = match csi_map::pv_capability(&w.pv, self.config.modes) {
            Ok(c) => c,
            Err(e) => {
                self.failed_mount(
                    cx,
                    pv_name,
                    "MountVolume.SetUp",
                    &crate::Status::invalid(e.to_string()),
                );
                return;
            }
        };
        if self.staging(cx, pv_name, &csi, &publish_context, &capability)
            || self.publishing(
                cx,
                pod_uid,
                pv_name,
                &csi,
                w,
                (&publish_context, &capability),
            )
        {
            return;
        }
        self.expand_on_node(cx, pod_uid, pv_name, &csi, w, capability);
    }

    /// True when the pod must not mount the volume now, with a warning on
    /// the pod saying why: its claim is being deleted and the pod has not
    /// mounted it yet (upstream's desired-state populator, so that
    /// pvc-protection's last look at the pods stays true), or the volume is
    /// ReadWriteOncePod and another pod has it (D2.1: of pods wanting it at
    /// once, the first by uid wins — pods are visited in uid order and the
    /// first's mount is recorded, uncertain, as soon as it is tried).
    fn held_back(&mut self, cx: &mut Cx<Self>, pod_uid: &str, pv_name: &str, w: &Want) -> bool {
        let mounted = self
            .actual
            .mounts
            .contains_key(&(pod_uid.to_string(), pv_name.to_string()));
        if w.claim.metadata.deleting() && !mounted {
            let msg = format!(
                "can't start pod because PVC {}/{} is being deleted",
                w.claim.metadata.namespace, w.claim.metadata.name
            );
            self.warn_pod(cx, &w.pod, msg);
            return true;
        }
        if w.pv.spec.access_modes == [AccessMode::ReadWriteOncePod] {
            let other = self
                .actual
                .mounts
                .keys()
                .any(|(p, v)| v == pv_name && p != pod_uid);
            if other && !mounted {
                self.warn_pod(cx,
                    &w.pod,
                    "volume uses the ReadWriteOncePod access mode and is already in use by another pod"
                        .to_string(),
                );
                return true;
            }
        }
        false
    }

    /// The publish context the node's stage and publish get, once the
    /// volume is in use on the node and (when the driver attaches) attached
    /// to it by a VolumeAttachment not being deleted; `None` until then.
    fn attached_context(
        &self,
        cx: &Cx<Self>,
        node: &Node,
        attach_required: bool,
        csi: &CsiSource,
    ) -> Option<driver::Attributes> {
        let unique = names::unique_volume_name(&csi.driver, &csi.volume_handle);
        if !node.status.volumes_in_use.contains(&unique) {
            return None;
        }
        if !attach_required {
            return Some(driver::Attributes::new());
        }
        if !node
            .status
            .volumes_attached
            .iter()
            .any(|a| a.name == unique)
        {
            return None;
        }
        let va = names::volume_attachment_name(
            &csi.volume_handle,
            &self.config.driver,
            &self.config.node,
        );
        match cx.cache().find(Kind::VolumeAttachment, "", &va) {
            // A VolumeAttachment being deleted is being detached: not usable.
            Some(Object::Va(v)) if v.status.attached && !v.metadata.deleting() => {
                Some(v.status.attachment_metadata.clone())
            }
            _ => None,
        }
    }

    /// Stages the volume when the driver stages and it is not staged yet
    /// for certain; true while that is so (the pod's publish waits).
    fn staging(
        &mut self,
        cx: &mut Cx<Self>,
        pv_name: &str,
        csi: &CsiSource,
        publish_context: &driver::Attributes,
        capability: &driver::Capability,
    ) -> bool {
        let staged = self
            .actual
            .devices
            .get(pv_name)
            .is_some_and(|d| d.state == Certainty::Done);
        if !self.config.stage_unstage || staged {
            return false;
        }
        let Some(secrets) = self.node_secrets(cx, pv_name, csi, NodeSecret::Stage) else {
            return true;
        };
        let staging =
            names::staging_path(&self.config.root, &self.config.driver, &csi.volume_handle);
        let retry = self.actual.devices.contains_key(pv_name);
        self.actual
            .devices
            .entry(pv_name.to_string())
            .or_insert(Device {
                handle: csi.volume_handle.clone(),
                staging_path: staging.clone(),
                state: Certainty::Uncertain,
            });
        let request = Request::NodeStage(driver::NodeStage {
            volume_id: csi.volume_handle.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: staging,
            capability: capability.clone(),
            volume_context: csi.volume_attributes.clone(),
            secrets,
        });
        self.csi(
            cx,
            Call::Stage {
                pv: pv_name.to_string(),
                retry,
            },
            request,
        );
        true
    }

    /// Publishes the volume to the pod when it is not published for
    /// certain; true while that is so.
    fn publishing(
        &mut self,
        cx: &mut Cx<Self>,
        pod_uid: &str,
        pv_name: &str,
        csi: &CsiSource,
        w: &Want,
        (publish_context, capability): (&driver::Attributes, &driver::Capability),
    ) -> bool {
        let key = (pod_uid.to_string(), pv_name.to_string());
        if self
            .actual
            .mounts
            .get(&key)
            .is_some_and(|m| m.state == Certainty::Done)
        {
            return false;
        }
        let Some(secrets) = self.node_secrets(cx, pv_name, csi, NodeSecret::Publish) else {
            return true;
        };
        let target = names::publish_path(&self.config.root, pod_uid, pv_name);
        let retry = self.actual.mounts.contains_key(&key);
        self.actual.mounts.entry(key).or_insert(PodMount {
            handle: csi.volume_handle.clone(),
            pod: pod_uid.to_string(),
            target: target.clone(),
            state: Certainty::Uncertain,
        });
        let request = Request::NodePublish(driver::NodePublish {
            volume_id: csi.volume_handle.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: self.staging_path_of(csi),
            target_path: target,
            capability: capability.clone(),
            readonly: w.readonly,
            volume_context: self.publish_volume_context(cx, csi, w),
            secrets,
        });
        self.csi(
            cx,
            Call::Publish {
                pv: pv_name.to_string(),
                pod: pod_uid.to_string(),
                retry,
            },
            request,
        );
        true
    }

    /// The staging path NodePublish and NodeExpand name: empty when the
    /// driver does not stage.
    fn staging_path_of(&self, csi: &CsiSource) -> String {
        if self.config.stage_unstage {
            names::staging_path(&self.config.root, &self.config.driver, &csi.volume_handle)
        } else {
            String::new()
        }
    }

    /// The volume context NodePublish gets: the PV's attributes, and the
    /// pod's identity when the CSIDriver asks for it (podInfoOnMount).
    fn publish_volume_context(
        &self,
        cx: &Cx<Self>,
        csi: &CsiSource,
        w: &Want,
    ) -> driver::Attributes {
        let mut volume_context: driver::Attributes = csi.volume_attributes.clone();
        if self.csi_driver(cx).is_some_and(|d| d.pod_info_on_mount()) {
            let p = &w.pod;
            volume_context.insert(
                "csi.storage.k8s.io/pod.name".into(),
                p.metadata.name.clone(),
            );
            volume_context.insert(
                "csi.storage.k8s.io/pod.namespace".into(),
                p.metadata.namespace.clone(),
            );
            volume_context.insert("csi.storage.k8s.io/pod.uid".into(), p.metadata.uid.clone());
            volume_context.insert(
                "csi.storage.k8s.io/serviceAccount.name".into(),
                p.spec
                    .service_account_name
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            );
            volume_context.insert("csi.storage.k8s.io/ephemeral".into(), "false".into());
        }
        volume_context
    }

    /// D3.11: the PV outgrew the claim and the resizer asked the node to
    /// finish: NodeExpandVolume (or, when the driver has no node
    /// expansion, the claim is marked expanded at once).
    fn expand_on_node(
        &mut self,
        cx: &mut Cx<Self>,
        pod_uid: &str,
        pv_name: &str,
        csi: &CsiSource,
        w: &Want,
        capability: driver::Capability,
    ) {
        let pv_bytes = w.pv.capacity().map_or(0, |q| q.bytes());
        let claim_bytes = w.claim.status_capacity().map_or(0, |q| q.bytes());
        let claim_key = ObjectKey::new(
            Kind::PersistentVolumeClaim,
            &w.claim.metadata.namespace,
            &w.claim.metadata.name,
        );
        // The claim's own writes back off apart from the volume's calls.
        let claim_write = format!("claim:{claim_key}");
        if pv_bytes <= claim_bytes || cx.busy(&claim_write) || cx.waiting(claim_write.as_str()) {
            return;
        }
        // Only what the resizer handed to the node (upstream's runPreCheck);
        // the claim says the node is at it before NodeExpandVolume runs.
        match w.claim.resize_status() {
            Some(expansion::NODE_IN_PROGRESS) => {}
            Some(expansion::NODE_PENDING) => {
                let mut c = (*w.claim).clone();
                c.set_resize_status(Some(expansion::NODE_IN_PROGRESS));
                let call = ApiCall::UpdateStatus(Object::Pvc(c));
                self.api(cx, claim_write, call);
                return;
            }
            _ => return,
        }
        if !self.config.node_expand {
            self.expanded(cx, &claim_key, pv_bytes);
            return;
        }
        let Some(secrets) = self.node_secrets(cx, pv_name, csi, NodeSecret::Expand) else {
            return;
        };
        let request = Request::NodeExpand(driver::NodeExpand {
            volume_id: csi.volume_handle.clone(),
            volume_path: names::publish_path(&self.config.root, pod_uid, pv_name),
            capacity: driver::CapacityRange {
                required_bytes: pv_bytes,
                limit_bytes: 0,
            },
            staging_target_path: self.staging_path_of(csi),
            capability: Some(capability),
            secrets,
        });
        self.csi(
            cx,
            Call::Expand {
                pv: pv_name.to_string(),
                claim: claim_key,
                bytes: pv_bytes,
            },
            request,
        );
    }

    /// Planted mistake: unstage at once, whatever is still published.
    pub(super) fn unstage_now(&mut self, cx: &mut Cx<Self>, pv: &str) {
        let Some(d) = self.actual.devices.get(pv).cloned() else {
            return;
        };
        let request = Request::NodeUnstage(driver::NodeUnstage {
            volume_id: d.handle.clone(),
            staging_target_path: d.staging_path.clone(),
        });
        self.csi(cx, Call::Unstage { pv: pv.to_string() }, request);
    }

    /// D1.1 last step: unstage the volume once no publish is left and no
    /// pod wants it (D1.3, D3.9).
    fn unstage_pass(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &str,
        want: &BTreeMap<(String, String), Want>,
    ) {
        if !want.is_empty() || self.actual.mounts.keys().any(|(_, v)| v == pv) {
            return;
        }
        let Some(d) = self.actual.devices.get(pv).cloned() else {
            return;
        };
        if !self.ready(cx, pv) {
            return;
        }
        if !self.config.stage_unstage {
            self.actual.devices.remove(pv);
            return;
        }
        let request = Request::NodeUnstage(driver::NodeUnstage {
            volume_id: d.handle.clone(),
            staging_target_path: d.staging_path.clone(),
        });
        self.csi(cx, Call::Unstage { pv: pv.to_string() }, request);
    }
}
