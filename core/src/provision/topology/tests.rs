//! Upstream's topology cases, one test each, over a small cluster: nodes
//! labelled with a zone (and some with a rack), the driver registered on
//! each with its topology keys.

use super::*;
use crate::model::{CsiNode, CsiNodeDriver, Node, TopologySelectorLabelRequirement};

const DRIVER: &str = "volplane.csi.io";
const ZONE: &str = "topology.volplane.io/zone";
const RACK: &str = "topology.volplane.io/rack";

/// A node with `labels`, and its CSINode listing `keys` for the driver.
fn node(cache: &mut Cache, name: &str, labels: &[(&str, &str)], keys: &[&str]) {
    let mut n = Node::new(name);
    for (k, v) in labels {
        n.metadata.labels.insert(k.to_string(), v.to_string());
    }
    cache.apply(Object::Node(n));
    let mut c = CsiNode::new(name);
    c.spec.drivers.push(CsiNodeDriver {
        name: DRIVER.into(),
        node_id: name.into(),
        topology_keys: keys.iter().map(|k| k.to_string()).collect(),
        allocatable: None,
    });
    cache.apply(Object::CsiNode(c));
}

/// Three nodes over two zones.
fn zones() -> Cache {
    let mut cache = Cache::default();
    node(&mut cache, "node-a", &[(ZONE, "zone-a")], &[ZONE]);
    node(&mut cache, "node-b", &[(ZONE, "zone-b")], &[ZONE]);
    node(&mut cache, "node-c", &[(ZONE, "zone-a")], &[ZONE]);
    cache
}

fn placement<'a>(selected: Option<&'a str>, allowed: &'a [TopologySelectorTerm]) -> Placement<'a> {
    Placement {
        driver: DRIVER,
        claim: "data",
        allowed,
        selected_node: selected,
        strict: false,
        immediate: true,
    }
}

fn allowed(reqs: &[(&str, &[&str])]) -> TopologySelectorTerm {
    TopologySelectorTerm {
        match_label_expressions: reqs
            .iter()
            .map(|(k, vs)| TopologySelectorLabelRequirement {
                key: k.to_string(),
                values: vs.iter().map(|v| v.to_string()).collect(),
            })
            .collect(),
    }
}

/// The segments as `key=value,…` strings, for comparing.
fn show(ts: &[Topology]) -> Vec<String> {
    ts.iter()
        .map(|t| {
            let parts: Vec<String> = t.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.join(",")
        })
        .collect()
}

fn zone(z: &str) -> String {
    format!("{ZONE}={z}")
}

#[test]
fn without_a_selected_node_or_immediate_topology_nothing_is_required() {
    let p = Placement {
        immediate: false,
        ..placement(None, &[])
    };
    assert_eq!(requirement(&p, &zones()), Ok(None));
}

#[test]
fn immediate_binding_aggregates_every_nodes_segment_once() {
    let r = requirement(&placement(None, &[]), &zones())
        .unwrap()
        .expect("a requirement");
    assert_eq!(show(&r.requisite), vec![zone("zone-a"), zone("zone-b")]);
    let mut preferred = show(&r.preferred);
    assert_eq!(preferred.len(), 2, "a rotation of the requisite");
    preferred.sort();
    assert_eq!(preferred, show(&r.requisite));
}

#[test]
fn immediate_binding_spreads_a_statefulsets_claims_over_the_segments() {
    let first = |claim: &str| {
        let p = Placement {
            claim,
            ..placement(None, &[])
        };
        let r = requirement(&p, &zones()).unwrap().expect("a requirement");
        show(&r.preferred)[0].clone()
    };
    assert_ne!(
        first("data-web-0"),
        first("data-web-1"),
        "ordinals alternate"
    );
    assert_eq!(first("data-web-0"), first("data-web-2"));
    assert_eq!(
        first("data-web-1"),
        first("logs-web-1"),
        "one member's claims land together"
    );
}

#[test]
fn nodes_without_every_key_are_left_out_of_the_aggregate() {
    let mut cache = Cache::default();
    node(
        &mut cache,
        "n1",
        &[(ZONE, "z1"), (RACK, "r1")],
        &[RACK, ZONE],
    );
    node(&mut cache, "n2", &[(ZONE, "z2")], &[RACK, ZONE]);
    node(
        &mut cache,
        "n3",
        &[(ZONE, "z1"), (RACK, "r2")],
        &[RACK, ZONE],
    );
    let r = requirement(&placement(Some("n1"), &[]), &cache)
        .unwrap()
        .expect("a requirement");
    assert_eq!(
        show(&r.requisite),
        vec![
            format!("{RACK}=r1,{ZONE}=z1"),
            format!("{RACK}=r2,{ZONE}=z1")
        ]
    );
}

#[test]
fn a_selected_node_leads_the_preferred_list_of_the_aggregate() {
    let r = requirement(&placement(Some("node-b"), &[]), &zones())
        .unwrap()
        .expect("a requirement");
    assert_eq!(show(&r.requisite), vec![zone("zone-a"), zone("zone-b")]);
    assert_eq!(show(&r.preferred), vec![zone("zone-b"), zone("zone-a")]);
}

#[test]
fn allowed_topologies_distribute_their_values_over_their_keys() {
    let terms = [
        allowed(&[(ZONE, &["z1", "z2"]), (RACK, &["r1", "r2"])]),
        allowed(&[(ZONE, &["z3"])]),
    ];
    let flat: Vec<String> = flatten(&terms).iter().map(go_term).collect();
    let rack = RACK;
    let z = ZONE;
    assert_eq!(
        flat,
        vec![
            format!("[{{{rack} r1}} {{{z} z1}}]"),
            format!("[{{{rack} r1}} {{{z} z2}}]"),
            format!("[{{{rack} r2}} {{{z} z1}}]"),
            format!("[{{{rack} r2}} {{{z} z2}}]"),
            format!("[{{{z} z3}}]"),
        ]
    );
    // As a requisite: fewer segments first, then by key and value.
    let r = requirement(&placement(None, &terms), &zones())
        .unwrap()
        .expect("a requirement");
    assert_eq!(show(&r.requisite)[0], zone("z3"));
    assert_eq!(r.requisite.len(), 5);
}

