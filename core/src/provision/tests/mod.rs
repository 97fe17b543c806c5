//! Scenario tests of the provisioner, named after the SEMANTICS.md rules.

use super::*;
use crate::control::Input;
use crate::control::rig::Rig;
use crate::machine::Machine;

mod attributes;
mod node;
mod secrets;

const DRIVER: &str = "volplane.csi.io";

fn rig() -> Rig<Provisioner> {
    let mut r = Rig::new(Provisioner::new(ProvisionerConfig::new(DRIVER)));
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) => Ok(Response::Volume(driver::Volume {
            volume_id: format!("vol-{}", c.name),
            capacity_bytes: c.capacity.required_bytes,
            volume_context: [("kind".to_string(), "block".to_string())].into(),
            accessible_topology: vec![],
            content_source: c.content_source.clone(),
        })),
        Request::DeleteVolume(_) => Ok(Response::Empty),
        other => Err(Status::unimplemented(other.method())),
    });
    r
}

/// The driver's answer to CreateVolume: `vol-<name>`, the size asked.
fn created(c: &driver::CreateVolume) -> crate::control::CsiResult {
    Ok(Response::Volume(driver::Volume {
        volume_id: format!("vol-{}", c.name),
        capacity_bytes: c.capacity.required_bytes,
        volume_context: Default::default(),
        accessible_topology: vec![],
        content_source: c.content_source.clone(),
    }))
}

fn class(r: &mut Rig<Provisioner>, params: &[(&str, &str)]) {
    let mut sc = StorageClass::new("fast", DRIVER);
    sc.parameters = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    sc.mount_options = vec!["noatime".into()];
    r.create(Object::Class(sc));
}

/// Node `name` as node-driver-registrar leaves it: labelled `key=zone`,
/// its CSINode listing the driver with that topology key.
fn registered_node(r: &mut Rig<Provisioner>, name: &str, key: &str, zone: &str) {
    let mut n = Node::new(name);
    n.metadata.labels.insert(key.into(), zone.into());
    r.create(Object::Node(n));
    let mut c = CsiNode::new(name);
    c.spec.drivers.push(CsiNodeDriver {
        name: DRIVER.into(),
        node_id: name.into(),
        topology_keys: vec![key.into()],
        allocatable: None,
    });
    r.create(Object::CsiNode(c));
}

fn claim(name: &str) -> PersistentVolumeClaim {
    let mut c = PersistentVolumeClaim::new("default", name);
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    c.spec.access_modes = vec![AccessMode::ReadWriteOnce];
    c.spec.storage_class_name = Some("fast".into());
    c.metadata
        .annotations
        .insert(names::ANN_STORAGE_PROVISIONER.into(), DRIVER.into());
    c
}

