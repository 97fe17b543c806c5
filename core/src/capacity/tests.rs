//! The capacity tracker, case by case as external-provisioner's capacity
//! controller behaves.

use std::cell::RefCell;
use std::rc::Rc;

use super::*;
use crate::Status;
use crate::control::rig::Rig;

const DRIVER: &str = "volplane.csi.io";
const ZONE: &str = "topology.volplane.io/zone";
const NAMESPACE: &str = "volplane";

/// The driver's free bytes by zone ("" without a segment), shared with the
/// test so it can change them.
type Free = Rc<RefCell<BTreeMap<String, u64>>>;

fn rig(config: CapacityConfig) -> (Rig<CapacityTracker>, Free) {
    let mut r = Rig::new(CapacityTracker::new(config));
    let free: Free = Rc::new(RefCell::new(BTreeMap::new()));
    let f = free.clone();
    r.answer_csi(move |call| match call {
        Request::GetCapacity(g) => {
            let zone = g
                .accessible_topology
                .as_ref()
                .and_then(|t| t.get(ZONE).map(|z| z.to_string()))
                .unwrap_or_default();
            Ok(Response::Capacity {
                available_bytes: f.borrow().get(&zone).copied().unwrap_or(100 << 30),
                maximum_volume_size: Some(10 << 30),
                minimum_volume_size: None,
            })
        }
        other => Err(Status::unimplemented(other.method())),
    });
    (r, free)
}

fn node(r: &mut Rig<CapacityTracker>, name: &str, zone: &str) {
    let mut n = Node::new(name);
    n.metadata.labels.insert(ZONE.into(), zone.into());
    r.create(Object::Node(n));
    let mut c = CsiNode::new(name);
    c.spec.drivers.push(CsiNodeDriver {
        name: DRIVER.into(),
        node_id: name.into(),
        topology_keys: vec![ZONE.into()],
        allocatable: None,
    });
    r.create(Object::CsiNode(c));
}

fn class(r: &mut Rig<CapacityTracker>, name: &str, mode: BindingMode) {
    let mut sc = StorageClass::new(name, DRIVER);
    sc.volume_binding_mode = Some(mode);
    sc.parameters.insert("pool".into(), name.into());
    r.create(Object::Class(sc));
}

/// The tracker's objects: (class, zone, capacity bytes).
fn objects(r: &Rig<CapacityTracker>) -> Vec<(String, String, u64)> {
    let mut out: Vec<_> = r
        .store
        .objects()
        .filter_map(|o| match o {
            Object::Capacity(c) => Some((
                c.storage_class_name.clone(),
                c.node_topology
                    .as_ref()
                    .and_then(|t| t.match_labels.get(ZONE).map(str::to_owned))
                    .unwrap_or_default(),
                c.capacity.as_ref().map_or(0, Quantity::bytes),
            )),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn gets(r: &Rig<CapacityTracker>) -> usize {
    r.csi_calls
        .iter()
        .filter(|(_, c)| matches!(c, Request::GetCapacity(_)))
        .count()
}

fn two_zones() -> (Rig<CapacityTracker>, Free) {
    let (mut r, free) = rig(CapacityConfig::new(DRIVER, NAMESPACE));
    node(&mut r, "node-a", "a");
    node(&mut r, "node-b", "b");
    node(&mut r, "node-b2", "b");
    class(&mut r, "local", BindingMode::WaitForFirstConsumer);
    class(&mut r, "fast", BindingMode::Immediate);
    (r, free)
}

#[test]
fn one_object_per_segment_for_each_wait_for_first_consumer_class() {
    let (r, _) = two_zones();
    assert_eq!(
        objects(&r),
        [
            ("local".into(), "a".into(), 100 << 30),
            ("local".into(), "b".into(), 100 << 30)
        ]
    );
    let Some((_, Request::GetCapacity(g))) = r.csi_calls.first() else {
        panic!("no GetCapacity")
    };
    assert_eq!(&g.parameters["pool"], "local", "the class's parameters");
    let Some(Object::Capacity(c)) = r
        .store
        .objects()
        .find(|o| o.kind() == Kind::CsiStorageCapacity)
    else {
        panic!()
    };
    assert_eq!(c.metadata.namespace, NAMESPACE);
    assert_eq!(&c.metadata.labels[DRIVER_NAME_LABEL], DRIVER);
    assert_eq!(&c.metadata.labels[MANAGED_BY_LABEL], "external-provisioner");
    assert!(c.metadata.name.starts_with("csisc-"));
    assert_eq!(
        c.maximum_volume_size.as_ref().map(Quantity::bytes),
        Some(10 << 30)
    );
}

#[test]
fn immediate_classes_get_objects_only_when_asked() {
    let mut config = CapacityConfig::new(DRIVER, NAMESPACE);
    config.immediate_binding = true;
    let (mut r, _) = rig(config);
    node(&mut r, "node-a", "a");
    class(&mut r, "fast", BindingMode::Immediate);
    assert_eq!(objects(&r), [("fast".into(), "a".into(), 100 << 30)]);
}

#[test]
fn the_poll_refreshes_and_writes_only_what_changed() {
    let (mut r, free) = two_zones();
    let writes = r.writes.len();
    r.advance(60_000);
    assert_eq!(gets(&r), 4, "each object asked again at the poll");
    assert_eq!(r.writes.len(), writes, "nothing changed, nothing written");
    free.borrow_mut().insert("a".into(), 7 << 30);
    r.advance(60_000);
    assert_eq!(
        objects(&r),
        [
            ("local".into(), "a".into(), 7 << 30),
            ("local".into(), "b".into(), 100 << 30)
        ]
    );
    assert_eq!(r.writes.len(), writes + 1, "the one object that changed");
}

#[test]
fn a_volume_made_in_a_segment_refreshes_that_segment_at_once() {
    let (mut r, free) = two_zones();
    free.borrow_mut().insert("b".into(), 1 << 30);
    let mut pv = PersistentVolume::new("pvc-1");
    pv.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "v".into(),
        ..Default::default()
    });
    pv.spec.node_affinity = Some(VolumeNodeAffinity {
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
    let before = gets(&r);
    r.create(Object::Pv(pv));
    assert_eq!(gets(&r), before + 1, "zone b alone");
    assert_eq!(objects(&r)[1], ("local".into(), "b".into(), 1 << 30));
}

#[test]
fn a_class_or_a_segment_that_goes_takes_its_objects_along() {
    let (mut r, _) = two_zones();
    // node-b's driver is gone, node-b2 still has it: zone b stays.
    r.user(ApiCall::Delete(ObjectKey::new(Kind::CsiNode, "", "node-b")));
    assert_eq!(objects(&r).len(), 2);
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::CsiNode,
        "",
        "node-b2",
    )));
    assert_eq!(objects(&r), [("local".into(), "a".into(), 100 << 30)]);
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::StorageClass,
        "",
        "local",
    )));
    assert!(objects(&r).is_empty());
}

