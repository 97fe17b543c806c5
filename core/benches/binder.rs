//! The binder at scale: 100,000 claims against 100,000 volumes with mixed
//! access modes, classes and sizes. Prints the time to bind them all (through
//! a real object store, four writes per binding) and the cost per match.
//!
//! `cargo bench -p volplane-core --bench binder [-- N]`

use std::collections::VecDeque;
use std::time::Instant;

use volplane_core::binder::Binder;
use volplane_core::control::{ApiResult, Effect, Input, Watch};
use volplane_core::machine::{self, Machine};
use volplane_core::model::AccessMode::*;
use volplane_core::model::*;
use volplane_core::store::Store;

const MODES: [&[AccessMode]; 4] = [
    &[ReadWriteOnce],
    &[ReadWriteOnce, ReadOnlyMany],
    &[ReadWriteMany],
    &[ReadWriteMany, ReadWriteOnce, ReadOnlyMany],
];
const CLASSES: [&str; 3] = ["", "gold", "silver"];

/// Volume `i` of the bench's mix, from a random number.
fn volume(i: usize, r: u64) -> Object {
    let mut v = PersistentVolume::new(&format!("pv-{i:06}"));
    v.spec
        .capacity
        .insert("storage".into(), Quantity::from_bytes(((r % 64) + 1) << 30));
    v.spec.access_modes = MODES[(r >> 8) as usize % MODES.len()].to_vec();
    v.spec.storage_class_name = Some(CLASSES[(r >> 16) as usize % CLASSES.len()].into());
    v.status.phase = Some(PvPhase::Available);
    Object::Pv(v)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let mut store = Store::new();
    let mut binder = Binder::new();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let t0 = Instant::now();
    for i in 0..n {
        let (_, w) = store.apply(
            0,
            &volplane_core::control::ApiCall::Create(volume(i, next())),
        );
        for w in w {
            binder.handle(0, Input::Watch(w));
        }
    }
    let settle = |binder: &mut Binder, store: &mut Store| -> usize {
        let mut writes = 0;
        let mut carry = |_: &Binder, now, e, done: &mut VecDeque<Input>| {
            if let Effect::Api { op, call } = e {
                writes += 1;
                store.serve(now, op, call, done);
            }
        };
        machine::drain(binder, 0, &mut carry);
        writes
    };
    settle(&mut binder, &mut store);
    let loaded = t0.elapsed();
    println!(
        "loaded {n} volumes in {:.2?} ({} candidates indexed)",
        loaded,
        binder.index().candidates()
    );

    let t1 = Instant::now();
    let mut writes = 0;
    for i in 0..n {
        let r = next();
        let mut c = PersistentVolumeClaim::new("bench", &format!("pvc-{i:06}"));
        c.spec
            .resources
            .requests
            .insert("storage".into(), Quantity::from_bytes(((r % 48) + 1) << 30));
        c.spec.access_modes =
            vec![[ReadWriteOnce, ReadWriteMany, ReadOnlyMany][(r >> 8) as usize % 3].clone()];
        c.spec.storage_class_name = Some(CLASSES[(r >> 16) as usize % CLASSES.len()].into());
        let (result, w) = store.apply(0, &volplane_core::control::ApiCall::Create(Object::Pvc(c)));
        assert!(matches!(result, ApiResult::Ok(_)));
        for w in w {
            binder.handle(0, Input::Watch(w));
        }
        writes += settle(&mut binder, &mut store);
    }
    let elapsed = t1.elapsed();
    let bound = store
        .objects()
        .filter(|o| matches!(o, Object::Pvc(c) if c.phase() == PvcPhase::Bound))
        .count();
    let pending = n - bound;
    println!(
        "{n} claims against {n} volumes: {bound} bound, {pending} left pending, {writes} API writes, in {elapsed:.2?}"
    );
    println!(
        "per claim: {:.1} µs (match + 4 writes through the store); {:.0} claims/s",
        elapsed.as_secs_f64() * 1e6 / n as f64,
        n as f64 / elapsed.as_secs_f64()
    );

    // Matching alone: the index lookup for every claim, no writes.
    let claims: Vec<PersistentVolumeClaim> = (0..n)
        .map(|i| {
            let r = next();
            let mut c = PersistentVolumeClaim::new("probe", &format!("probe-{i}"));
            c.spec
                .resources
                .requests
                .insert("storage".into(), Quantity::from_bytes(((r % 48) + 1) << 30));
            c.spec.access_modes =
                vec![[ReadWriteOnce, ReadWriteMany][(r >> 8) as usize % 2].clone()];
            c.spec.storage_class_name = Some(CLASSES[(r >> 16) as usize % CLASSES.len()].into());
            c
        })
        .collect();
    let mut fresh = Binder::new();
    let mut store2 = Store::new();
    for i in 0..n {
        let (_, w) = store2.apply(
            0,
            &volplane_core::control::ApiCall::Create(volume(i, next())),
        );
        for w in w {
            if let Watch::Applied(o) = w {
                fresh.handle(0, Input::Watch(Watch::Applied(o)));
            }
        }
    }
    let t2 = Instant::now();
    let found = claims
        .iter()
        .filter(|c| fresh.find_match(c, false).is_some())
        .count();
    let e2 = t2.elapsed();
    println!(
        "matching only: {n} lookups against {} candidates in {e2:.2?} ({:.2} µs per match, {found} found)",
        fresh.index().candidates(),
        e2.as_secs_f64() * 1e6 / n as f64
    );
}