fn creates(r: &Rig<Provisioner>) -> Vec<&driver::CreateVolume> {
    r.csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::CreateVolume(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// The messages of the ProvisioningFailed events so far.
fn failures(r: &Rig<Provisioner>) -> Vec<&str> {
    r.events
        .iter()
        .filter(|e| e.reason == reason::PROVISIONING_FAILED)
        .map(|e| e.message.as_str())
        .collect()
}

fn pv(r: &Rig<Provisioner>, name: &str) -> Option<PersistentVolume> {
    r.get(Kind::PersistentVolume, "", name)
        .and_then(Object::as_pv)
        .cloned()
}

#[test]
fn b2_b3_an_annotated_claim_gets_a_volume_and_a_pv_named_pvc_uid() {
    let mut r = rig();
    class(
        &mut r,
        &[
            ("kind", "block"),
            ("csi.storage.k8s.io/fstype", "ext4"),
            ("csi.storage.k8s.io/node-stage-secret-name", "s"),
            ("csi.storage.k8s.io/node-stage-secret-namespace", "storage"),
        ],
    );
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let name = format!("pvc-{}", c.metadata.uid);
    let calls = creates(&r);
    assert_eq!(calls.len(), 1);
    let req = calls[0];
    assert_eq!(req.name, name, "B2.1");
    assert_eq!(req.capacity.required_bytes, 1 << 30, "B2.2");
    assert_eq!(
        req.parameters,
        [("kind".to_string(), "block".to_string())].into(),
        "B2.6: prefixed parameters stripped"
    );
    assert_eq!(req.capabilities.len(), 1);
    assert_eq!(
        req.capabilities[0].access_mode,
        driver::AccessMode::SingleNodeWriter
    );
    assert!(
        matches!(&req.capabilities[0].access_type, driver::AccessType::Mount { fs_type, mount_flags, .. } if fs_type == "ext4" && mount_flags == &["noatime".to_string()])
    );

    let v = pv(&r, &name).expect("B3: the PV is created");
    let csi = v.spec.csi.as_ref().unwrap();
    assert_eq!(csi.volume_handle, format!("vol-{name}"));
    assert_eq!(csi.fs_type, "ext4");
    assert!(
        csi.volume_attributes
            .contains_key(names::ATTR_PROVISIONER_IDENTITY)
    );
    assert_eq!(v.capacity().unwrap().bytes(), 1 << 30);
    assert_eq!(v.spec.claim_ref.as_ref().unwrap().uid, c.metadata.uid);
    assert_eq!(
        v.metadata.annotation(names::ANN_PROVISIONED_BY),
        Some(DRIVER)
    );
    assert!(
        v.metadata
            .has_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER),
        "B3.3"
    );
    assert_eq!(
        v.reclaim_policy(),
        ReclaimPolicy::Delete,
        "the class default"
    );
    assert_eq!(v.class(), "fast");
    assert_eq!(v.status.phase, None, "B3.3: the binder sets the phase");
    assert_eq!(
        r.reasons(),
        vec![reason::PROVISIONING, reason::PROVISIONING_SUCCEEDED]
    );
    assert_eq!(
        r.events[0].message,
        "External provisioner is provisioning volume for claim \"default/data\""
    );

    r.machine
        .handle(r.now, Input::Watch(Watch::Applied(Object::Pvc(c).into())));
    r.run();
    assert_eq!(
        creates(&r).len(),
        1,
        "B1.5: an existing PV stops provisioning"
    );
}

#[test]
fn b1_2_b1_3_only_annotated_claims_and_waiting_claims_with_a_node() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut other = claim("other");
    other
        .metadata
        .annotations
        .insert(names::ANN_STORAGE_PROVISIONER.into(), "someone.else".into());
    r.create(Object::Pvc(other));
    assert!(creates(&r).is_empty());

    let mut sc = StorageClass::new("late", DRIVER);
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    r.create(Object::Class(sc));
    let mut c = claim("late");
    c.spec.storage_class_name = Some("late".into());
    let Object::Pvc(c) = r.create(Object::Pvc(c)) else {
        unreachable!()
    };
    assert!(creates(&r).is_empty(), "B1.3: no selected node yet");
    let mut c = c;
    c.metadata
        .annotations
        .insert(names::ANN_SELECTED_NODE.into(), "node-a".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    assert_eq!(creates(&r).len(), 1);
}

#[test]
fn nothing_is_kept_of_a_claim_once_it_is_gone() {
    let mut r = rig();
    class(&mut r, &[("kind", "block")]);
    let mut ours = r.create(Object::Pvc(claim("data")));
    let mut other = claim("other");
    other.spec.storage_class_name = Some("someone-elses".into());
    let mut other = r.create(Object::Pvc(other));
    assert!(pv(&r, &format!("pvc-{}", ours.meta().uid)).is_some());
    assert!(
        !r.machine.controller().retry.is_empty(),
        "a claim synced and not provisioned is remembered while it is there"
    );
    for o in [&mut ours, &mut other] {
        let key = r.get(o.kind(), "default", &o.meta().name).unwrap().key();
        r.user(ApiCall::Delete(key));
    }
    assert_eq!(r.get(Kind::PersistentVolumeClaim, "default", "data"), None);
    let kept = r.machine.controller();
    assert!(kept.retry.is_empty(), "{:?}", kept.retry);
    assert!(kept.provisioning.is_empty() && kept.credentials.is_empty());
}

#[test]
fn b2_6_an_unknown_prefixed_parameter_is_a_final_error() {
    let mut r = rig();
    class(&mut r, &[("csi.storage.k8s.io/fsgroup", "x")]);
    r.create(Object::Pvc(claim("data")));
    assert!(creates(&r).is_empty());
    assert_eq!(r.reasons(), vec![reason::PROVISIONING_FAILED]);
    assert!(r.events[0].message.contains("csi.storage.k8s.io/fsgroup"));
}

#[test]
fn b1_7_a_claim_selector_is_not_supported() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut c = claim("data");
    c.spec.selector = Some(LabelSelector::default());
    r.create(Object::Pvc(c));
    assert!(creates(&r).is_empty());
    assert_eq!(r.events[0].message, "claim Selector is not supported");
}