#[test]
fn objects_of_other_managers_are_never_touched_and_stale_ones_go() {
    let (mut r, _) = two_zones();
    let stale = |name: &str, manager: &str| {
        let mut c = CsiStorageCapacity {
            metadata: ObjectMeta::namespaced(NAMESPACE, name),
            storage_class_name: "gone".into(),
            ..Default::default()
        };
        c.metadata
            .labels
            .insert(DRIVER_NAME_LABEL.into(), DRIVER.into());
        c.metadata
            .labels
            .insert(MANAGED_BY_LABEL.into(), manager.into());
        Object::Capacity(c)
    };
    r.create(stale("theirs", "external-provisioner-node-a"));
    r.create(stale("ours", MANAGED_BY));
    let names: Vec<&str> = r
        .store
        .objects()
        .filter(|o| o.kind() == Kind::CsiStorageCapacity)
        .map(|o| o.meta().name.as_str())
        .collect();
    assert!(names.contains(&"theirs"));
    assert!(!names.contains(&"ours"), "{names:?}");
}

#[test]
fn an_object_deleted_by_someone_is_made_again() {
    let (mut r, _) = two_zones();
    let name = r
        .store
        .objects()
        .find(|o| o.kind() == Kind::CsiStorageCapacity)
        .unwrap()
        .meta()
        .name
        .clone();
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::CsiStorageCapacity,
        NAMESPACE,
        &name,
    )));
    assert_eq!(objects(&r).len(), 2);
}

#[test]
fn a_fixed_segment_gives_one_object_per_class_and_the_owner_is_set() {
    let mut config = CapacityConfig::new(DRIVER, NAMESPACE);
    config.fixed_segment = Some(Term::new());
    config.owner = Some(OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: "volplane-controller".into(),
        uid: "uid-d".into(),
        controller: Some(true),
    });
    let (mut r, _) = rig(config);
    class(&mut r, "local", BindingMode::WaitForFirstConsumer);
    let Some(Object::Capacity(c)) = r
        .store
        .objects()
        .find(|o| o.kind() == Kind::CsiStorageCapacity)
    else {
        panic!("no object")
    };
    assert_eq!(
        c.node_topology,
        Some(LabelSelector::default()),
        "every node"
    );
    assert_eq!(c.metadata.owner_references[0].uid, "uid-d");
    let Some((_, Request::GetCapacity(g))) = r.csi_calls.first() else {
        panic!()
    };
    assert_eq!(g.accessible_topology, None);
}

#[test]
fn a_failed_get_capacity_is_retried_with_backoff() {
    let (mut r, _) = rig(CapacityConfig::new(DRIVER, NAMESPACE));
    let tries = Rc::new(RefCell::new(0));
    let t = tries.clone();
    r.answer_csi(move |_| {
        *t.borrow_mut() += 1;
        if *t.borrow() < 3 {
            return Err(Status::new(crate::Code::Unavailable, "busy"));
        }
        Ok(Response::Capacity {
            available_bytes: 5 << 30,
            maximum_volume_size: None,
            minimum_volume_size: None,
        })
    });
    node(&mut r, "node-a", "a");
    class(&mut r, "local", BindingMode::WaitForFirstConsumer);
    assert!(objects(&r).is_empty());
    r.advance(1_000);
    assert!(objects(&r).is_empty(), "second try failed too");
    r.advance(2_000);
    assert_eq!(objects(&r), [("local".into(), "a".into(), 5 << 30)]);
}

