//! Scenario tests of attach/detach, named after the SEMANTICS.md rules.

use super::*;
use crate::Status;
use crate::control::Input;
use crate::control::rig::Rig;
use crate::driver::{Request, Response};
use crate::machine::Machine;

const DRIVER: &str = "volplane.csi.io";

/// The driver: publishes and unpublishes anything.
fn driver(call: &Request) -> crate::control::CsiResult {
    match call {
        Request::ControllerPublish(p) => Ok(Response::Published {
            publish_context: [("device".to_string(), format!("/dev/loop-{}", p.node_id))].into(),
        }),
        Request::ControllerUnpublish(_) => Ok(Response::Empty),
        other => Err(Status::unimplemented(other.method())),
    }
}

/// Two nodes with the driver registered, a CSI PV, a claim bound to it.
fn objects(modes: &[AccessMode]) -> Vec<Object> {
    let mut out = Vec::new();
    for n in ["node-a", "node-b"] {
        out.push(Object::Node(Node::new(n)));
        let mut c = CsiNode::new(n);
        c.spec.drivers.push(CsiNodeDriver {
            name: DRIVER.into(),
            node_id: format!("id-{n}"),
            topology_keys: vec![],
            allocatable: None,
        });
        out.push(Object::CsiNode(c));
    }
    let mut pv = PersistentVolume::new("pv-1");
    pv.spec.access_modes = modes.to_vec();
    pv.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    out.push(Object::Pv(pv));
    let mut c = PersistentVolumeClaim::new("default", "data");
    c.spec.volume_name = Some("pv-1".into());
    out.push(Object::Pvc(c));
    out
}

fn rig(modes: &[AccessMode]) -> Rig<Attach> {
    let mut r = Rig::new(Attach::new(AttachConfig::new(DRIVER)));
    r.answer_csi(driver);
    for o in objects(modes) {
        r.create(o);
    }
    r
}

fn pod(name: &str, node: &str) -> Object {
    let mut p = Pod::new("default", name);
    p.spec.node_name = Some(node.into());
    p.spec.volumes.push(PodVolume {
        name: "d".into(),
        persistent_volume_claim: Some(PvcSource {
            claim_name: "data".into(),
            read_only: false,
        }),
    });
    Object::Pod(p)
}

fn va_name(node: &str) -> String {
    names::volume_attachment_name("vol-1", DRIVER, node)
}

fn va(r: &Rig<Attach>, node: &str) -> Option<VolumeAttachment> {
    match r.get(Kind::VolumeAttachment, "", &va_name(node)) {
        Some(Object::Va(v)) => Some(v.clone()),
        _ => None,
    }
}

fn node(r: &Rig<Attach>, n: &str) -> Node {
    match r.get(Kind::Node, "", n) {
        Some(Object::Node(n)) => n.clone(),
        _ => panic!(),
    }
}

const UNIQUE: &str = "kubernetes.io/csi/volplane.csi.io^vol-1";

#[test]
fn c1_c2_a_scheduled_pod_gets_an_attachment_carried_out_by_the_attacher() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(pod("web-0", "node-a"));
    let va = va(&r, "node-a").expect("C1.1: VolumeAttachment csi-<sha256>");
    assert_eq!(va.spec.attacher, DRIVER);
    assert_eq!(va.pv_name(), "pv-1");
    assert!(va.status.attached);
    assert_eq!(
        &va.status.attachment_metadata["device"],
        "/dev/loop-id-node-a"
    );
    assert!(
        va.metadata
            .has_finalizer("external-attacher/volplane-csi-io"),
        "C2.2"
    );
    assert_eq!(
        va.metadata.annotation(names::ANN_VA_NODE_ID),
        Some("id-node-a")
    );
    let Some(Object::Pv(pv)) = r.get(Kind::PersistentVolume, "", "pv-1") else {
        panic!()
    };
    assert!(
        pv.metadata
            .has_finalizer("external-attacher/volplane-csi-io"),
        "C2.3: finalizer on the PV too"
    );
    assert!(
        matches!(&r.csi_calls[..], [(None, Request::ControllerPublish(p))] if p.node_id == "id-node-a" && p.volume_id == "vol-1")
    );
    assert_eq!(
        node(&r, "node-a").status.volumes_attached,
        vec![AttachedVolume {
            name: UNIQUE.into(),
            device_path: va_name("node-a")
        }]
    );
}