#[test]
fn b4_5_a_timed_out_create_keeps_going_after_the_claim_is_deleted() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut first = true;
    r.answer_csi(move |call| match call {
        Request::CreateVolume(c) if first => {
            first = false;
            let _ = c;
            Err(Status::new(
                Code::DeadlineExceeded,
                "context deadline exceeded",
            ))
        }
        Request::CreateVolume(c) => created(c),
        _ => Ok(Response::Empty),
    });
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    assert!(r.reasons().contains(&reason::PROVISIONING_FAILED));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    r.advance(2_000);
    let calls = creates(&r);
    assert_eq!(calls.len(), 2, "retried with the same request");
    assert_eq!(calls[0], calls[1]);
    assert!(
        pv(&r, &format!("pvc-{}", c.metadata.uid)).is_some(),
        "the volume is recorded, not leaked"
    );
}

/// A timed-out create whose retry then fails for good (RESOURCE_EXHAUSTED,
/// no selected node) still goes on with the same request while the claim
/// is there: the first attempt may have made the volume, and a rebuilt
/// request (the class changed meanwhile, say) would never match it — a
/// strict driver answers ALREADY_EXISTS for ever (found by the simulator:
/// seed 14796, where the nodes' topology changed between the attempts).
#[test]
fn b4_5_a_final_error_after_a_timeout_keeps_the_same_request() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut answers = vec![Code::DeadlineExceeded, Code::ResourceExhausted];
    r.answer_csi(move |call| match call {
        Request::CreateVolume(_) if !answers.is_empty() => {
            Err(Status::new(answers.remove(0), "injected"))
        }
        Request::CreateVolume(c) => created(c),
        _ => Ok(Response::Empty),
    });
    r.create(Object::Pvc(claim("data")));
    // The class changes between the attempts: a rebuilt request would differ.
    let mut sc = StorageClass::new("fast", DRIVER);
    sc.parameters.insert("type".into(), "other".into());
    r.user(ApiCall::Update(Object::Class(sc)));
    r.advance(10_000);
    let calls = creates(&r);
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls.iter().all(|c| *c == calls[0]),
        "the same request throughout"
    );
}

/// A claim deleted while its create runs on in the background, and made
/// again under the same name with another class: the volume's PV is made
/// for the old incarnation, with its class and its UID, not the new one's
/// (found by the simulator: seed 1967 of `volplane sim`).
#[test]
fn b4_5_a_background_create_is_recorded_for_its_own_claim_not_a_namesake() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut first = true;
    r.answer_csi(move |call| match call {
        Request::CreateVolume(_) if first => {
            first = false;
            Err(Status::new(
                Code::DeadlineExceeded,
                "context deadline exceeded",
            ))
        }
        Request::CreateVolume(c) => created(c),
        _ => Ok(Response::Empty),
    });
    let Object::Pvc(old) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    let mut again = claim("data");
    again.spec.storage_class_name = Some("slow".into());
    let Object::Pvc(new) = r.create(Object::Pvc(again)) else {
        unreachable!()
    };
    assert_ne!(new.metadata.uid, old.metadata.uid);
    r.advance(2_000);
    let v = pv(&r, &format!("pvc-{}", old.metadata.uid)).expect("the volume is recorded");
    assert_eq!(v.class(), "fast", "the class it was made under");
    assert_eq!(
        v.spec.claim_ref.as_ref().map(|c| c.uid.as_str()),
        Some(old.metadata.uid.as_str())
    );
}

