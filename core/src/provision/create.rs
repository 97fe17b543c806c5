//! B1–B4: a claim provisioned — the claim looked at, CreateVolume asked
//! (and carried on after a timeout, B4.5), the PV saved — and what each
//! completion means.

use super::*;

impl ProvisionerReconciler {
    /// An operation already asked of the driver for the incarnation `uid`
    /// of claim `key` goes on (B4.5): an orphan is cleaned up; a create
    /// goes on with the same request while its claim is there
    /// (`claimed`), or in the background even after it went.
    fn go_on(&mut self, cx: &mut Cx<Self>, key: &ObjectKey, uid: &str, claimed: bool) {
        if !cx.idle(uid) {
            return;
        }
        let Some(p) = self.provisioning.get(uid).cloned() else {
            return;
        };
        self.retry.insert(uid.to_string(), key.clone());
        if let Some(volume_id) = &p.orphan {
            self.call_cleanup(cx, &p, volume_id);
        } else if claimed || p.background {
            self.call_create(cx, p);
        } else {
            self.forget(cx, uid);
        }
    }

    /// B1.2: the claim's storage-provisioner annotation, GA key first.
    pub(super) fn annotated_for_us(&self, c: &PersistentVolumeClaim) -> bool {
        let ann = c
            .metadata
            .annotation(names::ANN_STORAGE_PROVISIONER)
            .or_else(|| c.metadata.annotation(names::ANN_BETA_STORAGE_PROVISIONER));
        ann == Some(self.config.driver.as_str())
            || c.metadata.annotation(names::ANN_MIGRATED_TO) == Some(self.config.driver.as_str())
    }

    /// One claim: an operation already asked of the driver goes on with
    /// the same request (B4.5); otherwise a claim of this provisioner's
    /// that is ready to be provisioned starts.
    pub(super) fn sync_claim(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        let claim = self.claim(cx, key);
        // Operations for an earlier incarnation of this name (deleted, and
        // perhaps made again since) go on with their own request.
        let earlier: Vec<String> = self
            .provisioning
            .values()
            .filter(|p| &p.claim == key && claim.as_ref().is_none_or(|c| c.metadata.uid != p.uid))
            .map(|p| p.uid.clone())
            .collect();
        for uid in earlier {
            self.go_on(cx, key, &uid, false);
        }
        let Some(claim) = claim else { return };
        let uid = claim.metadata.uid.clone();
        if self.provisioning.contains_key(&uid) {
            return self.go_on(cx, key, &uid, true);
        }
        if !cx.idle(&uid) {
            return;
        }
        self.retry.insert(uid.clone(), key.clone());
        let Some(class) = self.provisionable(cx, key, &uid, &claim) else {
            return;
        };
        if !self.source_ready(cx, key, &uid, &claim, &class) {
            return;
        }
        let request = match self.build_request(cx, &claim, &class) {
            Ok(r) => r,
            Err(msg) => return self.refuse(cx, key, uid, msg),
        };
        let Some(request) = self.place(cx, key, &uid, &claim, &class, request) else {
            return;
        };
        let secrets = match secrets::VolumeSecrets::resolve(&class, &request.name, &claim) {
            Ok(s) => s,
            Err(msg) => return self.refuse(cx, key, uid, msg),
        };
        let mut request = request;
        if let Some(secret) = &secrets.provisioner {
            match self.credentials.get(&uid) {
                Some(data) => request.secrets = data.clone(),
                None => return self.get_secret(cx, key, uid, secret.clone()),
            }
        }
        if self.protect_source(cx, &claim) {
            return;
        }
        self.event(
            cx,
            Event::normal(
                key.clone(),
                reason::PROVISIONING,
                format!(
                    "External provisioner is provisioning volume for claim \"{}\"",
                    claim.metadata.key()
                ),
            ),
        );
        let p = Provisioning {
            claim: key.clone(),
            uid: uid.clone(),
            request,
            class,
            background: false,
            orphan: None,
            source: source::source_key(&claim),
            secrets,
            attributes_class: claim.volume_attributes_class().map(str::to_string),
        };
        self.credentials.remove(&uid);
        self.provisioning.insert(uid, p.clone());
        self.call_create(cx, p);
    }

