//! Scenario tests of pvc-protection and pv-protection (SEMANTICS A1.8).

use super::*;
use crate::control::rig::Rig;
use crate::control::{Effect, Input};
use crate::machine::Machine;
use crate::model::names::{FINALIZER_PV_PROTECTION, FINALIZER_PVC_PROTECTION};
use std::collections::BTreeMap;

fn claim_rig() -> Rig<Protection> {
    Rig::new(Protection::claims())
}

fn delete(r: &mut Rig<Protection>, kind: Kind, namespace: &str, name: &str) {
    r.user(ApiCall::Delete(ObjectKey::new(kind, namespace, name)));
}

fn claim(r: &Rig<Protection>, name: &str) -> Option<PersistentVolumeClaim> {
    match r.get(Kind::PersistentVolumeClaim, "default", name) {
        Some(Object::Pvc(c)) => Some(c.clone()),
        _ => None,
    }
}

#[test]
fn a1_8_every_claim_gets_the_pvc_protection_finalizer() {
    let mut r = claim_rig();
    r.create(Object::Pvc(PersistentVolumeClaim::new("default", "data")));
    assert_eq!(
        claim(&r, "data").unwrap().metadata.finalizers,
        vec![FINALIZER_PVC_PROTECTION.to_string()]
    );
}

#[test]
fn a1_8_a_claim_in_use_stays_terminating_until_its_last_pod_goes() {
    let mut r = claim_rig();
    r.create(Object::Pvc(PersistentVolumeClaim::new("default", "data")));
    r.create(Object::Pod(Pod::using_claim("default", "web-0", "data")));
    let mut running = Pod::using_claim("default", "web-1", "data");
    running.spec.node_name = Some("node-a".into());
    r.create(Object::Pod(running));
    r.create(Object::Pod(Pod::using_claim("other", "elsewhere", "data")));
    delete(&mut r, Kind::PersistentVolumeClaim, "default", "data");
    let c = claim(&r, "data").expect("a claim in use was removed");
    assert!(c.metadata.deleting(), "Terminating");
    assert_eq!(r.machine.users(&c), vec!["web-0", "web-1"]);
    delete(&mut r, Kind::Pod, "default", "web-0");
    assert!(
        claim(&r, "data").is_some(),
        "removed while a scheduled pod still uses it"
    );
    let Some(Object::Pod(p)) = r.get(Kind::Pod, "default", "web-1").cloned() else {
        panic!()
    };
    let mut done = p;
    done.status.phase = Some(PodPhase::Succeeded);
    r.user(ApiCall::UpdateStatus(Object::Pod(done)));
    assert!(
        claim(&r, "data").is_none(),
        "a pod that terminated, or one of another namespace, holds nothing"
    );
}

#[test]
fn a1_8_an_unscheduled_pod_holds_the_claim_too() {
    let mut r = claim_rig();
    r.store.admission = true;
    r.create(Object::Pod(Pod::using_claim("default", "pending", "data")));
    r.create(Object::Pvc(PersistentVolumeClaim::new("default", "data")));
    delete(&mut r, Kind::PersistentVolumeClaim, "default", "data");
    assert!(claim(&r, "data").is_some());
    delete(&mut r, Kind::Pod, "default", "pending");
    assert!(claim(&r, "data").is_none());
}

#[test]
fn a1_8_a_bound_volume_stays_terminating_until_it_is_unbound() {
    let mut r = Rig::new(Protection::volumes());
    let mut pv = PersistentVolume::new("v");
    pv.status.phase = Some(PvPhase::Bound);
    r.create(Object::Pv(pv));
    let get = |r: &Rig<Protection>| match r.get(Kind::PersistentVolume, "", "v") {
        Some(Object::Pv(v)) => Some(v.clone()),
        _ => None,
    };
    assert_eq!(
        get(&r).unwrap().metadata.finalizers,
        vec![FINALIZER_PV_PROTECTION.to_string()]
    );
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolume,
        "",
        "v",
    )));
    let mut v = get(&r).expect("a bound volume was removed");
    assert!(v.metadata.deleting());
    v.status.phase = Some(PvPhase::Released);
    r.user(ApiCall::UpdateStatus(Object::Pv(v)));
    assert!(get(&r).is_none(), "an unbound volume being deleted goes");
}