#[test]
fn c2_the_attacher_alone_carries_out_attachments_kube_controller_manager_made() {
    let mut config = AttachConfig::new(DRIVER);
    config.attach_detach = false;
    let mut r = Rig::new(Attach::new(config));
    r.answer_csi(driver);
    for o in objects(&[AccessMode::ReadWriteOnce]) {
        r.create(o);
    }
    r.create(pod("web-0", "node-a"));
    assert!(
        va(&r, "node-a").is_none(),
        "attach/detach is kube-controller-manager's here"
    );
    let name = va_name("node-a");
    r.create(Object::Va(VolumeAttachment::new(
        &name, DRIVER, "node-a", "pv-1",
    )));
    let va = va(&r, "node-a").expect("still there");
    assert!(va.status.attached, "C2: the attacher carried it out");
    assert!(
        matches!(&r.csi_calls[..], [(None, Request::ControllerPublish(p))] if p.node_id == "id-node-a")
    );
    assert!(
        node(&r, "node-a").status.volumes_attached.is_empty(),
        "volumesAttached is the attach/detach controller's"
    );
}

#[test]
fn c3_4_an_rwo_volume_is_refused_on_a_second_node_with_one_event_per_pod() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(pod("web-0", "node-a"));
    r.create(pod("web-1", "node-b"));
    r.machine.handle(
        r.now,
        Input::Watch(Watch::Applied(
            r.store
                .get(&ObjectKey::new(Kind::Pod, "default", "web-1"))
                .unwrap()
                .clone()
                .into(),
        )),
    );
    r.run();
    assert!(va(&r, "node-b").is_none());
    let multi: Vec<&Event> = r
        .events
        .iter()
        .filter(|e| e.reason == reason::FAILED_ATTACH_VOLUME)
        .collect();
    assert_eq!(multi.len(), 1, "once per pod");
    assert_eq!(&*multi[0].object.name, "web-1");
    assert_eq!(
        multi[0].message,
        "Multi-Attach error for volume \"pv-1\" Volume is already used by pod(s) web-0"
    );
}

#[test]
fn c3_4_the_multi_attach_event_comes_at_the_first_refusal() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(pod("web-0", "node-a"));
    r.create(pod("web-1", "node-b"));
    assert_eq!(
        r.reasons()
            .iter()
            .filter(|e| **e == reason::FAILED_ATTACH_VOLUME)
            .count(),
        1
    );
}

#[test]
fn c2_attachments_of_another_attacher_are_left_alone() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    let theirs = VolumeAttachment::new("theirs", "other.csi.io", "node-b", "pv-1");
    r.create(Object::Va(theirs.clone()));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert!(r.csi_calls.is_empty(), "{:?}", r.csi_calls);
    assert!(
        !r.writes.iter().any(|w| &*w.key().name == "theirs"),
        "{:?}",
        r.writes
    );
}

#[test]
fn c3_3_an_rwx_volume_attaches_to_both_nodes() {
    let mut r = rig(&[AccessMode::ReadWriteMany]);
    r.create(pod("web-0", "node-a"));
    r.create(pod("web-1", "node-b"));
    assert!(va(&r, "node-a").is_some() && va(&r, "node-b").is_some());
}