/// external-provisioner: a volume created smaller than asked is deleted
/// (CleanupVolume) and the claim provisioned again after a backoff; a
/// failed deletion is reported and tried again before any new create.
#[test]
fn b3_2_a_volume_created_too_small_is_deleted_and_provisioning_retried() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut answers = 0;
    r.answer_csi(move |call| match call {
        Request::CreateVolume(c) => {
            answers += 1;
            let mut v = created(c)?;
            if answers == 1
                && let Response::Volume(v) = &mut v
            {
                v.capacity_bytes = 1 << 20;
            }
            Ok(v)
        }
        Request::DeleteVolume(_) if answers == 1 => {
            answers += 1;
            Err(Status::new(Code::Unavailable, "driver restarting"))
        }
        _ => Ok(Response::Empty),
    });
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let messages = failures(&r);
    assert_eq!(
        messages,
        vec![
            "failed to provision volume with StorageClass \"fast\": created volume capacity 1048576 less than requested capacity 1073741824",
            "cleanup of volume vol-pvc-uid-2 failed, deleting it again later: rpc error: code = Unavailable desc = driver restarting",
        ]
    );
    r.advance(10_000);
    let calls: Vec<&str> = r.csi_calls.iter().map(|(_, c)| c.method()).collect();
    assert_eq!(
        calls,
        vec![
            "CreateVolume",
            "DeleteVolume",
            "DeleteVolume",
            "CreateVolume"
        ],
        "deleted again before the next create"
    );
    let pv = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("provisioned at last");
    assert_eq!(pv.capacity().map(|q| q.bytes()), Some(1 << 30));
}

#[test]
fn b4_4_resource_exhausted_on_the_selected_node_reschedules() {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.topology = true;
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(|_| Err(Status::new(Code::ResourceExhausted, "no space in zone")));
    let mut sc = StorageClass::new("fast", DRIVER);
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    r.create(Object::Class(sc));
    registered_node(&mut r, "node-a", "topology.volplane.io/zone", "z1");
    let mut c = claim("data");
    c.metadata
        .annotations
        .insert(names::ANN_SELECTED_NODE.into(), "node-a".into());
    r.create(Object::Pvc(c));
    let calls = creates(&r);
    assert_eq!(
        &calls[0].accessibility.as_ref().unwrap().requisite[0]["topology.volplane.io/zone"],
        "z1"
    );
    let Some(Object::Pvc(after)) = r.get(Kind::PersistentVolumeClaim, "default", "data") else {
        panic!()
    };
    assert!(
        !after.metadata.has_annotation(names::ANN_SELECTED_NODE),
        "selected-node dropped"
    );
}

fn released(r: &mut Rig<Provisioner>, policy: ReclaimPolicy) -> PersistentVolume {
    let mut v = PersistentVolume::new("pvc-1");
    v.spec.persistent_volume_reclaim_policy = Some(policy);
    v.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    v.metadata
        .annotations
        .insert(names::ANN_PROVISIONED_BY.into(), DRIVER.into());
    v.metadata
        .finalizers
        .push(names::FINALIZER_EXTERNAL_PROVISIONER.into());
    v.status.phase = Some(PvPhase::Released);
    let Object::Pv(v) = r.create(Object::Pv(v)) else {
        unreachable!()
    };
    v
}

#[test]
fn b5_a_released_delete_volume_is_deleted_then_its_pv() {
    let mut r = rig();
    released(&mut r, ReclaimPolicy::Delete);
    assert!(
        matches!(&r.csi_calls[..], [(None, Request::DeleteVolume(d))] if d.volume_id == "vol-1")
    );
    assert!(
        pv(&r, "pvc-1").is_none(),
        "B5.5: PV object deleted and finalizer removed"
    );
}

