//! The resizer's modify half: external-resizer's modify controller. A bound
//! claim that names another VolumeAttributesClass than the one its volume
//! has (`status.currentVolumeAttributesClassName`) has its volume modified
//! with the new class's parameters (ControllerModifyVolume); then the PV
//! names the class, and last the claim's status says it has it.
//!
//! `status.modifyVolumeStatus` says where a change stands, as upstream
//! writes it: `Pending` (the class does not exist), `InProgress` (being
//! modified, or failed and retried with backoff), `Infeasible` (the driver
//! refused the parameters as invalid: retried once per longest retry
//! delay, or at once when the claim names another class). A call whose
//! outcome is unknown (a timeout, UNAVAILABLE…) is carried on to the class
//! it was for, even if the claim names another meanwhile, so the volume is
//! never left half-way between two classes unbeknown.

use super::*;
use crate::control::secrets;

/// The claim condition while its volume is modified.
pub const MODIFYING_VOLUME: &str = "ModifyingVolume";
/// The claim condition after a modify failed, with the CSI code as reason.
pub const MODIFY_VOLUME_ERROR: &str = "ModifyVolumeError";
/// `modifyVolumeStatus.status`: the class does not exist (yet).
pub const PENDING: &str = "Pending";
/// `modifyVolumeStatus.status`: the volume is being modified.
pub const IN_PROGRESS: &str = "InProgress";
/// `modifyVolumeStatus.status`: the driver refused the class's parameters.
pub const INFEASIBLE: &str = "Infeasible";

/// The claim with its modify status set to `status` (upstream's
/// markControllerModifyVolumeStatus): unless Pending, the
/// `ModifyingVolume` condition says how it goes, with a
/// `ModifyVolumeError` condition after a failure; the target becomes the
/// claim's class when a modify starts.
fn with_modify_status(
    claim: &PersistentVolumeClaim,
    status: &str,
    error: Option<&crate::Status>,
) -> PersistentVolumeClaim {
    let mut c = claim.clone();
    let spec = claim.volume_attributes_class().unwrap_or("").to_string();
    let s = c.status.modify_volume_status.get_or_insert_default();
    s.status = status.into();
    if status == PENDING {
        return c;
    }
    let mut conditions = Vec::new();
    let message = match error {
        None => {
            s.target_volume_attributes_class_name = spec.clone();
            format!("Modifying volume to {spec:?} is in progress.")
        }
        Some(e) => {
            let target = &s.target_volume_attributes_class_name;
            let message = if e.is_final() {
                format!("Modifying volume to {target:?} failed. Waiting for retry.")
            } else {
                format!("Modifying volume to {target:?} is still in progress.")
            };
            conditions.push(PvcCondition {
                type_: MODIFY_VOLUME_ERROR.into(),
                status: "True".into(),
                reason: e.code.go_name().into(),
                message: e.message.clone(),
            });
            message
        }
    };
    conditions.insert(
        0,
        PvcCondition {
            type_: MODIFYING_VOLUME.into(),
            status: "True".into(),
            reason: String::new(),
            message,
        },
    );
    merge_conditions(&mut c.status.conditions, conditions);
    c
}

/// Replaces the conditions of the types `new` has, in place, and appends
/// the rest (upstream's MergePVCConditions).
fn merge_conditions(old: &mut Vec<PvcCondition>, new: Vec<PvcCondition>) {
    for n in new {
        match old.iter_mut().find(|o| o.type_ == n.type_) {
            Some(o) => *o = n,
            None => old.push(n),
        }
    }
}

fn without_modify_conditions(c: &mut PersistentVolumeClaim) {
    c.status
        .conditions
        .retain(|x| x.type_ != MODIFYING_VOLUME && x.type_ != MODIFY_VOLUME_ERROR);
}

/// Why a claim's class cannot be used.
enum Unusable {
    /// No such class (yet): the claim waits, Pending.
    Missing(String),
    /// A class of another driver's.
    OtherDriver(String),
}