#[test]
fn a_driver_without_topology_keys_gets_the_empty_segment_where_it_runs() {
    let (mut r, _) = rig(CapacityConfig::new(DRIVER, NAMESPACE));
    let mut c = CsiNode::new("node-a");
    c.spec.drivers.push(CsiNodeDriver {
        name: DRIVER.into(),
        node_id: "node-a".into(),
        topology_keys: vec![],
        allocatable: None,
    });
    r.create(Object::Node(Node::new("node-a")));
    r.create(Object::CsiNode(c));
    class(&mut r, "local", BindingMode::WaitForFirstConsumer);
    assert_eq!(objects(&r), [("local".into(), String::new(), 100 << 30)]);
}

#[test]
fn a_node_deployments_manager_label_fits_a_label_value_as_upstreams() {
    assert_eq!(managed_by_node("node-a"), "external-provisioner-node-a");
    let long = "n".repeat(60);
    let m = managed_by_node(&long);
    assert!(
        m.len() <= 63 && m.starts_with("external-provisioner-"),
        "{m}"
    );
    let medium = "worker-".repeat(5);
    let m = managed_by_node(&medium);
    assert!(m.len() <= 63 && m.ends_with(&medium), "{m}");
}

/// Found by the simulator (seed 71): a volume made while GetCapacity for
/// its segment was in flight must not leave the object with the answer
/// from before it: the answer is dropped and GetCapacity asked again.
#[test]
fn a_change_while_get_capacity_is_in_flight_asks_again() {
    use crate::control::{Effect, Input};
    use crate::machine::Machine;
    let mut config = CapacityConfig::new(DRIVER, NAMESPACE);
    config.poll_interval = None;
    let mut m = CapacityTracker::new(config);
    let mut n = Node::new("node-a");
    n.metadata.labels.insert(ZONE.into(), "a".into());
    let mut c = CsiNode::new("node-a");
    c.spec.drivers.push(CsiNodeDriver {
        name: DRIVER.into(),
        node_id: "node-a".into(),
        topology_keys: vec![ZONE.into()],
        allocatable: None,
    });
    let mut sc = StorageClass::new("local", DRIVER);
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    for o in [Object::Node(n), Object::CsiNode(c), Object::Class(sc)] {
        m.handle(0, Input::Watch(Watch::Applied(o.into())));
    }
    let Some(Effect::Csi { op, .. }) = m.poll() else {
        panic!("GetCapacity first")
    };
    let mut pv = PersistentVolume::new("pvc-1");
    pv.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "v".into(),
        ..Default::default()
    });
    m.handle(1, Input::Watch(Watch::Applied(Object::Pv(pv).into())));
    assert!(m.poll().is_none(), "one call per item at a time");
    let before = Ok(Response::Capacity {
        available_bytes: 100 << 30,
        maximum_volume_size: None,
        minimum_volume_size: None,
    });
    m.handle(2, Input::CsiDone { op, result: before });
    assert!(
        matches!(
            m.poll(),
            Some(Effect::Csi {
                call: Request::GetCapacity(_),
                ..
            })
        ),
        "asked again, nothing written from the old answer"
    );
}

/// Hostile: an object at the name a (segment, class) owns, edited by
/// someone to say it is for another zone and class, never stands — it is
/// put back (or deleted as wanted by nothing, and made again).
#[test]
fn an_object_edited_to_claim_another_segment_is_put_back() {
    let (mut r, free) = two_zones();
    let name = r
        .store
        .objects()
        .find_map(|o| match o {
            Object::Capacity(c)
                if c.node_topology
                    .as_ref()
                    .is_some_and(|t| &t.match_labels[ZONE] == "a") =>
            {
                Some(c.metadata.name.clone())
            }
            _ => None,
        })
        .unwrap();
    let Some(Object::Capacity(mut c)) = r.get(Kind::CsiStorageCapacity, NAMESPACE, &name).cloned()
    else {
        panic!()
    };
    c.node_topology = Some(LabelSelector {
        match_labels: [(ZONE.to_string(), "b".to_string())].into(),
        match_expressions: vec![],
    });
    c.storage_class_name = "fast".into();
    r.user(ApiCall::Update(Object::Capacity(c)));
    // Whatever refresh comes next, what is left says the truth.
    free.borrow_mut().insert("a".into(), 5 << 30);
    r.advance(60_000);
    assert_eq!(
        objects(&r),
        [
            ("local".into(), "a".into(), 5 << 30),
            ("local".into(), "b".into(), 100 << 30)
        ]
    );
}