#[test]
fn c3_6_c3_7_detach_waits_for_unmount_and_leaves_volumes_attached_first() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(pod("web-0", "node-a"));
    let mut n = node(&r, "node-a");
    n.status.volumes_in_use = vec![UNIQUE.into()];
    r.user(ApiCall::UpdateStatus(Object::Node(n)));
    r.writes.clear();
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    assert!(va(&r, "node-a").is_some(), "still mounted: no detach");
    assert!(r.writes.is_empty(), "{:?}", r.writes);
    let mut n = node(&r, "node-a");
    n.status.volumes_in_use.clear();
    r.user(ApiCall::UpdateStatus(Object::Node(n)));
    assert!(va(&r, "node-a").is_none(), "detached and gone");
    let order: Vec<(&str, Kind)> = r.writes.iter().map(|w| (w.verb(), w.kind())).collect();
    assert_eq!(
        order[0],
        ("update status", Kind::Node),
        "out of volumesAttached first"
    );
    assert_eq!(order[1], ("delete", Kind::VolumeAttachment));
    assert!(node(&r, "node-a").status.volumes_attached.is_empty());
    assert!(
        r.csi_calls
            .iter()
            .any(|(_, c)| matches!(c, Request::ControllerUnpublish(_)))
    );
}

#[test]
fn c3_6_detach_is_forced_after_the_timeout_on_a_not_ready_node() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(pod("web-0", "node-a"));
    let mut n = node(&r, "node-a");
    n.status.volumes_in_use = vec![UNIQUE.into()];
    n.status.conditions[0].status = "False".into();
    r.user(ApiCall::UpdateStatus(Object::Node(n)));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    r.advance(5 * 60 * 1000);
    assert!(va(&r, "node-a").is_some(), "not before six minutes");
    r.advance(61 * 1000);
    assert!(va(&r, "node-a").is_none(), "forced after six minutes");
}

#[test]
fn c3_6_an_out_of_service_node_is_detached_at_once() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(pod("web-0", "node-a"));
    let mut n = node(&r, "node-a");
    n.status.volumes_in_use = vec![UNIQUE.into()];
    r.user(ApiCall::UpdateStatus(Object::Node(n)));
    let mut n = node(&r, "node-a");
    n.spec.taints.push(Taint {
        key: OUT_OF_SERVICE_TAINT.into(),
        value: "nodeshutdown".into(),
        effect: "NoExecute".into(),
    });
    r.user(ApiCall::Update(Object::Node(n)));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    assert!(va(&r, "node-a").is_none());
}

#[test]
fn c1_8_attach_required_false_means_no_volume_attachment() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    r.create(Object::CsiDriver(CsiDriver {
        metadata: ObjectMeta::named(DRIVER),
        spec: CsiDriverSpec {
            attach_required: Some(false),
            ..Default::default()
        },
        ..Default::default()
    }));
    r.create(pod("web-0", "node-a"));
    assert!(va(&r, "node-a").is_none());
    assert!(r.csi_calls.is_empty());
}

#[test]
fn c2_4_a_failed_publish_is_reported_in_status_and_retried() {
    let mut r = rig(&[AccessMode::ReadWriteOnce]);
    let mut fail = true;
    r.answer_csi(move |_| {
        if fail {
            fail = false;
            Err(Status::internal("array offline"))
        } else {
            Ok(Response::Published {
                publish_context: Default::default(),
            })
        }
    });
    r.create(pod("web-0", "node-a"));
    let v = va(&r, "node-a").unwrap();
    assert!(!v.status.attached);
    assert!(
        v.status
            .attach_error
            .as_ref()
            .unwrap()
            .message
            .contains("array offline")
    );
    r.advance(1_500);
    let v = va(&r, "node-a").unwrap();
    assert!(v.status.attached);
    assert!(v.status.attach_error.is_none());
}

/// A rig whose PV names `storage/publish` as its controllerPublishSecretRef.
fn rig_with_publish_secret() -> Rig<Attach> {
    let mut r = Rig::new(Attach::new(AttachConfig::new(DRIVER)));
    r.answer_csi(driver);
    for mut o in objects(&[AccessMode::ReadWriteOnce]) {
        if let Object::Pv(pv) = &mut o {
            pv.spec.csi.as_mut().unwrap().controller_publish_secret_ref = Some(SecretReference {
                name: "publish".into(),
                namespace: "storage".into(),
            });
        }
        r.create(o);
    }
    r
}