impl ResizeReconciler {
    /// The modify half's pass over a bound claim of this driver's; true
    /// when it put something in hand (the expand half then waits its turn).
    pub(super) fn sync_modify(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
    ) -> bool {
        if !self.config.modify {
            return false;
        }
        // A finished modify goes on at once to the class the claim names
        // now, if another: nothing else may come to wake it (the echo of
        // the last status write can arrive before the write's answer).
        if let Some((volume, target)) = self.modified.get(key).cloned() {
            if volume != pv.name() {
                self.modified.remove(key);
            } else if self.complete_modify(cx, key, claim, pv, &target) {
                return true;
            }
        }
        let spec = claim.volume_attributes_class().unwrap_or("");
        let current = claim
            .status
            .current_volume_attributes_class_name
            .as_deref()
            .unwrap_or("");
        let status = claim.status.modify_volume_status.clone();
        if status.is_none() && spec == current {
            self.uncertain.remove(key);
            self.slow.stop(key);
            return false;
        }
        if self.recently_infeasible(cx, key, claim) {
            return false;
        }
        let in_progress = status.as_ref().is_some_and(|s| s.status == IN_PROGRESS);
        if spec.is_empty() && !in_progress {
            return self.rolled_back(cx, key, claim);
        }
        // An outcome we do not know, or no class asked for: carry on to
        // the class the last call was for.
        if spec.is_empty() || (in_progress && self.uncertain.contains(key)) {
            let target = status.map(|s| s.target_volume_attributes_class_name);
            let Some(vac) = self.attributes_class(cx, key, claim, target.as_deref().unwrap_or(""))
            else {
                cx.fail(key.clone());
                return false;
            };
            return self.call_modify(cx, key, claim, pv, &vac);
        }
        let vac = match self.class_for(cx, claim, spec) {
            Ok(vac) => vac,
            Err(Unusable::OtherDriver(why)) => return self.refuse_class(cx, key, claim, spec, why),
            Err(Unusable::Missing(why)) => {
                let e = Event::warning(key.clone(), reason::VOLUME_MODIFY_FAILED, why);
                self.tell(cx, key, e);
                if status.is_none_or(|s| s.status != PENDING) {
                    let pending = with_modify_status(claim, PENDING, None);
                    self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(pending)));
                    return true;
                }
                return false;
            }
        };
        let started = status.is_some_and(|s| {
            s.status == IN_PROGRESS && s.target_volume_attributes_class_name == spec
        });
        if !started {
            let marked = with_modify_status(claim, IN_PROGRESS, None);
            self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(marked)));
            let msg = format!(
                "external resizer is modifying volume {} with vac {spec}",
                claim.metadata.name
            );
            self.tell(
                cx,
                key,
                Event::normal(key.clone(), reason::VOLUME_MODIFY, msg),
            );
            return true;
        }
        self.call_modify(cx, key, claim, pv, &vac)
    }

    /// The class `name` when it exists and is this driver's; otherwise a
    /// `VolumeModifyFailed` warning says why.
    fn attributes_class(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        name: &str,
    ) -> Option<VolumeAttributesClass> {
        match self.class_for(cx, claim, name) {
            Ok(vac) => Some(vac),
            Err(Unusable::Missing(why) | Unusable::OtherDriver(why)) => {
                let e = Event::warning(key.clone(), reason::VOLUME_MODIFY_FAILED, why);
                self.tell(cx, key, e);
                None
            }
        }
    }

    fn class_for(
        &self,
        cx: &Cx<Self>,
        claim: &PersistentVolumeClaim,
        name: &str,
    ) -> Result<VolumeAttributesClass, Unusable> {
        match cx.cache().find(Kind::VolumeAttributesClass, "", name) {
            Some(Object::AttributesClass(vac)) if vac.driver_name == self.config.driver => {
                Ok(vac.clone())
            }
            Some(Object::AttributesClass(vac)) => Err(Unusable::OtherDriver(format!(
                "VAC {name} referenced in PVC {} is for driver {} which does not match driver name {}",
                claim.metadata.name, vac.driver_name, self.config.driver
            ))),
            _ => Err(Unusable::Missing(format!("VAC {name:?} does not exist."))),
        }
    }

    /// The claim names a class of another driver's: its parameters are
    /// never sent to this one. The claim is Infeasible for that class (a
    /// `ModifyVolumeError` condition says why, as for a driver's
    /// INVALID_ARGUMENT), retried only slowly, until it names another.
    fn refuse_class(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        spec: &str,
        why: String,
    ) -> bool {
        let mut target = claim.clone();
        target
            .status
            .modify_volume_status
            .get_or_insert_default()
            .target_volume_attributes_class_name = spec.into();
        let e = crate::Status::invalid(why.clone());
        let marked = with_modify_status(&target, INFEASIBLE, Some(&e));
        self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(marked)));
        self.retry_slowly(cx, key);
        let e = Event::warning(key.clone(), reason::VOLUME_MODIFY_FAILED, why);
        self.tell(cx, key, e);
        true
    }

    /// An Infeasible claim is tried again only after the longest backoff
    /// (upstream's slowSet), or at once when it names another class.
    fn retry_slowly(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        let until = cx.now() + self.config.retry_max;
        self.slow.set(key.clone(), until);
        cx.hold(key.clone(), until);
    }

    /// The claim failed as Infeasible for the class it still names, and
    /// the slow retry's wait has not run out.
    fn recently_infeasible(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
    ) -> bool {
        let same_target = claim.status.modify_volume_status.as_ref().is_some_and(|s| {
            Some(s.target_volume_attributes_class_name.as_str()) == claim.volume_attributes_class()
        });
        if !same_target {
            self.slow.stop(key);
            return false;
        }
        self.slow.get(key).is_some_and(|until| until > cx.now())
    }

    /// The claim names no class again and nothing is in flight: the
    /// `ModifyingVolume` condition goes (`VolumeModifyCanceled`).
    fn rolled_back(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
    ) -> bool {
        if claim.condition(MODIFYING_VOLUME).is_none() {
            return false;
        }
        let e = Event::normal(
            key.clone(),
            reason::VOLUME_MODIFY_CANCELED,
            "Cancelled modify.",
        );
        self.tell(cx, key, e);
        let mut c = claim.clone();
        c.status.conditions.retain(|x| x.type_ != MODIFYING_VOLUME);
        self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(c)));
        true
    }

    /// ControllerModifyVolume of the claim's volume with `vac`'s
    /// parameters, once the Secret it needs (the PV's controller-modify
    /// annotations, else its controller-expand Secret) is read.
    fn call_modify(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        vac: &VolumeAttributesClass,
    ) -> bool {
        let Some(csi) = &pv.spec.csi else {
            return false;
        };
        let secret = match modify_secret(pv) {
            Ok(secret) => secret,
            Err(why) => {
                let e = Event::warning(key.clone(), reason::VOLUME_MODIFY_FAILED, why.to_string());
                self.tell(cx, key, e);
                cx.fail(key.clone());
                return false;
            }
        };
        let secrets = match secret {
            None => driver::Secrets::default(),
            Some(secret) => match self.modify_credentials.remove(key) {
                Some(data) => data,
                None => {
                    self.get_secret(cx, key, pv, secret, SecretFor::Modify);
                    return true;
                }
            },
        };
        let mut mutable_parameters: driver::Attributes =
            vac.parameters.clone().into_iter().collect();
        if self.config.extra_modify_metadata {
            mutable_parameters.insert(names::PARAM_PVC_NAME.into(), claim.metadata.name.clone());
            mutable_parameters.insert(
                names::PARAM_PVC_NAMESPACE.into(),
                claim.metadata.namespace.clone(),
            );
            mutable_parameters.insert(names::PARAM_PV_NAME.into(), pv.name().to_string());
        }
        let call = Request::ControllerModify(driver::ControllerModify {
            volume_id: csi.volume_handle.clone(),
            mutable_parameters,
            secrets,
        });
        let what = Call::Modify {
            claim: key.clone(),
            pv: pv.name().to_string(),
            target: vac.metadata.name.clone(),
        };
        cx.csi_holding([key.clone()], None, call, what);
        true
    }

    /// The volume has the class `target`: the PV names it first, then the
    /// claim's status (no modify status, no modify conditions, the class
    /// current). True while a write is in hand.
    fn complete_modify(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        target: &str,
    ) -> bool {
        if pv.spec.volume_attributes_class_name.as_deref() != Some(target) {
            let mut v = pv.clone();
            v.spec.volume_attributes_class_name = Some(target.to_string());
            self.api(cx, key, ApiCall::Update(Object::Pv(v)));
            return true;
        }
        let done = claim.status.modify_volume_status.is_none()
            && claim.status.current_volume_attributes_class_name.as_deref() == Some(target)
            && claim.condition(MODIFYING_VOLUME).is_none();
        if done {
            self.modified.remove(key);
            return false;
        }
        let mut c = claim.clone();
        c.status.modify_volume_status = None;
        c.status.current_volume_attributes_class_name = Some(target.to_string());
        without_modify_conditions(&mut c);
        let msg = format!(
            "external resizer modified volume {} with vac {target} successfully",
            claim.metadata.name
        );
        let e = Event::normal(key.clone(), reason::VOLUME_MODIFY_SUCCESSFUL, msg);
        self.tell(cx, key, e);
        self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(c)));
        true
    }

    /// ControllerModifyVolume answered.
    pub(super) fn modify_done(
        &mut self,
        cx: &mut Cx<Self>,
        claim: ObjectKey,
        pv: &str,
        target: String,
        result: CsiResult,
    ) {
        let planted = self
            .config
            .plant
            .is(crate::plant::Plant::ModifyIgnoresFailure);
        if !self.still_bound(cx, &claim, pv) {
            cx.mark(claim);
            return;
        }
        let done = (pv.to_string(), target.clone());
        match result {
            Err(_) if planted => {
                self.modified.insert(claim.clone(), done);
            }
            Ok(_) => {
                cx.succeed(&claim);
                self.uncertain.remove(&claim);
                self.slow.stop(&claim);
                self.modified.insert(claim.clone(), done);
            }
            Err(e) => self.modify_failed(cx, &claim, &target, &e),
        }
        cx.mark(claim);
    }

    /// A failed modify: a call that may still run leaves the claim
    /// uncertain (carried on to `target`); INVALID_ARGUMENT makes it
    /// Infeasible (retried slowly); the status says so, a
    /// `VolumeModifyFailed` warning too, and the claim backs off.
    fn modify_failed(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        target: &str,
        e: &crate::Status,
    ) {
        let mut msg = e.go_error();
        let mut status = IN_PROGRESS;
        if !e.is_final() {
            self.uncertain.insert(key.clone());
            msg.push_str(&format!(". Still modifying to VAC {target}"));
        } else {
            self.uncertain.remove(key);
            if e.code == crate::Code::InvalidArgument {
                status = INFEASIBLE;
            }
        }
        if let Some(Object::Pvc(c)) = cx.cache().get(key) {
            let marked = with_modify_status(c, status, Some(e));
            self.api(cx, key, ApiCall::UpdateStatus(Object::Pvc(marked)));
        }
        if status == INFEASIBLE {
            self.retry_slowly(cx, key);
        } else {
            cx.fail(key.clone());
        }
        let e = Event::warning(key.clone(), reason::VOLUME_MODIFY_FAILED, msg);
        self.tell(cx, key, e);
    }
}

