//! B5: finalizers on owned volumes, and deletion of Released volumes whose
//! policy is Delete.

use super::*;

impl Provisioner {
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

    pub(super) fn sync_volume(&mut self, key: &ObjectKey) {
        let Some(pv) = self.volume(&key.name) else {
            return;
        };
        let name = pv.name().to_string();
        if !self.owns(&pv) || self.busy.contains(&name) || self.cx.waiting(&name) {
            return;
        }
        let policy = pv.reclaim_policy();
        let has = pv
            .metadata
            .has_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
        // B5.2: finalizer maintenance.
        if !pv.metadata.deleting()
            && pv.phase() == PvPhase::Bound
            && policy == ReclaimPolicy::Delete
            && !has
        {
            let mut v = pv.clone();
            v.metadata
                .add_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
            let (uid, rv) = (
                pv.metadata.uid.clone(),
                pv.metadata.resource_version.clone(),
            );
            self.api(
                Call::Finalizer { pv: name, uid, rv },
                ApiCall::Update(Object::Pv(v)),
            );
            return;
        }
        if has && policy != ReclaimPolicy::Delete {
            let mut v = pv.clone();
            v.metadata
                .remove_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
            let (uid, rv) = (
                pv.metadata.uid.clone(),
                pv.metadata.resource_version.clone(),
            );
            self.api(
                Call::Finalizer { pv: name, uid, rv },
                ApiCall::Update(Object::Pv(v)),
            );
            return;
        }
        // The PV object was deleted after DeleteVolume: drop our finalizer.
        if pv.metadata.deleting()
            && has
            && pv.phase() == PvPhase::Released
            && self.deleted.contains(&name)
        {
            let mut v = pv.clone();
            v.metadata
                .remove_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER);
            let (uid, rv) = (
                pv.metadata.uid.clone(),
                pv.metadata.resource_version.clone(),
            );
            self.api(
                Call::Finalizer { pv: name, uid, rv },
                ApiCall::Update(Object::Pv(v)),
            );
            return;
        }
        // B5.3
        let careless = self
            .config
            .plant
            .is(crate::plant::Plant::DeleteReleasedRetain);
        let should_delete = pv.phase() == PvPhase::Released
            && (policy == ReclaimPolicy::Delete || careless)
            && (!pv.metadata.deleting() || has)
            && !self.deleted.contains(&name);
        if !should_delete {
            return;
        }
        // B5.4: never while attached.
        let attached = self
            .cx
            .cache
            .of_kind(Kind::VolumeAttachment)
            .find_map(|o| match o {
                Object::Va(va) if va.pv_name() == name => Some(va.spec.node_name.clone()),
                _ => None,
            });
        if let Some(node) = attached {
            self.cx.event(Event::warning(
                key.clone(),
                reason::VOLUME_FAILED_DELETE,
                format!("persistentvolume {name} is still attached to node {node}"),
            ));
            self.cx.fail(name);
            return;
        }
        let Some(handle) = pv.spec.csi.as_ref().map(|c| c.volume_handle.clone()) else {
            return;
        };
        let call = Request::DeleteVolume(driver::DeleteVolume {
            volume_id: handle,
            secrets: driver::Secrets::default(),
        });
        self.csi(Call::Delete { pv: name }, call);
    }

    pub(super) fn deleted_volume(&mut self, name: &str, result: CsiResult) {
        let key = ObjectKey::new(Kind::PersistentVolume, "", name);
        match result {
            Ok(_) => {
                self.cx.backoff.succeed(&name.to_string());
                self.deleted.insert(name.to_string());
                let uid = self
                    .cx
                    .cache
                    .get(&key)
                    .map(|o| o.meta().uid.clone())
                    .unwrap_or_default();
                self.api(
                    Call::DeletePvObject {
                        pv: name.to_string(),
                        uid,
                    },
                    ApiCall::Delete(key),
                );
            }
            Err(e) => {
                self.cx.event(Event::warning(
                    key,
                    reason::VOLUME_FAILED_DELETE,
                    e.go_error(),
                ));
                self.cx.fail(name.to_string());
            }
        }
    }
}