#[test]
fn a1_8_a_failed_write_is_retried_with_backoff() {
    let mut r = claim_rig();
    r.create(Object::Pvc(PersistentVolumeClaim::new("default", "data")));
    let c = claim(&r, "data").unwrap();
    // Someone else writes the claim: the controller's next write conflicts.
    let mut m = Protection::claims();
    m.handle(
        0,
        Input::Watch(Watch::Applied(
            Object::Pvc({
                let mut old = c.clone();
                old.metadata.finalizers.clear();
                old
            })
            .into(),
        )),
    );
    let Some(Effect::Api { op, .. }) = m.poll() else {
        panic!("no write")
    };
    m.handle(
        1,
        Input::ApiDone {
            op,
            result: ApiResult::Conflict,
        },
    );
    assert!(m.poll().is_none(), "retried at once, not after backoff");
    let t = m.poll_timeout().expect("a retry timer");
    m.handle_timeout(t);
    assert!(matches!(m.poll(), Some(Effect::Api { .. })));
}

#[test]
fn a1_8_a_pod_the_watch_has_not_delivered_yet_still_holds_the_claim() {
    let mut r = claim_rig();
    r.create(Object::Pvc(PersistentVolumeClaim::new("default", "data")));
    // In the API server, not yet in the machine's cache.
    let (created, _) = r.store.apply(
        r.now,
        &ApiCall::Create(Object::Pod(Pod::using_claim("default", "new", "data"))),
    );
    assert!(matches!(created, ApiResult::Ok(Some(_))));
    delete(&mut r, Kind::PersistentVolumeClaim, "default", "data");
    assert!(
        claim(&r, "data").is_some(),
        "the finalizer went on the cache's word alone"
    );
    delete(&mut r, Kind::Pod, "default", "new");
    assert!(claim(&r, "data").is_none());
}

#[test]
fn a1_8_one_write_per_object_at_a_time() {
    let mut m = Protection::claims();
    let c = PersistentVolumeClaim::new("default", "data");
    m.handle(
        0,
        Input::Watch(Watch::Applied(Object::Pvc(c.clone()).into())),
    );
    let Some(Effect::Api { op, .. }) = m.poll() else {
        panic!("no write")
    };
    // The watch delivers the claim again before the write's answer came.
    m.handle(1, Input::Watch(Watch::Applied(Object::Pvc(c).into())));
    assert!(m.poll().is_none(), "a second write while one is in flight");
    let mut done = PersistentVolumeClaim::new("default", "data");
    done.metadata.add_finalizer(FINALIZER_PVC_PROTECTION);
    m.handle(
        2,
        Input::ApiDone {
            op,
            result: ApiResult::Ok(Some(Object::Pvc(done).into())),
        },
    );
    assert!(m.poll().is_none(), "nothing left to write");
}

/// Both controllers under faults (control::chaos): conflicts, late,
/// reordered and duplicated completions, restarts, late watches.
mod under_faults {
    use quickcheck::TestResult;

    use super::*;
    use crate::control::chaos::{Chaos, checker};

    fn world(seed: u64, fresh: fn() -> Protection) -> Chaos<Protection> {
        Chaos::new(seed, fresh, |_, _| {
            Err(crate::Status::unimplemented(
                "protection makes no CSI calls",
            ))
        })
    }

    fn claims(c: &Chaos<Protection>) -> BTreeMap<String, PersistentVolumeClaim> {
        c.store
            .objects()
            .filter_map(|o| match o {
                Object::Pvc(p) => Some((p.metadata.name.clone(), p.clone())),
                _ => None,
            })
            .collect()
    }

    fn in_use(c: &Chaos<Protection>, claim: &str) -> Option<String> {
        c.store.objects().find_map(|o| match o {
            Object::Pod(p) if p.uses_claim("default", claim) => Some(p.metadata.name.clone()),
            _ => None,
        })
    }