#[test]
fn b5_4_a_volume_still_attached_is_not_deleted() {
    let mut r = rig();
    r.create(Object::Va(VolumeAttachment::new(
        "csi-x", DRIVER, "node-a", "pvc-1",
    )));
    released(&mut r, ReclaimPolicy::Delete);
    assert!(r.csi_calls.is_empty());
    assert_eq!(r.events[0].reason, reason::VOLUME_FAILED_DELETE);
    assert_eq!(
        r.events[0].message,
        "persistentvolume pvc-1 is still attached to node node-a"
    );
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeAttachment,
        "",
        "csi-x",
    )));
    r.advance(2_000);
    assert_eq!(r.csi_calls.len(), 1, "deleted once detached");
}

#[test]
fn b5_2_retain_volumes_lose_the_finalizer_and_are_never_deleted() {
    let mut r = rig();
    released(&mut r, ReclaimPolicy::Retain);
    assert!(r.csi_calls.is_empty());
    let v = pv(&r, "pvc-1").unwrap();
    assert!(
        !v.metadata
            .has_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER)
    );
}

#[test]
fn b5_5_a_failed_delete_is_reported_and_retried_with_backoff() {
    let mut r = rig();
    let mut fail = true;
    r.answer_csi(move |_| {
        if fail {
            fail = false;
            Err(Status::internal("backend down"))
        } else {
            Ok(Response::Empty)
        }
    });
    released(&mut r, ReclaimPolicy::Delete);
    assert_eq!(r.reasons(), vec![reason::VOLUME_FAILED_DELETE]);
    assert!(pv(&r, "pvc-1").is_some());
    r.advance(500);
    assert_eq!(r.csi_calls.len(), 1, "waits out the backoff");
    r.advance(1_000);
    assert_eq!(r.csi_calls.len(), 2);
    assert!(pv(&r, "pvc-1").is_none());
}

mod rules;
mod sources;

/// Properties under faults (see `control::chaos`).
mod under_faults {
    use std::collections::BTreeSet;

    use quickcheck::TestResult;

    use super::*;
    use crate::control::ApiCall;
    use crate::control::chaos::{Chaos, checker};

    fn world(seed: u64, retain: bool) -> Chaos<Provisioner> {
        let mut c = Chaos::new(
            seed,
            || Provisioner::new(ProvisionerConfig::new(DRIVER)),
            |_, call| match call {
                Request::CreateVolume(c) => created(c),
                Request::DeleteVolume(_) => Ok(Response::Empty),
                other => Err(Status::unimplemented(other.method())),
            },
        );
        let mut sc = StorageClass::new("fast", DRIVER);
        sc.reclaim_policy = Some(if retain {
            ReclaimPolicy::Retain
        } else {
            ReclaimPolicy::Delete
        });
        c.user(ApiCall::Create(Object::Class(sc)));
        c
    }

    /// The volumes the driver holds, as its calls left them.
    fn storage(c: &Chaos<Provisioner>) -> BTreeSet<String> {
        let mut held = BTreeSet::new();
        for r in c.csi.iter().filter(|r| r.done) {
            match &r.call {
                Request::CreateVolume(v) => {
                    held.insert(format!("vol-{}", v.name));
                }
                Request::DeleteVolume(d) => {
                    held.remove(&d.volume_id);
                }
                _ => {}
            }
        }
        held
    }

    fn volumes(c: &Chaos<Provisioner>) -> Vec<PersistentVolume> {
        c.store
            .objects()
            .filter_map(|o| o.as_pv().cloned())
            .collect()
    }