/// The Secret ControllerModifyVolume uses: the PV's controller-modify
/// annotations when both are set, else its controller-expand Secret; an
/// error when the annotations name no valid Secret.
fn modify_secret(pv: &PersistentVolume) -> Result<Option<SecretReference>, secrets::SecretError> {
    let ann = |k| pv.metadata.annotation(k).filter(|v| !v.is_empty());
    match (
        ann(names::ANN_MODIFY_SECRET_NAME),
        ann(names::ANN_MODIFY_SECRET_NAMESPACE),
    ) {
        (Some(name), Some(namespace)) => match secrets::valid_ref(name, namespace) {
            Some(r) => Ok(Some(r)),
            None => Err(secrets::SecretError::AnnotationsRef {
                pv: pv.name().to_string(),
                name_key: names::ANN_MODIFY_SECRET_NAME,
                namespace_key: names::ANN_MODIFY_SECRET_NAMESPACE,
                name: name.to_string(),
                namespace: namespace.to_string(),
            }),
        },
        _ => match pv
            .spec
            .csi
            .as_ref()
            .and_then(|c| c.controller_expand_secret_ref.as_ref())
        {
            None => Ok(None),
            Some(secret) => secrets::pv_ref(pv.name(), "controllerExpandSecretRef", secret)
                .map(|r| Some(r.clone())),
        },
    }
}
