//! `volplane bench --binder N`: the PV controller alone, in memory — N
//! claims bound against N volumes through the core's store (every write a
//! real store write, its watch event delivered back), timed to the last
//! claim Bound. No driver, no API server: what the binder itself costs.

use std::collections::VecDeque;
use std::time::Instant;

use volplane_core::binder::Binder;
use volplane_core::control::{Effect, Input};
use volplane_core::machine::{self, Machine};
use volplane_core::model::{
    AccessMode, Object, PersistentVolume, PersistentVolumeClaim, PvcPhase, Quantity,
};
use volplane_core::store::Store;

/// The figures of one run.
#[derive(Debug)]
pub struct BinderFigures {
    pub claims: usize,
    pub bound: usize,
    pub writes: u64,
    /// Writes by verb and kind, and how many met a conflict.
    pub by_kind: std::collections::BTreeMap<String, u64>,
    pub seconds: f64,
    pub setup_seconds: f64,
}

fn gib(n: u64) -> Quantity {
    Quantity::from_bytes(n << 30)
}

/// `n` volumes of 1–4 GiB and `n` claims of 1–4 GiB, no class, RWO: every
/// claim fits exactly one size group, so matching works for its answer.
fn objects(n: usize) -> (Vec<PersistentVolume>, Vec<PersistentVolumeClaim>) {
    let size = |i: usize| 1 + (i as u64 * 7919) % 4;
    let volumes = (0..n)
        .map(|i| {
            let mut v = PersistentVolume::new(&format!("pv-{i:06}"));
            v.spec.capacity.insert("storage".into(), gib(size(i)));
            v.spec.access_modes = vec![AccessMode::ReadWriteOnce];
            v.spec.storage_class_name = Some(String::new());
            v
        })
        .collect();
    let claims = (0..n)
        .map(|i| {
            let mut c = PersistentVolumeClaim::new("default", &format!("claim-{i:06}"));
            c.spec
                .resources
                .requests
                .insert("storage".into(), gib(size(i)));
            c.spec.access_modes = vec![AccessMode::ReadWriteOnce];
            c.spec.storage_class_name = Some(String::new());
            c
        })
        .collect();
    (volumes, claims)
}

/// Binds `n` claims against `n` volumes and times it.
pub fn run(n: usize) -> BinderFigures {
    let (volumes, claims) = objects(n);
    let setup = Instant::now();
    let mut store = Store::new();
    let mut events: VecDeque<Input> = VecDeque::new();
    for o in volumes
        .into_iter()
        .map(Object::Pv)
        .chain(claims.into_iter().map(Object::Pvc))
    {
        let (_, watches) = store.write(0, volplane_core::control::ApiCall::Create(o));
        events.extend(watches.into_iter().map(Input::Watch));
    }
    let setup_seconds = setup.elapsed().as_secs_f64();
    let mut binder = Binder::new();
    let mut writes = 0u64;
    // Counted by verb, kind and conflict; named only at the end, so the
    // timed loop formats nothing.
    let mut counts = std::collections::BTreeMap::new();
    let start = Instant::now();
    for e in events {
        binder.handle(0, e);
    }
    binder.handle(0, Input::Synced);
    let mut carry = |_: &Binder, now, e: Effect, done: &mut VecDeque<Input>| {
        if let Effect::Api { op, call } = e {
            writes += 1;
            let (verb, kind) = (call.verb(), call.kind());
            let answer = done.len();
            store.serve(now, op, call, done);
            let conflict = matches!(
                done.get(answer),
                Some(Input::ApiDone {
                    result: volplane_core::control::ApiResult::Conflict,
                    ..
                })
            );
            *counts.entry((verb, kind, conflict)).or_insert(0u64) += 1;
        }
    };
    machine::drain(&mut binder, 0, &mut carry);
    let seconds = start.elapsed().as_secs_f64();
    let by_kind = counts
        .into_iter()
        .map(|((verb, kind, conflict), n)| {
            let conflict = if conflict { " (conflict)" } else { "" };
            (format!("{verb} {kind:?}{conflict}"), n)
        })
        .collect();
    let bound = store
        .objects()
        .filter(|o| matches!(o, Object::Pvc(c) if c.phase() == PvcPhase::Bound))
        .count();
    BinderFigures {
        claims: n,
        bound,
        writes,
        by_kind,
        seconds,
        setup_seconds,
    }
}

/// Prints the figures as the bench's other phases do.
pub fn print(f: &BinderFigures) {
    println!(
        "binder: {} claims × {} volumes: {} Bound in {:.3} s ({:.2} µs per claim, {} API writes, {:.1} per claim; store filled in {:.3} s)",
        f.claims,
        f.claims,
        f.bound,
        f.seconds,
        f.seconds * 1e6 / f.claims.max(1) as f64,
        f.writes,
        f.writes as f64 / f.claims.max(1) as f64,
        f.setup_seconds
    );
    let per: Vec<String> = f.by_kind.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    println!("  writes: {}", per.join(", "));
}
