//! Scenario tests of pvc-protection and pv-protection (SEMANTICS A1.8).

use super::*;
use crate::control::rig::Rig;
use crate::machine::Machine;
use crate::model::names::{FINALIZER_PV_PROTECTION, FINALIZER_PVC_PROTECTION};

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
        Input::Watch(Watch::Applied(Object::Pvc({
            let mut old = c.clone();
            old.metadata.finalizers.clear();
            old
        }))),
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
    m.handle(0, Input::Watch(Watch::Applied(Object::Pvc(c.clone()))));
    let Some(Effect::Api { op, .. }) = m.poll() else {
        panic!("no write")
    };
    // The watch delivers the claim again before the write's answer came.
    m.handle(1, Input::Watch(Watch::Applied(Object::Pvc(c))));
    assert!(m.poll().is_none(), "a second write while one is in flight");
    let mut done = PersistentVolumeClaim::new("default", "data");
    done.metadata.add_finalizer(FINALIZER_PVC_PROTECTION);
    m.handle(
        2,
        Input::ApiDone {
            op,
            result: ApiResult::Ok(Some(Object::Pvc(done))),
        },
    );
    assert!(m.poll().is_none(), "nothing left to write");
}
