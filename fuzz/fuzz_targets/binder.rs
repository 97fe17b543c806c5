//! Arbitrary claims and volumes created and deleted against the binder,
//! through a real store: binding stays one-to-one after every step.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use volplane_core::binder::Binder;
use volplane_core::machine::Machine;
use volplane_core::control::ApiCall;
use volplane_core::control::rig::Rig;
use volplane_core::model::*;

#[derive(Debug, Arbitrary)]
enum Op {
    Volume {
        i: u8,
        gib: u8,
        rwx: bool,
        class: bool,
        prebind: Option<u8>,
    },
    Claim {
        i: u8,
        gib: u8,
        rwx: bool,
        class: bool,
        name: Option<u8>,
    },
    DeleteClaim {
        i: u8,
    },
    DeleteVolume {
        i: u8,
    },
    Resync,
}

fn modes(rwx: bool) -> Vec<AccessMode> {
    if rwx {
        vec![AccessMode::ReadWriteMany, AccessMode::ReadWriteOnce]
    } else {
        vec![AccessMode::ReadWriteOnce]
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut r = Rig::new(Binder::new());
    for op in ops.iter().take(64) {
        match op {
            Op::Volume {
                i,
                gib,
                rwx,
                class,
                prebind,
            } => {
                let mut v = PersistentVolume::new(&format!("v{}", i % 6));
                v.spec.capacity.insert(
                    "storage".into(),
                    Quantity::from_bytes(u64::from(gib % 8 + 1) << 30),
                );
                v.spec.access_modes = modes(*rwx);
                v.spec.storage_class_name = Some(if *class { "gold" } else { "" }.into());
                v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Retain);
                if let Some(c) = prebind {
                    v.spec.claim_ref = Some(ObjectReference {
                        namespace: "ns".into(),
                        name: format!("c{}", c % 6),
                        ..Default::default()
                    });
                }
                r.user(ApiCall::Create(Object::Pv(v)));
            }
            Op::Claim {
                i,
                gib,
                rwx,
                class,
                name,
            } => {
                let mut c = PersistentVolumeClaim::new("ns", &format!("c{}", i % 6));
                c.spec.resources.requests.insert(
                    "storage".into(),
                    Quantity::from_bytes(u64::from(gib % 8 + 1) << 30),
                );
                c.spec.access_modes = modes(*rwx);
                c.spec.storage_class_name = Some(if *class { "gold" } else { "" }.into());
                c.spec.volume_name = name.map(|n| format!("v{}", n % 6));
                r.user(ApiCall::Create(Object::Pvc(c)));
            }
            Op::DeleteClaim { i } => r.user(ApiCall::Delete(ObjectKey::new(
                Kind::PersistentVolumeClaim,
                "ns",
                &format!("c{}", i % 6),
            ))),
            Op::DeleteVolume { i } => r.user(ApiCall::Delete(ObjectKey::new(
                Kind::PersistentVolume,
                "",
                &format!("v{}", i % 6),
            ))),
            Op::Resync => {
                r.input(volplane_core::control::Input::Resync);
                r.run();
            }
        }
        if let Err(e) = volplane_core::binder::check_one_to_one(r.store.objects()) {
            panic!("{e}");
        }
        if let Err(e) = r.machine.check_invariants() {
            panic!("{e}");
        }
    }
});