    /// A ProvisioningFailed warning, and the claim backs off.
    pub(super) fn refuse(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        uid: String,
        message: impl Into<String>,
    ) {
        self.event(
            cx,
            Event::warning(key.clone(), reason::PROVISIONING_FAILED, message),
        );
        cx.fail(uid);
    }

    /// The claim's class, when the claim is one this provisioner must
    /// provision now: unbound, not being deleted, annotated for it, with
    /// no volume yet, of a class of this driver's, its node selected when
    /// the class waits for the first consumer.
    fn provisionable(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        uid: &str,
        claim: &PersistentVolumeClaim,
    ) -> Option<StorageClass> {
        if !claim.volume_name().is_empty()
            || claim.metadata.deleting()
            || !self.annotated_for_us(claim)
            || self.volume(cx, &self.config.volume_name(uid)).is_some()
        {
            return None;
        }
        let Some(class) = self.class(cx, claim.class()) else {
            let msg = format!("storageclass.storage.k8s.io {:?} not found", claim.class());
            self.refuse(cx, key, uid.to_string(), msg);
            return None;
        };
        if class.provisioner != self.config.driver {
            return None;
        }
        if let node::NodeVerdict::NotMine = self.node_verdict(cx, key, uid, claim, &class) {
            return None;
        }
        let selected = claim
            .metadata
            .annotation(names::ANN_SELECTED_NODE)
            .unwrap_or("");
        if class.binding_mode() == BindingMode::WaitForFirstConsumer && selected.is_empty() {
            return None;
        }
        Some(class)
    }