    /// What the PV controller does to a volume whose claim is gone.
    fn release(c: &mut Chaos<Provisioner>) {
        let claims: BTreeSet<String> = c
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pvc(p) => Some(p.metadata.uid.clone()),
                _ => None,
            })
            .collect();
        for mut pv in volumes(c) {
            let gone = pv
                .spec
                .claim_ref
                .as_ref()
                .is_some_and(|r| !claims.contains(&r.uid));
            if gone && pv.phase() != PvPhase::Released {
                pv.status.phase = Some(PvPhase::Released);
                c.user(ApiCall::UpdateStatus(Object::Pv(pv)));
            }
        }
    }

    /// One step of a generated workload: `what` 0 creates the claim `x`
    /// names (when not there), 1 deletes it (when there), 2 releases the
    /// volumes of deleted claims, anything else lets the world step.
    fn play(
        c: &mut Chaos<Provisioner>,
        live: &mut BTreeSet<String>,
        what: u8,
        x: u8,
    ) -> Result<(), String> {
        let name = format!("c{}", x % 3);
        match what {
            0 if live.insert(name.clone()) => {
                c.user(ApiCall::Create(Object::Pvc(claim(&name))));
            }
            1 if live.remove(&name) => {
                c.user(ApiCall::Delete(ObjectKey::new(
                    Kind::PersistentVolumeClaim,
                    "default",
                    &name,
                )));
            }
            2 => release(c),
            _ => c.step(x).map_err(|e| e.to_string())?,
        }
        Ok(())
    }

    /// No DeleteVolume under Retain; once faults stop, every claim not being
    /// deleted has its PV, every PV its storage, and (under Delete) released
    /// volumes go with their storage. Without restarts nothing leaks; a
    /// restart may forget a volume whose claim was deleted while it was
    /// being created (B4.5: "claims in progress" live in memory, upstream too).
    fn provision(seed: u64, retain: bool, restarts: bool, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world(seed, retain);
        c.restarts = restarts;
        let mut live = BTreeSet::new();
        for (what, x) in steps {
            if let Err(e) = play(&mut c, &mut live, what % 8, x) {
                return TestResult::error(e);
            }
            for r in &c.csi {
                if let Request::DeleteVolume(d) = &r.call
                    && retain
                {
                    return TestResult::error(format!("DeleteVolume {} under Retain", d.volume_id));
                }
            }
        }
        for _ in 0..2 {
            if let Err(e) = c.settle() {
                return TestResult::error(e.to_string());
            }
            release(&mut c);
        }
        if let Err(e) = c.settle() {
            return TestResult::error(e.to_string());
        }
        let held = storage(&c);
        let handles: BTreeSet<String> = volumes(&c)
            .iter()
            .filter_map(|pv| pv.spec.csi.as_ref().map(|s| s.volume_handle.clone()))
            .collect();
        let leak_free = if restarts {
            handles.is_subset(&held)
        } else {
            held == handles
        };
        if !leak_free {
            return TestResult::error(format!("storage {held:?} but PVs for {handles:?}"));
        }
        for o in c.store.objects() {
            if let Object::Pvc(claim) = o
                && !claim.metadata.deleting()
            {
                let has = volumes(&c).iter().any(|pv| {
                    pv.spec
                        .claim_ref
                        .as_ref()
                        .is_some_and(|r| r.uid == claim.metadata.uid)
                });
                if !has {
                    return TestResult::error(format!("claim {} has no PV", claim.metadata.name));
                }
            }
        }
        TestResult::passed()
    }

    const TOKEN: &str = "qu1ckch3ck-t0ken";

    /// [`world`] whose class names `default/creds` as its provisioner
    /// Secret, which holds [`TOKEN`].
    fn world_with_secret(seed: u64) -> Chaos<Provisioner> {
        let mut c = world(seed, false);
        let mut sc = StorageClass::new("fast", DRIVER);
        sc.reclaim_policy = Some(ReclaimPolicy::Delete);
        for (k, v) in [
            ("csi.storage.k8s.io/provisioner-secret-name", "creds"),
            ("csi.storage.k8s.io/provisioner-secret-namespace", "default"),
        ] {
            sc.parameters.insert(k.into(), v.into());
        }
        c.user(ApiCall::Update(Object::Class(sc)));
        let secret = Secret::new("default", "creds", &[("token", TOKEN)]);
        c.user(ApiCall::Create(Object::Secret(secret)));
        c
    }

    /// Secret data goes into CreateVolume and DeleteVolume and nowhere
    /// else: never into an API object the provisioner writes, never into
    /// the machine's `Debug`, whatever the faults and restarts; and every
    /// call that went out carried it.
    fn secret_data_stays_in_the_csi_calls(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world_with_secret(seed);
        c.restarts = true;
        let mut live = BTreeSet::new();
        for (what, x) in steps {
            if let Err(e) = play(&mut c, &mut live, what % 6, x) {
                return TestResult::error(e);
            }
            if format!("{:?}", c.machine).contains(TOKEN) {
                return TestResult::error("the provisioner's Debug shows the Secret data");
            }
            let written = c
                .store
                .objects()
                .filter(|o| o.kind() != Kind::Secret)
                .find(|o| {
                    format!("{o:?}").contains(TOKEN)
                        || serde_json::to_string(o).is_ok_and(|j| j.contains(TOKEN))
                });
            if let Some(o) = written {
                return TestResult::error(format!("{} carries the Secret data", o.key()));
            }
        }
        for r in &c.csi {
            let secrets = match &r.call {
                Request::CreateVolume(v) => &v.secrets,
                Request::DeleteVolume(d) => &d.secrets,
                _ => continue,
            };
            if secrets.0.get("token").map(String::as_str) != Some(TOKEN) {
                return TestResult::error(format!("{} went without the Secret", r.call.method()));
            }
        }
        TestResult::passed()
    }

    #[test]
    fn secret_data_reaches_only_the_csi_calls_under_faults() {
        checker(200, 60)
            .quickcheck(secret_data_stays_in_the_csi_calls as fn(u64, Vec<(u8, u8)>) -> TestResult);
    }

    #[test]
    fn provisioning_stays_safe_and_leaks_nothing_under_faults() {
        checker(200, 60).quickcheck(provision as fn(u64, bool, bool, Vec<(u8, u8)>) -> TestResult);
    }
}