#[test]
fn allowed_topologies_replace_the_aggregate_and_the_selected_node_leads() {
    let terms = [allowed(&[(ZONE, &["zone-b", "zone-a", "zone-c"])])];
    let r = requirement(&placement(Some("node-a"), &terms), &zones())
        .unwrap()
        .expect("a requirement");
    assert_eq!(
        show(&r.requisite),
        vec![zone("zone-a"), zone("zone-b"), zone("zone-c")]
    );
    assert_eq!(show(&r.preferred)[0], zone("zone-a"));
}

#[test]
fn a_selected_node_outside_the_allowed_topologies_is_refused() {
    let terms = [allowed(&[(ZONE, &["zone-b"])])];
    let e = requirement(&placement(Some("node-a"), &terms), &zones()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "error generating accessibility requirements: topology [{{{ZONE} zone-a}}] from selected node \"node-a\" is not in requisite: [[{{{ZONE} zone-b}}]]"
        )
    );
    assert!(matches!(e, TopologyError::Retry(_)));
}

#[test]
fn strict_topology_requires_the_selected_nodes_segment_alone() {
    let p = Placement {
        strict: true,
        ..placement(Some("node-b"), &[])
    };
    let r = requirement(&p, &zones()).unwrap().expect("a requirement");
    assert_eq!(show(&r.requisite), vec![zone("zone-b")]);
    assert_eq!(show(&r.preferred), vec![zone("zone-b")]);
}

#[test]
fn strict_topology_refuses_a_node_the_class_does_not_allow() {
    let terms = [allowed(&[(ZONE, &["zone-b"])])];
    let p = Placement {
        strict: true,
        ..placement(Some("node-a"), &terms)
    };
    let e = requirement(&p, &zones()).unwrap_err();
    assert_eq!(
        e,
        TopologyError::Retry(format!(
            "selected node '\"node-a\"' topology '[{{{ZONE} zone-a}}]' is not in allowed topologies: [[{{{ZONE} zone-b}}]]"
        ))
    );
    // Allowed: the node's segment alone, even if the class allows more.
    let terms = [allowed(&[(ZONE, &["zone-a", "zone-b"])])];
    let p = Placement {
        strict: true,
        ..placement(Some("node-a"), &terms)
    };
    let r = requirement(&p, &zones()).unwrap().expect("a requirement");
    assert_eq!(show(&r.requisite), vec![zone("zone-a")]);
}

#[test]
fn a_selected_node_that_is_gone_asks_the_scheduler_again() {
    let mut cache = zones();
    let e = requirement(&placement(Some("node-x"), &[]), &cache).unwrap_err();
    assert_eq!(
        e,
        TopologyError::Reschedule("csinodes.storage.k8s.io \"node-x\" not found".into())
    );
    let mut c = CsiNode::new("node-y");
    c.spec.drivers.push(CsiNodeDriver {
        name: DRIVER.into(),
        node_id: "node-y".into(),
        topology_keys: vec![ZONE.into()],
        allocatable: None,
    });
    cache.apply(Object::CsiNode(c));
    let e = requirement(&placement(Some("node-y"), &[]), &cache).unwrap_err();
    assert_eq!(
        e,
        TopologyError::Reschedule("nodes \"node-y\" not found".into())
    );
}

#[test]
fn a_selected_node_without_the_drivers_keys_or_labels_is_retried() {
    let mut cache = zones();
    node(&mut cache, "bare", &[], &[]);
    let e = requirement(&placement(Some("bare"), &[]), &cache).unwrap_err();
    assert_eq!(
        e,
        TopologyError::Retry("no topology key found for node bare".into())
    );
    node(
        &mut cache,
        "unlabelled",
        &[("kubernetes.io/os", "linux")],
        &[ZONE],
    );
    let e = requirement(&placement(Some("unlabelled"), &[]), &cache).unwrap_err();
    assert_eq!(
        e,
        TopologyError::Retry(format!(
            "topology labels from selected node map[kubernetes.io/os:linux] does not match topology keys from CSINode [{ZONE}]"
        ))
    );
}

#[test]
fn immediate_topology_without_any_registered_keys_waits() {
    let mut cache = Cache::default();
    node(&mut cache, "n1", &[(ZONE, "z1")], &[]);
    let e = requirement(&placement(None, &[]), &cache).unwrap_err();
    assert_eq!(
        e,
        TopologyError::Retry("no available topology found".into())
    );
}

#[test]
fn allowed_topologies_of_empty_terms_require_nothing() {
    let terms = [TopologySelectorTerm::default()];
    assert_eq!(requirement(&placement(None, &terms), &zones()), Ok(None));
}

#[test]
fn the_spread_hash_is_gos_fnv1_of_the_set_name_plus_the_ordinal() {
    assert_eq!(fnv1_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1_32(b"a"), 0x050c_5d7e, "FNV-1, not FNV-1a");
    assert_eq!(spread_offset("data-web-7"), fnv1_32(b"web").wrapping_add(7));
    assert_eq!(spread_offset("web-7"), fnv1_32(b"web").wrapping_add(7));
    assert_eq!(spread_offset("scratch"), fnv1_32(b"scratch"));
    assert_eq!(
        spread_offset("a-b-c"),
        fnv1_32(b"a-b-c"),
        "no ordinal: whole"
    );
}
