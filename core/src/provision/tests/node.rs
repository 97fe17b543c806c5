//! `--node-deployment`: one provisioner per node, as external-provisioner
//! deployed in the driver's DaemonSet behaves.

use std::cell::RefCell;
use std::rc::Rc;

use super::*;
use crate::provision::node::NodeScope;

const ZONE: &str = "topology.volplane.io/zone";

/// The provisioner of node-a (zone a); the driver reports `free` bytes.
fn node_rig(free: Rc<RefCell<u64>>) -> Rig<Provisioner> {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.topology = true;
    config.node = Some(NodeScope {
        node: "node-a".into(),
        topology: [(ZONE.to_string(), "a".to_string())].into(),
        immediate_binding: true,
        base_delay: 20_000,
        max_delay: 60_000,
    });
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(move |call| match call {
        Request::CreateVolume(c) => created(c),
        Request::DeleteVolume(_) => Ok(Response::Empty),
        Request::GetCapacity(_) => Ok(Response::Capacity {
            available_bytes: *free.borrow(),
            maximum_volume_size: None,
            minimum_volume_size: None,
        }),
        other => Err(Status::unimplemented(other.method())),
    });
    registered_node(&mut r, "node-a", ZONE, "a");
    registered_node(&mut r, "node-b", ZONE, "b");
    r
}

fn class_with(r: &mut Rig<Provisioner>, mode: BindingMode) {
    let mut sc = StorageClass::new("fast", DRIVER);
    sc.volume_binding_mode = Some(mode);
    r.create(Object::Class(sc));
}

fn on(node: &str, name: &str) -> PersistentVolumeClaim {
    let mut c = claim(name);
    c.metadata
        .annotations
        .insert(names::ANN_SELECTED_NODE.into(), node.into());
    c
}

fn selected(r: &Rig<Provisioner>, name: &str) -> Option<String> {
    match r.get(Kind::PersistentVolumeClaim, "default", name) {
        Some(Object::Pvc(c)) => c
            .metadata
            .annotation(names::ANN_SELECTED_NODE)
            .map(str::to_string),
        _ => None,
    }
}

fn capacity_checks(r: &Rig<Provisioner>) -> usize {
    r.csi_calls
        .iter()
        .filter(|(_, c)| matches!(c, Request::GetCapacity(_)))
        .count()
}

#[test]
fn only_claims_selected_for_this_node_are_provisioned() {
    let mut r = node_rig(Rc::new(RefCell::new(100 << 30)));
    class_with(&mut r, BindingMode::WaitForFirstConsumer);
    r.create(Object::Pvc(on("node-b", "theirs")));
    assert!(creates(&r).is_empty(), "another node's claim is left alone");
    r.create(Object::Pvc(on("node-a", "ours")));
    assert_eq!(creates(&r).len(), 1);
    let req = creates(&r)[0];
    assert_eq!(&req.accessibility.as_ref().unwrap().requisite[0][ZONE], "a");
}

#[test]
fn an_immediate_claim_is_taken_after_a_jittered_wait_when_the_node_has_room() {
    let mut r = node_rig(Rc::new(RefCell::new(100 << 30)));
    class_with(&mut r, BindingMode::Immediate);
    r.create(Object::Pvc(claim("data")));
    assert_eq!(capacity_checks(&r), 0, "nothing before the wait");
    r.advance(20_000);
    assert_eq!(capacity_checks(&r), 1, "within the base delay");
    let Some((_, Request::GetCapacity(g))) = r
        .csi_calls
        .iter()
        .find(|(_, c)| matches!(c, Request::GetCapacity(_)))
    else {
        panic!()
    };
    assert_eq!(&g.accessible_topology.as_ref().unwrap()[ZONE], "a");
    assert_eq!(selected(&r, "data").as_deref(), Some("node-a"));
    assert_eq!(creates(&r).len(), 1, "then provisioned here");
}

#[test]
fn without_room_the_node_stands_back_and_asks_again_later() {
    let free = Rc::new(RefCell::new(1 << 20));
    let mut r = node_rig(free.clone());
    class_with(&mut r, BindingMode::Immediate);
    r.create(Object::Pvc(claim("data")));
    r.advance(20_000);
    assert_eq!(capacity_checks(&r), 1);
    assert_eq!(selected(&r, "data"), None, "no room: not taken");
    *free.borrow_mut() = 100 << 30;
    r.advance(40_000);
    assert_eq!(capacity_checks(&r), 2, "asked again after a longer wait");
    assert_eq!(selected(&r, "data").as_deref(), Some("node-a"));
}

#[test]
fn a_claim_another_node_took_meanwhile_is_left_to_it() {
    let mut r = node_rig(Rc::new(RefCell::new(100 << 30)));
    class_with(&mut r, BindingMode::Immediate);
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let mut taken = c.clone();
    taken
        .metadata
        .annotations
        .insert(names::ANN_SELECTED_NODE.into(), "node-b".into());
    r.user(ApiCall::Update(Object::Pvc(taken)));
    r.advance(60_000);
    assert_eq!(capacity_checks(&r), 0);
    assert!(creates(&r).is_empty());
    assert_eq!(selected(&r, "data").as_deref(), Some("node-b"));
}

#[test]
fn wait_for_first_consumer_claims_are_never_taken_nor_with_immediate_binding_off() {
    let mut r = node_rig(Rc::new(RefCell::new(100 << 30)));
    class_with(&mut r, BindingMode::WaitForFirstConsumer);
    r.create(Object::Pvc(claim("data")));
    r.advance(120_000);
    assert_eq!(capacity_checks(&r), 0, "the scheduler selects for these");
}

#[test]
fn only_volumes_this_node_reaches_are_deleted() {
    let mut r = node_rig(Rc::new(RefCell::new(100 << 30)));
    let mut v = released(&mut r, ReclaimPolicy::Delete);
    // released() made one with no affinity: reachable, deleted.
    assert_eq!(
        r.csi_calls
            .iter()
            .filter(|(_, c)| matches!(c, Request::DeleteVolume(_)))
            .count(),
        1
    );
    v.metadata.name = "pvc-2".into();
    v.metadata.resource_version.clear();
    v.metadata.uid.clear();
    v.spec.csi.as_mut().unwrap().volume_handle = "vol-2".into();
    v.spec.node_affinity = Some(VolumeNodeAffinity {
        required: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: vec![NodeSelectorRequirement {
                    key: ZONE.into(),
                    operator: "In".into(),
                    values: vec!["b".into()],
                }],
            }],
        }),
    });
    r.create(Object::Pv(v));
    let deletes: Vec<&str> = r
        .csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::DeleteVolume(d) => Some(d.volume_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deletes, ["vol-1"], "zone b's volume is node-b's to delete");
}