    /// A claim is never removed while a pod that has not terminated uses
    /// it; once faults stop, every claim has the finalizer and every claim
    /// being deleted that no pod uses is gone.
    fn claims_in_use_stay(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world(seed, Protection::claims);
        for (what, x) in steps {
            let (claim, pod) = (format!("c{}", x % 3), format!("p{}", x % 4));
            let before = claims(&c);
            let deleting = before.get(&claim).map(|c| c.metadata.deleting());
            let pod_key = ObjectKey::new(Kind::Pod, "default", &pod);
            match what % 8 {
                0 if deleting.is_none() => {
                    c.user(ApiCall::Create(Object::Pvc(PersistentVolumeClaim::new(
                        "default", &claim,
                    ))));
                }
                // Nobody starts a pod on a claim being deleted (the kubelet
                // and the scheduler refuse), but one may exist already.
                1 if deleting == Some(false) && c.store.get(&pod_key).is_none() => {
                    let mut p = Pod::using_claim("default", &pod, &claim);
                    if x % 2 == 0 {
                        p.spec.node_name = Some("node-a".into());
                    }
                    c.user(ApiCall::Create(Object::Pod(p)));
                }
                2 => {
                    c.user(ApiCall::Delete(pod_key));
                }
                3 => {
                    if let Some(Object::Pod(p)) = c.store.get(&pod_key).cloned() {
                        let mut done = p;
                        done.status.phase = Some(PodPhase::Failed);
                        c.user(ApiCall::UpdateStatus(Object::Pod(done)));
                    }
                }
                4 => {
                    c.user(ApiCall::Delete(ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        "default",
                        &claim,
                    )));
                }
                _ => {
                    if let Err(e) = c.step(x) {
                        return TestResult::error(e.to_string());
                    }
                }
            }
            let after = claims(&c);
            for name in before.keys().filter(|n| !after.contains_key(*n)) {
                if let Some(p) = in_use(&c, name) {
                    return TestResult::error(format!("{name} was removed while {p} uses it"));
                }
            }
        }
        if let Err(e) = c.settle() {
            return TestResult::error(e.to_string());
        }
        for (name, claim) in claims(&c) {
            if !claim.metadata.has_finalizer(FINALIZER_PVC_PROTECTION) {
                return TestResult::error(format!("{name} has no pvc-protection finalizer"));
            }
            if claim.metadata.deleting() && in_use(&c, &name).is_none() {
                return TestResult::error(format!("{name} stays Terminating with no user"));
            }
        }
        TestResult::passed()
    }

    /// A Bound volume is never removed; once faults stop, every volume
    /// being deleted that is not Bound is gone.
    fn bound_volumes_stay(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world(seed, Protection::volumes);
        let volumes = |c: &Chaos<Protection>| -> BTreeMap<String, PersistentVolume> {
            c.store
                .objects()
                .filter_map(|o| match o {
                    Object::Pv(v) => Some((v.name().to_string(), v.clone())),
                    _ => None,
                })
                .collect()
        };
        for (what, x) in steps {
            let name = format!("v{}", x % 3);
            let before = volumes(&c);
            match what % 6 {
                0 if !before.contains_key(&name) => {
                    let mut v = PersistentVolume::new(&name);
                    v.status.phase = Some(PvPhase::Bound);
                    c.user(ApiCall::Create(Object::Pv(v)));
                }
                1 => {
                    if let Some(mut v) = before.get(&name).cloned() {
                        v.status.phase = Some(PvPhase::Released);
                        c.user(ApiCall::UpdateStatus(Object::Pv(v)));
                    }
                }
                2 => {
                    c.user(ApiCall::Delete(ObjectKey::new(
                        Kind::PersistentVolume,
                        "",
                        &name,
                    )));
                }
                _ => {
                    if let Err(e) = c.step(x) {
                        return TestResult::error(e.to_string());
                    }
                }
            }
            let after = volumes(&c);
            for (gone, v) in before.iter().filter(|(n, _)| !after.contains_key(*n)) {
                if v.phase() == PvPhase::Bound {
                    return TestResult::error(format!("{gone} was removed while Bound"));
                }
            }
        }
        if let Err(e) = c.settle() {
            return TestResult::error(e.to_string());
        }
        for (name, v) in volumes(&c) {
            if v.metadata.deleting() && v.phase() != PvPhase::Bound {
                return TestResult::error(format!("{name} stays Terminating, not Bound"));
            }
        }
        TestResult::passed()
    }

    #[test]
    fn a1_8_claims_in_use_stay_under_faults() {
        checker(300, 60).quickcheck(claims_in_use_stay as fn(u64, Vec<(u8, u8)>) -> TestResult);
    }

    #[test]
    fn a1_8_bound_volumes_stay_under_faults() {
        checker(300, 60).quickcheck(bound_volumes_stay as fn(u64, Vec<(u8, u8)>) -> TestResult);
    }
}
