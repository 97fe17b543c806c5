//! Both snapshot machines under faults (control::chaos): conflicts, late,
//! reordered and duplicated completions, failed and timed-out CSI calls,
//! restarts, late watches. Their own invariants hold after every step, no
//! failed call is asked again with nothing new since (no hot loop), and
//! each settles once faults stop.

use quickcheck::TestResult;

use super::*;
use crate::control::chaos::{Chaos, checker};

fn content(i: u8, policy: DeletionPolicy) -> VolumeSnapshotContent {
    let mut c = VolumeSnapshotContent::new(&format!("content-{i}"));
    c.spec.driver = DRIVER.into();
    c.spec.deletion_policy = policy;
    c.spec.source.volume_handle = Some("vol-1".into());
    c.spec.volume_snapshot_class_name = Some("snaps".into());
    c.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: format!("s{i}"),
        uid: format!("uid-s{i}"),
        ..Default::default()
    };
    c
}

/// Plays `steps` on `c`: one in six creates the object `key(x)` names
/// (when it is absent, with `create(x)`), one in six deletes it, the rest
/// let the machine and the faults move; then the run must settle.
fn play<M: crate::control::ControlMachine>(
    c: &mut Chaos<M>,
    steps: Vec<(u8, u8)>,
    key: impl Fn(u8) -> ObjectKey,
    create: impl Fn(u8) -> Object,
) -> TestResult {
    for (what, x) in steps {
        let key = key(x);
        match what % 6 {
            0 if c.store.get(&key).is_none() => {
                c.user(ApiCall::Create(create(x)));
            }
            1 => {
                c.user(ApiCall::Delete(key));
            }
            _ => {
                if let Err(e) = c.step(x) {
                    return TestResult::error(e.to_string());
                }
            }
        }
    }
    match c.settle() {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e.to_string()),
    }
}

fn snapshotter_under_faults(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
    let mut c = Chaos::new(seed, || Snapshotter::new(DRIVER), |_, call| healthy(call));
    c.user(ApiCall::Create(Object::SnapshotClass(
        VolumeSnapshotClass::new("snaps", DRIVER, DeletionPolicy::Delete),
    )));
    let key = |x: u8| {
        ObjectKey::new(
            Kind::VolumeSnapshotContent,
            "",
            &format!("content-{}", x % 3),
        )
    };
    play(&mut c, steps, key, |x| {
        let policy = if x % 2 == 0 {
            DeletionPolicy::Delete
        } else {
            DeletionPolicy::Retain
        };
        Object::Content(content(x % 3, policy))
    })
}

#[test]
fn the_snapshotter_stays_sound_and_settles_under_faults() {
    checker(200, 60).quickcheck(snapshotter_under_faults as fn(u64, Vec<(u8, u8)>) -> TestResult);
}

fn controller_under_faults(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
    let mut c = Chaos::new(seed, SnapshotController::new, |_, _| {
        Err(Status::unimplemented(
            "the snapshot controller makes no CSI calls",
        ))
    });
    // The class, the PV and the bound claim, given UIDs by this store.
    let w = World::with_claim(DeletionPolicy::Delete);
    for o in w.store.objects() {
        let mut o = o.clone();
        o.meta_mut().uid.clear();
        c.user(ApiCall::Create(o));
    }
    let key = |x: u8| ObjectKey::new(Kind::VolumeSnapshot, "default", &format!("s{}", x % 3));
    play(&mut c, steps, key, |x| {
        Object::Snapshot(VolumeSnapshot::of_claim(
            "default",
            &format!("s{}", x % 3),
            "data",
            "snaps",
        ))
    })
}

#[test]
fn the_snapshot_controller_stays_sound_and_settles_under_faults() {
    checker(200, 60).quickcheck(controller_under_faults as fn(u64, Vec<(u8, u8)>) -> TestResult);
}