    /// False when the claim's data source keeps it from being provisioned
    /// now: a cross-namespace source (refused), an external populator's
    /// kind (B1.8, told once), or a snapshot not ready yet (its next
    /// change looks again, no timer needed).
    fn source_ready(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        uid: &str,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> bool {
        if claim.cross_namespace_source().is_some() {
            self.refuse(cx,
                key,
                uid.to_string(),
                "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled",
            );
            return false;
        }
        let Some(ds) = claim.data_source() else {
            return true;
        };
        if !matches!(ds.kind.as_str(), "VolumeSnapshot" | "PersistentVolumeClaim") {
            if self.populated.insert(uid.to_string()) {
                self.event(
                    cx,
                    Event::normal(
                        key.clone(),
                        reason::PROVISIONING,
                        "Assuming an external populator will provision the volume",
                    ),
                );
            }
            return false;
        }
        if ds.kind == "VolumeSnapshot"
            && let Err(msg) = self.snapshot_source(cx, claim, class, &ds)
        {
            self.event(
                cx,
                Event::warning(key.clone(), reason::PROVISIONING_FAILED, msg),
            );
            return false;
        }
        true
    }

    /// The claim `uid` is no longer being provisioned: its source may be
    /// released.
    fn forget(&mut self, cx: &mut Cx<Self>, uid: &str) {
        if let Some(p) = self.provisioning.remove(uid) {
            cx.mark_all(p.source);
        }
    }

    fn call_cleanup(&mut self, cx: &mut Cx<Self>, p: &Provisioning, volume_id: &str) {
        let call = Request::DeleteVolume(driver::DeleteVolume {
            volume_id: volume_id.to_string(),
            secrets: p.request.secrets.clone(),
        });
        self.csi(cx, Call::Cleanup { uid: p.uid.clone() }, call);
    }

    /// B3.2: the too-small volume is gone (or not yet): either way the claim
    /// is tried again after a backoff.
    fn cleaned_up(&mut self, cx: &mut Cx<Self>, uid: &str, result: CsiResult) {
        let Some(p) = self.provisioning.get_mut(uid) else {
            return;
        };
        match result {
            Ok(_) => {
                // Nothing of this attempt is left on the driver.
                p.orphan = None;
                p.background = false;
            }
            Err(e) => {
                let (claim, volume_id) = (p.claim.clone(), p.orphan.clone().unwrap_or_default());
                self.event(
                    cx,
                    Event::warning(
                        claim,
                        reason::PROVISIONING_FAILED,
                        format!(
                            "cleanup of volume {volume_id} failed, deleting it again later: {}",
                            e.go_error()
                        ),
                    ),
                );
            }
        }
        cx.fail(uid.to_string());
    }

    fn call_create(&mut self, cx: &mut Cx<Self>, p: Provisioning) {
        let call = Request::CreateVolume(p.request.clone());
        self.csi(cx, Call::Create { uid: p.uid }, call);
    }

    pub(super) fn csi_completed(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        match call {
            Call::Create { uid } => {
                self.created(cx, &uid, result);
            }
            Call::Cleanup { uid } => {
                self.cleaned_up(cx, &uid, result);
            }
            Call::Delete { pv } => {
                self.deleted_volume(cx, &pv, result);
            }
            Call::CheckCapacity { uid, claim } => self.capacity_checked(cx, uid, claim, result),
            other => debug_assert!(false, "{other:?} is not a CSI call"),
        }
    }

    fn created(&mut self, cx: &mut Cx<Self>, uid: &str, result: CsiResult) {
        let Some(p) = self.provisioning.get(uid).cloned() else {
            return;
        };
        // The claim of that name is this provisioning's only while it is
        // the same incarnation (one deleted and made again is another).
        let claim = self.claim(cx, &p.claim).filter(|c| c.metadata.uid == p.uid);
        match result {
            Ok(Response::Volume(v)) => {
                let requested = p.request.capacity.required_bytes;
                // B3.2: too small, or not filled from the source asked
                // for: the volume is deleted (even if the claim goes
                // meanwhile) and provisioning retried.
                if v.capacity_bytes != 0 && v.capacity_bytes < requested {
                    let why = format!(
                        "created volume capacity {} less than requested capacity {requested}",
                        v.capacity_bytes
                    );
                    return self.discard(cx, p, &v.volume_id, &why);
                }
                if p.request.content_source.is_some() && v.content_source.is_none() {
                    return self.discard(cx, p, &v.volume_id, "volume content source missing");
                }
                let pv = self.build_pv(&p, claim.as_ref(), &v);
                self.api(
                    cx,
                    Call::SavePv {
                        uid: uid.to_string(),
                    },
                    ApiCall::Create(Object::Pv(pv)),
                );
            }
            Ok(other) => {
                self.event(
                    cx,
                    Event::warning(
                        p.claim.clone(),
                        reason::PROVISIONING_FAILED,
                        format!("unexpected answer {other:?}"),
                    ),
                );
                cx.fail(uid.to_string());
            }
            Err(e) => self.create_failed(cx, &p, claim.as_ref(), e),
        }
    }

    /// A volume the driver made that does not do (B3.2): deleted before
    /// the claim is provisioned again.
    fn discard(&mut self, cx: &mut Cx<Self>, mut p: Provisioning, volume_id: &str, why: &str) {
        self.event(
            cx,
            Event::warning(
                p.claim.clone(),
                reason::PROVISIONING_FAILED,
                format!(
                    "failed to provision volume with StorageClass {:?}: {why}",
                    p.class.metadata.name
                ),
            ),
        );
        p.orphan = Some(volume_id.to_string());
        p.background = true;
        self.provisioning.insert(p.uid.clone(), p.clone());
        self.call_cleanup(cx, &p, volume_id);
    }

    fn create_failed(
        &mut self,
        cx: &mut Cx<Self>,
        p: &Provisioning,
        claim: Option<&PersistentVolumeClaim>,
        e: Status,
    ) {
        let selected = claim.is_some_and(|c| c.metadata.has_annotation(names::ANN_SELECTED_NODE));
        let class = classify(e.code, self.config.topology, selected);
        let msg = if e.code == Code::InvalidArgument {
            "Volume provisioning failed with infeasible error. Retries will be delayed.".to_string()
        } else {
            format!(
                "failed to provision volume with StorageClass {:?}: {}",
                p.class.metadata.name,
                e.go_error()
            )
        };
        self.event(
            cx,
            Event::warning(p.claim.clone(), reason::PROVISIONING_FAILED, msg),
        );
        match class {
            FailureClass::InBackground => {
                if let Some(q) = self.provisioning.get_mut(&p.uid) {
                    q.background = true;
                }
            }
            FailureClass::Reschedule => {
                self.forget(cx, &p.uid);
                if let Some(c) = claim {
                    let mut c = c.clone();
                    c.metadata.annotations.remove(names::ANN_SELECTED_NODE);
                    self.api(
                        cx,
                        Call::DropSelectedNode { uid: p.uid.clone() },
                        ApiCall::Update(Object::Pvc(c)),
                    );
                }
                return;
            }
            // An earlier attempt of this request may have made the volume
            // (it timed out): a rebuilt request (other topology, say) could
            // never match it, and the driver would answer ALREADY_EXISTS
            // for ever. While the claim is there the same request goes on.
            // Stricter than upstream, which starts over from the claim.
            FailureClass::Finished if p.background && claim.is_some() => {}
            FailureClass::Finished => {
                // Next attempt starts from the claim again (its class may have changed).
                self.forget(cx, &p.uid);
            }
        }
        cx.fail(p.uid.clone());
    }

    /// A write to (or the delete of) the PV `pv` completed. A failure is
    /// retried at once only when a newer version of the PV is already
    /// here (the retry is another call); otherwise after its backoff, or
    /// sooner when the watch brings news of the PV.
    fn pv_written(
        &mut self,
        cx: &mut Cx<Self>,
        pv: String,
        uid: &str,
        rv: Option<&str>,
        result: ApiResult,
    ) {
        let key = ObjectKey::new(Kind::PersistentVolume, "", &pv);
        match result {
            ApiResult::Ok(None) | ApiResult::NotFound => {
                cx.cache_mut().gone(&key, uid);
                self.deleted.remove(&pv);
                cx.succeed(&pv);
                cx.mark(key);
            }
            ApiResult::Ok(Some(_)) => {
                cx.succeed(&pv);
                cx.mark(key);
            }
            _ if rv.is_some_and(|rv| cx.cache().newer_than(&key, rv))
                || self
                    .config
                    .plant
                    .is(crate::plant::Plant::RetryFailedWriteAtOnce) =>
            {
                cx.mark(key);
            }
            _ => {
                cx.fail(pv);
            }
        }
    }

    pub(super) fn api_completed(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        match call {
            Call::GetSecret { uid, claim, secret } => {
                return self.secret_read(cx, uid, claim, secret, result);
            }
            Call::GetDeletionSecret { pv, secret } => {
                return self.deletion_secret_read(cx, pv, secret, result);
            }
            Call::TakeClaim { uid, claim } => return self.take_written(cx, uid, claim, result),
            _ => {}
        }
        if let ApiResult::Ok(Some(o)) = &result {
            cx.cache_mut().apply(o.clone());
        }
        match call {
            Call::SavePv { uid } => {
                let Some(p) = self.provisioning.get(&uid).cloned() else {
                    return;
                };
                match result {
                    ApiResult::Ok(_) | ApiResult::AlreadyExists => {
                        self.forget(cx, &uid);
                        cx.succeed(&uid);
                        self.retry.remove(&uid);
                        self.event(
                            cx,
                            Event::normal(
                                p.claim.clone(),
                                reason::PROVISIONING_SUCCEEDED,
                                format!("Successfully provisioned volume pvc-{uid}"),
                            ),
                        );
                    }
                    _ => {
                        // B3.4: keep saving the PV until it is stored.
                        if let Some(q) = self.provisioning.get_mut(&uid) {
                            q.background = true;
                        }
                        cx.fail(uid);
                    }
                }
            }
            Call::DropSelectedNode { uid } => {
                if !matches!(result, ApiResult::Ok(_)) {
                    cx.fail(uid);
                }
            }
            Call::DeletePvObject { pv, uid } => {
                self.pv_written(cx, pv, &uid, None, result);
            }
            Call::Finalizer { pv, uid, rv } => {
                let rv = (!rv.is_empty()).then_some(rv.as_str());
                self.pv_written(cx, pv, &uid, rv, result);
            }
            Call::Protect { uid, claim, rv } => {
                self.protected(cx, uid, claim, &rv, result);
            }
            Call::Release { uid, source, rv } => {
                self.released(cx, uid, source, &rv, result);
            }
            other => debug_assert!(false, "{other:?} is not an API call"),
        }
    }
}
