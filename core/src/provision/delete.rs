//! B5: finalizers on owned volumes, and deletion of Released volumes whose
//! policy is Delete.

use super::*;

impl ProvisionerReconciler {
    /// B5.1: volumes this provisioner owns.
    fn owns(&self, pv: &PersistentVolume) -> bool {
        match pv.metadata.annotation(names::ANN_PROVISIONED_BY) {
            Some(p) => p == self.config.driver,
            None => {
                pv.metadata.annotation(names::ANN_MIGRATED_TO) == Some(self.config.driver.as_str())
                    || pv
                        .spec
                        .csi
                        .as_ref()
                        .is_some_and(|c| c.driver == self.config.driver)
            }
        }
    }

    /// One volume of this provisioner's: its finalizer kept in step
    /// (B5.2), then, Released under Delete, its storage deleted (B5.3)
    /// unless it is still attached (B5.4).
    pub(super) fn sync_volume(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        let Some(pv) = self.volume(cx, &key.name) else {
            return;
        };
        let name = pv.name().to_string();
        if !self.owns(&pv) || !cx.idle(&name) {
            return;
        }
        if let Some(add) = self.finalizer_change(&pv) {
            let uid = pv.metadata.uid.clone();
            let (rv, call) = if add {
                let mut v = pv.clone();
                v.metadata
                    .add_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
                (
                    v.metadata.resource_version.clone(),
                    ApiCall::Update(Object::Pv(v)),
                )
            } else {
                // Whatever else changed: the other controllers write this
                // volume too as it goes. Made against no version, its
                // failure backs off (an update's conflict is retried at
                // once when a newer version is already here).
                let call = ApiCall::RemoveFinalizer {
                    key: key.clone(),
                    uid: uid.clone(),
                    finalizer: names::FINALIZER_EXTERNAL_PROVISIONER.into(),
                };
                (String::new(), call)
            };
            self.api(cx, Call::Finalizer { pv: name, uid, rv }, call);
            return;
        }
        let careless = self
            .config
            .plant
            .is(crate::plant::Plant::DeleteReleasedRetain);
        let has = pv
            .metadata
            .has_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
        // Under --node-deployment, only what this node can reach.
        let reachable = self
            .config
            .node
            .as_ref()
            .is_none_or(|n| n.reaches(pv.spec.node_affinity.as_ref()));
        let should_delete = reachable
            && pv.phase() == PvPhase::Released
            && (pv.reclaim_policy() == ReclaimPolicy::Delete || careless)
            && (!pv.metadata.deleting() || has)
            && !self.deleted.contains(&name);
        if !should_delete {
            return;
        }
        if let Some(node) = self.attached_to(cx, &name) {
            cx.event(Event::warning(
                key.clone(),
                reason::VOLUME_FAILED_DELETE,
                format!("persistentvolume {name} is still attached to node {node}"),
            ));
            cx.fail(name);
            return;
        }
        let Some(handle) = pv.spec.csi.as_ref().map(|c| c.volume_handle.clone()) else {
            return;
        };
        let secrets = match self.deletion_secret(cx, &pv) {
            Ok(None) => driver::Secrets::default(),
            Ok(Some(secret)) => match self.deletion_credentials.remove(&name) {
                Some(data) => data,
                None => return self.get_deletion_secret(cx, name, secret),
            },
            Err(e) => {
                cx.event(Event::warning(
                    key.clone(),
                    reason::VOLUME_FAILED_DELETE,
                    e.to_string(),
                ));
                cx.fail(name);
                return;
            }
        };
        let call = Request::DeleteVolume(driver::DeleteVolume {
            volume_id: handle,
            secrets,
        });
        self.csi(cx, Call::Delete { pv: name }, call);
    }

    /// B5.2: whether the provisioner's finalizer must be added (true) or
    /// removed (false): added to a bound volume under Delete, removed
    /// under any other policy, and removed once the PV object is being
    /// deleted after DeleteVolume removed its storage.
    fn finalizer_change(&self, pv: &PersistentVolume) -> Option<bool> {
        let policy = pv.reclaim_policy();
        let has = pv
            .metadata
            .has_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
        if !pv.metadata.deleting()
            && pv.phase() == PvPhase::Bound
            && policy == ReclaimPolicy::Delete
            && !has
        {
            return Some(true);
        }
        let deleted = pv.metadata.deleting()
            && pv.phase() == PvPhase::Released
            && self.deleted.contains(pv.name());
        (has && (policy != ReclaimPolicy::Delete || deleted)).then_some(false)
    }

    /// B5.4: the node a volume is still attached to, if any.
    fn attached_to(&self, cx: &Cx<Self>, volume: &str) -> Option<String> {
        cx.cache()
            .of_kind(Kind::VolumeAttachment)
            .find_map(|o| match o {
                Object::Va(va) if va.pv_name() == volume => Some(va.spec.node_name.clone()),
                _ => None,
            })
    }

    pub(super) fn deleted_volume(&mut self, cx: &mut Cx<Self>, name: &str, result: CsiResult) {
        let key = ObjectKey::new(Kind::PersistentVolume, "", name);
        match result {
            Ok(_) => {
                cx.succeed(&name.to_string());
                self.deleted.insert(name.to_string());
                let uid = cx
                    .cache()
                    .get(&key)
                    .map(|o| o.meta().uid.clone())
                    .unwrap_or_default();
                self.api(
                    cx,
                    Call::DeletePvObject {
                        pv: name.to_string(),
                        uid,
                    },
                    ApiCall::Delete(key),
                );
            }
            Err(e) => {
                cx.event(Event::warning(
                    key,
                    reason::VOLUME_FAILED_DELETE,
                    e.go_error(),
                ));
                cx.fail(name.to_string());
            }
        }
    }
}