#[test]
fn c2_3_publish_and_unpublish_get_the_controller_publish_secret() {
    let mut r = rig_with_publish_secret();
    r.create(Object::Secret(Secret::new(
        "storage",
        "publish",
        &[("key", "k1")],
    )));
    r.create(pod("web-0", "node-a"));
    assert!(va(&r, "node-a").unwrap().status.attached);
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    r.advance(400_000);
    let sent: Vec<(&str, &str)> = r
        .csi_calls
        .iter()
        .map(|(_, c)| match c {
            Request::ControllerPublish(p) => ("publish", p.secrets.0["key"].as_str()),
            Request::ControllerUnpublish(u) => ("unpublish", u.secrets.0["key"].as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sent, [("publish", "k1"), ("unpublish", "k1")]);
    assert!(!format!("{:?}", r.machine).contains("k1"), "never printed");
}

/// A controllerPublishSecretRef naming no possible Secret is refused
/// before any read, as an attach error saying which field to correct.
#[test]
fn c2_3_a_hostile_controller_publish_secret_ref_is_refused_before_any_read() {
    let mut r = rig_with_publish_secret();
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    pv.spec.csi.as_mut().unwrap().controller_publish_secret_ref = Some(SecretReference {
        name: "publish".into(),
        namespace: "storage/../kube-system".into(),
    });
    r.user(ApiCall::Update(Object::Pv(pv)));
    r.create(pod("web-0", "node-a"));
    assert!(r.csi_calls.is_empty());
    assert!(
        !r.reads
            .iter()
            .any(|c| matches!(c, ApiCall::Get(k) if k.kind == Kind::Secret))
    );
    let error = va(&r, "node-a")
        .unwrap()
        .status
        .attach_error
        .unwrap()
        .message;
    assert!(
        error.contains("in its controllerPublishSecretRef"),
        "{error}"
    );
    assert!(error.contains("correct the PV"), "{error}");
}

#[test]
fn c2_3_a_missing_controller_publish_secret_is_an_attach_error() {
    let mut r = rig_with_publish_secret();
    r.create(pod("web-0", "node-a"));
    let v = va(&r, "node-a").unwrap();
    assert!(!v.status.attached);
    assert_eq!(
        v.status.attach_error.unwrap().message,
        "error getting secret publish in namespace storage: secrets \"publish\" not found"
    );
    assert!(r.csi_calls.is_empty(), "no ControllerPublish without it");
    r.create(Object::Secret(Secret::new(
        "storage",
        "publish",
        &[("key", "k1")],
    )));
    r.advance(2_000);
    assert!(va(&r, "node-a").unwrap().status.attached, "then retried");
}

/// Properties under faults: API conflicts, CSI calls failing before or after
/// their effect, completions late, reordered and duplicated, restarts.
mod under_faults {
    use std::collections::{BTreeMap, BTreeSet};

    use quickcheck::TestResult;

    use super::*;
    use crate::control::ApiCall;
    use crate::control::chaos::{Chaos, checker};

    fn world(seed: u64, rwo: bool) -> Chaos<Attach> {
        let mut c = Chaos::new(
            seed,
            || Attach::new(AttachConfig::new(DRIVER)),
            |_, call| driver(call),
        );
        let mode = if rwo {
            AccessMode::ReadWriteOnce
        } else {
            AccessMode::ReadWriteMany
        };
        for o in objects(&[mode]) {
            c.user(ApiCall::Create(o));
        }
        c
    }

    /// Nodes the volume is attached to, as the driver's calls left it (node
    /// ids are `id-<node>`).
    fn attached(c: &Chaos<Attach>) -> BTreeSet<String> {
        let mut on = BTreeSet::new();
        for r in c.csi.iter().filter(|r| r.done) {
            match &r.call {
                Request::ControllerPublish(p) => {
                    on.insert(p.node_id.trim_start_matches("id-").to_string());
                }
                Request::ControllerUnpublish(u) => {
                    on.remove(u.node_id.as_deref().unwrap_or("").trim_start_matches("id-"));
                }
                _ => {}
            }
        }
        on
    }

    fn pod_nodes(c: &Chaos<Attach>) -> BTreeSet<String> {
        c.store
            .objects()
            .filter_map(|o| match o {
                Object::Pod(p) => p.node().map(str::to_string),
                _ => None,
            })
            .collect()
    }

    /// A ReadWriteOnce volume is never attached to two nodes; once faults
    /// stop, it is attached exactly where pods want it (one node for RWO)
    /// and every VolumeAttachment left says attached.
    fn attach_detach(seed: u64, rwo: bool, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world(seed, rwo);
        let mut pods = BTreeMap::new();
        for (what, x) in steps {
            let name = format!("p{}", x % 3);
            match what % 8 {
                0 if !pods.contains_key(&name) => {
                    let node = if x.is_multiple_of(2) {
                        "node-a"
                    } else {
                        "node-b"
                    };
                    pods.insert(name.clone(), node);
                    c.user(ApiCall::Create(pod(&name, node)));
                }
                1 if pods.remove(&name).is_some() => {
                    c.user(ApiCall::Delete(ObjectKey::new(Kind::Pod, "default", &name)));
                }
                _ => {
                    if let Err(e) = c.step(x) {
                        return TestResult::error(e.to_string());
                    }
                }
            }
            if rwo && attached(&c).len() > 1 {
                return TestResult::error(format!("RWO attached to {:?}", attached(&c)));
            }
        }
        if let Err(e) = c.settle() {
            return TestResult::error(e.to_string());
        }
        let (on, want) = (attached(&c), pod_nodes(&c));
        let vas: Vec<&VolumeAttachment> = c
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Va(v) => Some(v),
                _ => None,
            })
            .collect();
        let ok = if rwo {
            on.is_subset(&want) && on.len() == usize::from(!want.is_empty())
        } else {
            on == want
        };
        if !ok {
            return TestResult::error(format!("attached to {on:?}, pods on {want:?}"));
        }
        if let Some(v) = vas.iter().find(|v| !v.status.attached) {
            return TestResult::error(format!("{} left unattached", v.metadata.name));
        }
        TestResult::passed()
    }

    #[test]
    fn attach_detach_stays_safe_and_converges_under_faults() {
        checker(200, 60).quickcheck(attach_detach as fn(u64, bool, Vec<(u8, u8)>) -> TestResult);
    }
}

