//! Arbitrary workloads and seeds through the whole simulated cluster
//! (binder, provisioner, attach/detach, resizer, kubelets, driver) under
//! faults: every safety invariant holds after every step, and the cluster
//! converges once faults stop.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use volplane_core::model::{AccessMode, ReclaimPolicy};
use volplane_core::sim::workload::{Action, play};
use volplane_core::sim::{Faults, SimConfig};

#[derive(Debug, Arbitrary)]
enum A {
    Claim(u8, bool, u8),
    Pod(u8, u8, bool),
    DeletePod(u8),
    DeleteClaim(u8),
    Resize(u8),
    Run(u8),
}

fuzz_target!(|input: (u64, u8, Vec<A>)| {
    let (seed, rate, acts) = input;
    let mut actions = vec![
        Action::Class { name: "delete".into(), policy: ReclaimPolicy::Delete, credentials: false, zone: None },
        Action::Class { name: "retain".into(), policy: ReclaimPolicy::Retain, credentials: false, zone: None },
    ];
    for a in acts.into_iter().take(40) {
        actions.push(match a {
            A::Claim(i, retain, mode) => Action::Claim {
                name: format!("c{}", i % 3),
                class: if retain { "retain" } else { "delete" }.into(),
                mode: [AccessMode::ReadWriteOnce, AccessMode::ReadWriteMany, AccessMode::ReadWriteOncePod][usize::from(mode % 3)].clone(),
                attributes: None,
            },
            A::Pod(p, c, n) => Action::Pod { name: format!("p{}", p % 4), claim: format!("c{}", c % 3), node: usize::from(n) },
            A::DeletePod(p) => Action::DeletePod { name: format!("p{}", p % 4) },
            A::DeleteClaim(c) => Action::DeleteClaim { name: format!("c{}", c % 3) },
            A::Resize(c) => Action::Resize { claim: format!("c{}", c % 3) },
            A::Run(n) => Action::Run { steps: u32::from(n) },
        });
    }
    let mut config = SimConfig::new(2, seed);
    config.faults = Faults::at(f64::from(rate % 30) / 100.0);
    let sim = play(config, &actions, 50_000);
    if let Some(v) = sim.violations.first() {
        panic!("seed {seed}: {}", v.what);
    }
});
