//! syncVolume (A6) and reclaim (A8): what happens to a volume as its claim
//! comes and goes.

use super::*;

impl BinderReconciler {
    pub(super) fn sync_volume(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        let Some(pv) = self.volume(cx, &key.name) else {
            return;
        };
        let Some(r) = pv.spec.claim_ref.as_ref() else {
            self.missing_claim.remove(pv.name());
            self.set_volume_phase(cx, &pv, PvPhase::Available, "");
            return;
        };
        if r.uid.is_empty() {
            // Pre-bound by the user, not completed yet (A6.1).
            self.set_volume_phase(cx, &pv, PvPhase::Available, "");
            return;
        }
        let claim = self
            .claim(cx, &r.namespace, &r.name)
            .filter(|c| c.metadata.uid == r.uid);
        let Some(claim) = claim else {
            let phase = pv.phase();
            if phase != PvPhase::Released && phase != PvPhase::Failed {
                if self.missing_claim.get(pv.name()) != Some(&r.uid) {
                    // A6.2: the watch may be late; read the claim before releasing.
                    self.call(
                        cx,
                        ApiCall::Get(pvc_key(&r.namespace, &r.name)),
                        vec![pv_key(pv.name())],
                    );
                    return;
                }
                self.set_volume_phase(cx, &pv, PvPhase::Released, "");
                return;
            }
            self.reclaim(cx, &pv);
            return;
        };
        self.missing_claim.remove(pv.name());
        let volume_name = claim.volume_name();
        if volume_name.is_empty() {
            if pv.volume_mode() != claim.volume_mode() {
                // A6.5: one event on each side, each naming the other.
                self.event(cx, Event::warning(
                    pv_key(pv.name()),
                    reason::VOLUME_MISMATCH,
                    format!(
                        "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                        claim.metadata.name
                    ),
                ));
                self.event(cx, Event::warning(
                    claim_key(&claim),
                    reason::VOLUME_MISMATCH,
                    format!(
                        "Cannot bind PersistentVolume {:?} to requested PersistentVolumeClaim due to incompatible volumeMode.",
                        pv.name()
                    ),
                ));
                return;
            }
            cx.mark(claim_key(&claim));
            return;
        }
        if volume_name == pv.name() {
            self.set_volume_phase(cx, &pv, PvPhase::Bound, "");
            return;
        }
        // The claim is bound to another volume (A6.7).
        if pv.metadata.has_annotation(names::ANN_PROVISIONED_BY)
            && pv.reclaim_policy() == ReclaimPolicy::Delete
        {
            if pv.phase() != PvPhase::Released && pv.phase() != PvPhase::Failed {
                self.set_volume_phase(cx, &pv, PvPhase::Released, "");
            } else {
                self.reclaim(cx, &pv);
            }
            return;
        }
        self.unbind(cx, &pv);
    }

    /// A7.4: a controller-bound volume loses claimRef and annotation; a
    /// user-pre-bound one keeps claimRef and loses only the UID. Then Available.
    fn unbind(&mut self, cx: &mut Cx<Self>, pv: &PersistentVolume) {
        let mut v = pv.clone();
        if v.metadata
            .annotations
            .remove(names::ANN_BOUND_BY_CONTROLLER)
            .is_some()
        {
            v.spec.claim_ref = None;
        } else if let Some(r) = v.spec.claim_ref.as_mut() {
            r.uid.clear();
        }
        if v != *pv {
            self.call(cx, ApiCall::Update(Object::Pv(v)), vec![pv_key(pv.name())]);
        } else {
            self.set_volume_phase(cx, pv, PvPhase::Available, "");
        }
    }

    /// Pods (`namespace/name`, sorted) not yet terminated that use the claim
    /// `pv`'s claimRef names, when that claim is gone from the cache
    /// (upstream's isVolumeUsed, unless the claim name is taken again).
    fn pods_using_claim_ref(&self, cx: &Cx<Self>, pv: &PersistentVolume) -> Vec<String> {
        let Some(r) = &pv.spec.claim_ref else {
            return Vec::new();
        };
        if self.claim(cx, &r.namespace, &r.name).is_some() {
            return Vec::new();
        }
        let mut pods: Vec<String> = cx
            .cache()
            .of_kind(Kind::Pod)
            .filter_map(|o| match o {
                Object::Pod(p) if p.uses_claim(&r.namespace, &r.name) => {
                    Some(format!("{}/{}", p.metadata.namespace, p.metadata.name))
                }
                _ => None,
            })
            .collect();
        pods.sort();
        pods
    }

    /// A8: what a Released (or Failed) volume's reclaim policy asks for.
    fn reclaim(&mut self, cx: &mut Cx<Self>, pv: &PersistentVolume) {
        let key = pv_key(pv.name());
        if pv.metadata.has_annotation(names::ANN_MIGRATED_TO) {
            return;
        }
        match pv.reclaim_policy() {
            ReclaimPolicy::Retain => {}
            ReclaimPolicy::Delete => {
                // A8.4, findDeletablePlugin: the provisioner named on the
                // volume decides, then a CSI source; volplane has no in-tree
                // plugins, so any other volume has no deleter.
                let msg = match pv
                    .metadata
                    .annotation(names::ANN_PROVISIONED_BY)
                    .filter(|p| !p.is_empty())
                {
                    Some(p) if !p.starts_with("kubernetes.io/") => return,
                    Some(p) => format!("no volume plugin matched name: {p}"),
                    None if pv.spec.csi.is_some() => return,
                    None => format!(
                        "error getting deleter volume plugin for volume {:?}: no volume plugin matched",
                        pv.name()
                    ),
                };
                let e = Event::warning(key, reason::VOLUME_FAILED_DELETE, msg.clone());
                self.set_volume_phase_with_event(cx, pv, PvPhase::Failed, &msg, Some(e));
            }
            ReclaimPolicy::Recycle => {
                // A8.6: a volume still used by pods of its old claim's name
                // stays Released (upstream's recycleVolumeOperation checks
                // this before it looks for a recycler).
                let pods = self.pods_using_claim_ref(cx, pv);
                if !pods.is_empty() {
                    self.event(
                        cx,
                        Event::normal(
                            key,
                            reason::VOLUME_FAILED_RECYCLE,
                            format!("Volume is used by pods: {}", pods.join(",")),
                        ),
                    );
                    return;
                }
                let msg = "No recycler plugin found for the volume!";
                let e = Event::warning(key, reason::VOLUME_FAILED_RECYCLE, msg);
                self.set_volume_phase_with_event(cx, pv, PvPhase::Failed, msg, Some(e));
            }
            ReclaimPolicy::Other(_) => {
                let msg = "Volume has unrecognized PersistentVolumeReclaimPolicy";
                let e = Event::warning(key, reason::VOLUME_UNKNOWN_RECLAIM_POLICY, msg);
                self.set_volume_phase_with_event(cx, pv, PvPhase::Failed, msg, Some(e));
            }
        }
    }
}