/// Incremental passes: reconciling only the volumes and nodes a change
/// dirtied reaches the same effects as reconciling everything (the
/// machine told to resync after every change is the oracle: a resync
/// dirties every volume and node, as the whole-world pass did).
mod incremental {
    use std::cell::Cell;
    use std::rc::Rc;

    use quickcheck::TestResult;

    use super::*;
    use crate::control::ApiCall;
    use crate::control::chaos::checker;

    /// Two volumes (RWO `pv-1` for claim `data`, RWX `pv-2` for `data2`),
    /// two nodes; the driver fails every seventh call.
    fn world() -> Rig<Attach> {
        let mut r = Rig::new(Attach::new(AttachConfig::new(DRIVER)));
        let calls = Rc::new(Cell::new(0u32));
        r.answer_csi(move |call| {
            calls.set(calls.get() + 1);
            if calls.get().is_multiple_of(7) {
                return Err(Status::new(crate::Code::Unavailable, "injected"));
            }
            driver(call)
        });
        for o in objects(&[AccessMode::ReadWriteOnce]) {
            r.create(o);
        }
        let mut pv = PersistentVolume::new("pv-2");
        pv.spec.access_modes = vec![AccessMode::ReadWriteMany];
        pv.spec.csi = Some(CsiSource {
            driver: DRIVER.into(),
            volume_handle: "vol-2".into(),
            ..Default::default()
        });
        r.create(Object::Pv(pv));
        let mut c = PersistentVolumeClaim::new("default", "data2");
        c.spec.volume_name = Some("pv-2".into());
        r.create(Object::Pvc(c));
        r
    }

