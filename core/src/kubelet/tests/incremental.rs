//! Incremental passes: reconciling only the volumes (and the node) a change
//! dirtied reaches the same effects as reconciling everything. The machine
//! told to resync after every change is the oracle: a resync dirties the
//! node and every volume it has or wants, as the whole-node pass did.

use std::cell::Cell;
use std::rc::Rc;

use quickcheck::TestResult;

use super::*;
use crate::control::ApiCall;
use crate::control::chaos::checker;

/// The attached RWO volume `pv-1` (claim `data`) of [`objects`], and an
/// RWX `pv-2` (claim `data2`) attached too; the driver fails every
/// seventh call, half of those as timeouts (uncertain).
fn world() -> Rig<Kubelet> {
    let mut r = Rig::new(Kubelet::new(KubeletConfig::new("node-a", DRIVER, ROOT)));
    let calls = Rc::new(Cell::new(0u32));
    r.answer_csi(move |_| {
        calls.set(calls.get() + 1);
        match calls.get() % 14 {
            7 => Err(Status::new(Code::Unavailable, "injected")),
            0 => Err(Status::new(Code::DeadlineExceeded, "injected")),
            _ => Ok(Response::Empty),
        }
    });
    let mut objects = objects(&[AccessMode::ReadWriteOnce], true);
    let unique = names::unique_volume_name(DRIVER, "vol-2");
    if let Object::Node(n) = &mut objects[0] {
        n.status.volumes_attached.push(AttachedVolume {
            name: unique,
            device_path: "y".into(),
        });
    }
    for o in objects {
        r.create(o);
    }
    let mut va = VolumeAttachment::new(
        &names::volume_attachment_name("vol-2", DRIVER, "node-a"),
        DRIVER,
        "node-a",
        "pv-2",
    );
    va.status.attached = true;
    r.create(Object::Va(va));
    let mut pv = PersistentVolume::new("pv-2");
    pv.spec.access_modes = vec![AccessMode::ReadWriteMany];
    pv.spec
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    pv.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-2".into(),
        ..Default::default()
    });
    r.create(Object::Pv(pv));
    let mut c = PersistentVolumeClaim::new("default", "data2");
    c.spec.volume_name = Some("pv-2".into());
    c.status
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    r.create(Object::Pvc(c));
    r
}

/// The user's change for `(what, x)`, against what `r` stores.
fn change(r: &Rig<Kubelet>, what: u8, x: u8) -> Option<ApiCall> {
    let name = format!("p{}", x % 4);
    let (claim, pv, handle) = if x % 8 < 4 {
        ("data", "pv-1", "vol-1")
    } else {
        ("data2", "pv-2", "vol-2")
    };
    let stored = |kind, ns, name: &str| r.get(kind, ns, name).cloned();
    Some(match what % 7 {
        0 => {
            let mut p = pod_object(&name);
            if let Some(src) = &mut p.spec.volumes[0].persistent_volume_claim {
                src.claim_name = claim.into();
            }
            ApiCall::Create(Object::Pod(p))
        }
        1 => ApiCall::Delete(ObjectKey::new(Kind::Pod, "default", &name)),
        2 => {
            let Some(Object::Pod(mut p)) = stored(Kind::Pod, "default", &name) else {
                return None;
            };
            p.status.phase = Some(PodPhase::Succeeded);
            ApiCall::UpdateStatus(Object::Pod(p))
        }
        3 => {
            let Some(Object::Node(mut n)) = stored(Kind::Node, "", "node-a") else {
                return None;
            };
            let unique = names::unique_volume_name(DRIVER, handle);
            if n.status.volumes_attached.iter().any(|a| a.name == unique) {
                n.status.volumes_attached.retain(|a| a.name != unique);
            } else {
                n.status.volumes_attached.push(AttachedVolume {
                    name: unique,
                    device_path: "z".into(),
                });
            }
            ApiCall::UpdateStatus(Object::Node(n))
        }
        4 => {
            let va = names::volume_attachment_name(handle, DRIVER, "node-a");
            let Some(Object::Va(mut v)) = stored(Kind::VolumeAttachment, "", &va) else {
                return None;
            };
            v.status.attached = !v.status.attached;
            ApiCall::UpdateStatus(Object::Va(v))
        }
        5 => {
            let Some(Object::Pv(mut p)) = stored(Kind::PersistentVolume, "", pv) else {
                return None;
            };
            let bytes = p.capacity().map_or(0, |q| q.bytes()) + (1 << 30);
            p.spec
                .capacity
                .insert("storage".into(), Quantity::from_bytes(bytes));
            ApiCall::Update(Object::Pv(p))
        }
        6 => {
            let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", claim);
            let Some(Object::Pvc(mut c)) = stored(key.kind, "default", claim) else {
                return None;
            };
            c.status.conditions.push(PvcCondition {
                type_: "FileSystemResizePending".into(),
                status: "True".into(),
                ..Default::default()
            });
            c.set_resize_status(Some(crate::model::names::expansion::NODE_PENDING));
            ApiCall::UpdateStatus(Object::Pvc(c))
        }
        _ => return None,
    })
}

fn same_effects(steps: Vec<(u8, u8)>) -> TestResult {
    crate::control::chaos::same_as_resync(world(), world(), steps, change, 500)
}

#[test]
fn dirty_passes_reach_what_whole_node_passes_reach() {
    checker(300, 60).quickcheck(same_effects as fn(Vec<(u8, u8)>) -> TestResult);
}

/// The oracle has teeth: a kubelet that never dirtied a volume on a pod's
/// creation would differ from the whole-node passes at once.
#[test]
fn a_pod_alone_makes_its_volume_ready() {
    let mut r = world();
    r.user(change(&r, 0, 0).unwrap());
    let methods: Vec<&str> = r.csi_calls.iter().map(|c| c.1.method()).collect();
    assert_eq!(methods, ["NodeStageVolume", "NodePublishVolume"]);
}