/// B4.2 (external-provisioner's ProvisioningFailed classes): transient codes
/// keep the attempt going in the background; RESOURCE_EXHAUSTED reschedules
/// only a topology-aware claim with a selected node; the rest are final.
#[test]
fn b4_2_failures_are_classified_as_upstream_does() {
    use FailureClass::*;
    for code in [
        Code::DeadlineExceeded,
        Code::Unavailable,
        Code::Cancelled,
        Code::Aborted,
    ] {
        assert_eq!(classify(code, false, false), InBackground, "{code:?}");
    }
    assert_eq!(classify(Code::ResourceExhausted, true, true), Reschedule);
    assert_eq!(classify(Code::ResourceExhausted, true, false), Finished);
    assert_eq!(classify(Code::ResourceExhausted, false, true), Finished);
    assert_eq!(classify(Code::InvalidArgument, true, true), Finished);
}

/// B4.2: an INVALID_ARGUMENT is the infeasible error's message; another
/// final error names the class and the driver's error; a claim whose class
/// appears later is provisioned at its next try.
#[test]
fn b4_2_an_infeasible_create_says_so_and_a_late_class_is_used() {
    let mut r = rig();
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) if c.name.ends_with("uid-1") => Err(Status::new(
            Code::InvalidArgument,
            "size must be a multiple of 4Ki",
        )),
        Request::CreateVolume(_) => Err(Status::new(Code::Internal, "disk on fire")),
        _ => Ok(Response::Empty),
    });
    r.create(Object::Pvc(claim("infeasible")));
    assert!(creates(&r).is_empty(), "provisioned without a class");
    class(&mut r, &[]);
    r.create(Object::Pvc(claim("broken")));
    r.advance(5_000);
    let messages = failures(&r);
    assert!(
        messages.contains(
            &"Volume provisioning failed with infeasible error. Retries will be delayed."
        ),
        "{messages:?}"
    );
    assert!(
        messages.contains(
            &"failed to provision volume with StorageClass \"fast\": rpc error: code = Internal desc = disk on fire"
        ),
        "{messages:?}"
    );
}