    fn pod_of(name: &str, node: &str, claim: &str) -> Object {
        let Object::Pod(mut p) = pod(name, node) else {
            unreachable!()
        };
        if let Some(pvc) = &mut p.spec.volumes[0].persistent_volume_claim {
            pvc.claim_name = claim.into();
        }
        Object::Pod(p)
    }

    /// The user's change for `(what, x)`, against what `r` stores.
    fn change(r: &Rig<Attach>, what: u8, x: u8) -> Option<ApiCall> {
        let name = format!("p{}", x % 4);
        let node = if x.is_multiple_of(2) {
            "node-a"
        } else {
            "node-b"
        };
        let claim = if x % 8 < 4 { "data" } else { "data2" };
        let stored = |kind, ns, name: &str| r.get(kind, ns, name).cloned();
        Some(match what % 6 {
            0 => ApiCall::Create(pod_of(&name, node, claim)),
            1 => ApiCall::Delete(ObjectKey::new(Kind::Pod, "default", &name)),
            2 => {
                let Some(Object::Node(mut n)) = stored(Kind::Node, "", node) else {
                    return None;
                };
                let unique =
                    names::unique_volume_name(DRIVER, if x % 8 < 4 { "vol-1" } else { "vol-2" });
                if n.status.volumes_in_use.contains(&unique) {
                    n.status.volumes_in_use.retain(|v| *v != unique);
                } else {
                    n.status.volumes_in_use.push(unique);
                }
                ApiCall::UpdateStatus(Object::Node(n))
            }
            3 => {
                let Some(Object::Node(mut n)) = stored(Kind::Node, "", node) else {
                    return None;
                };
                if n.ready() {
                    n.status.conditions.clear();
                } else {
                    n.status.conditions.push(NodeCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                    });
                }
                ApiCall::UpdateStatus(Object::Node(n))
            }
            4 => {
                let Some(Object::Node(mut n)) = stored(Kind::Node, "", node) else {
                    return None;
                };
                if n.out_of_service() {
                    n.spec.taints.clear();
                } else {
                    n.spec.taints.push(Taint {
                        key: OUT_OF_SERVICE_TAINT.into(),
                        value: String::new(),
                        effect: "NoExecute".into(),
                    });
                }
                ApiCall::Update(Object::Node(n))
            }
            _ => return None,
        })
    }

    fn same_effects(steps: Vec<(u8, u8)>) -> TestResult {
        crate::control::chaos::same_as_resync(world(), world(), steps, change, 5_000)
    }

    #[test]
    fn dirty_passes_reach_what_whole_world_passes_reach() {
        checker(300, 60).quickcheck(same_effects as fn(Vec<(u8, u8)>) -> TestResult);
    }
}

/// `--node-deployment`: an attacher on node-a carries out node-a's
/// attachments and leaves node-b's to node-b's attacher.
#[test]
fn an_attacher_deployed_on_a_node_carries_out_only_that_nodes_attachments() {
    let mut config = AttachConfig::new(DRIVER);
    config.node = Some("node-a".into());
    config.attach_detach = false;
    let mut r = Rig::new(Attach::new(config));
    r.answer_csi(driver);
    for o in objects(&[AccessMode::ReadWriteMany]) {
        r.create(o);
    }
    for n in ["node-a", "node-b"] {
        r.create(Object::Va(VolumeAttachment::new(
            &va_name(n),
            DRIVER,
            n,
            "pv-1",
        )));
    }
    assert!(va(&r, "node-a").unwrap().status.attached);
    assert!(!va(&r, "node-b").unwrap().status.attached, "node-b's own");
    let published: Vec<String> = r
        .csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::ControllerPublish(p) => Some(p.node_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(published, ["id-node-a"]);
}
