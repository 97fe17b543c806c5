//! Where a new volume must be, and where it should be: CreateVolume's
//! accessibility requirements, computed as external-provisioner computes
//! them (its `GenerateAccessibilityRequirements`) from the claim's selected
//! node, the class's `allowedTopologies`, the CSINodes' topology keys and
//! the Nodes' labels.
//!
//! * **Requisite**: under `--strict-topology`, the selected node's segment
//!   alone (refused when `allowedTopologies` excludes it); else the
//!   class's `allowedTopologies` with its value lists distributed into
//!   single-valued terms; else — with a selected node, or under
//!   `--immediate-topology` (on by default) — the segments of every Node
//!   that carries all the driver's topology keys; else nothing at all.
//!   Sorted (fewer segments first, then by key and value) and deduplicated.
//! * **Preferred**: with a selected node, the requisite rotated so that
//!   the first term the node's segment satisfies leads (strict: the
//!   requisite as is); without one, rotated by a hash of the claim's name
//!   plus its StatefulSet ordinal, so a StatefulSet's volumes spread over
//!   the segments in turn.
//!
//! One deliberate difference: for a claim without a selected node,
//! upstream takes the topology keys of a CSINode picked at random; this
//! takes the first in name order, so the machine stays deterministic. The
//! drivers' keys are the same on every node in any cluster this matters
//! for.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::control::Cache;
use crate::driver::{Topology, TopologyRequirement};
use crate::model::{Kind, Labels, Object, TopologySelectorTerm};

/// One segment: topology key → value, in key order (upstream's sorted
/// `topologyTerm`).
pub type Term = BTreeMap<String, String>;

/// What decides a claim's accessibility requirements.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// The CSI driver (its entry in each CSINode).
    pub driver: &'a str,
    /// The claim's name (the preferred rotation hashes it).
    pub claim: &'a str,
    /// The class's `allowedTopologies`.
    pub allowed: &'a [TopologySelectorTerm],
    /// The node the scheduler selected, if any.
    pub selected_node: Option<&'a str>,
    /// `--strict-topology`.
    pub strict: bool,
    /// `--immediate-topology`.
    pub immediate: bool,
}

/// Why no requirement could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// The selected node (or its CSINode) is gone: the scheduler must
    /// choose again (upstream's ProvisioningReschedule).
    Reschedule(String),
    /// Not now; retried after the backoff.
    Retry(String),
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (TopologyError::Reschedule(why) | TopologyError::Retry(why)) = self;
        write!(f, "error generating accessibility requirements: {why}")
    }
}

/// The requirement for CreateVolume, `None` when there is none to give.
pub fn requirement(
    p: &Placement<'_>,
    cache: &Cache,
) -> Result<Option<TopologyRequirement>, TopologyError> {
    let mut selected: Option<(&str, Vec<String>, Term)> = None;
    let mut requisite: Vec<Term> = Vec::new();
    if let Some(node) = p.selected_node {
        let (keys, term) = selected_segment(p.driver, node, cache)?;
        if p.strict {
            if !p.allowed.is_empty() {
                let allowed = flatten(p.allowed);
                if !allowed.iter().any(|t| subset(t, &term)) {
                    return Err(TopologyError::Retry(format!(
                        "selected node '{node:?}' topology '{}' is not in allowed topologies: {}",
                        go_term(&term),
                        go_terms(&allowed)
                    )));
                }
            }
            requisite.push(term.clone());
        }
        selected = Some((node, keys, term));
    }
    if requisite.is_empty() {
        if !p.allowed.is_empty() {
            requisite = flatten(p.allowed);
        } else {
            if selected.is_none() && !p.immediate {
                return Ok(None);
            }
            let keys = match &selected {
                Some((_, keys, _)) => keys.clone(),
                None => match any_keys(p.driver, cache) {
                    Some(keys) => keys,
                    // No node has registered topology keys yet.
                    None => return Err(TopologyError::Retry("no available topology found".into())),
                },
            };
            requisite = aggregate(&keys, cache);
            if requisite.is_empty() {
                return Err(TopologyError::Retry(format!(
                    "topologyKeys {} were not found on any nodes",
                    go_list(&keys)
                )));
            }
        }
    }
    // allowedTopologies whose terms are all empty: as if topology were off.
    requisite.retain(|t| !t.is_empty());
    if requisite.is_empty() {
        return Ok(None);
    }
    requisite.sort_by(compare);
    requisite.dedup();
    let preferred = match &selected {
        None => {
            let at = spread_offset(p.claim) as usize % requisite.len();
            rotated(&requisite, at)
        }
        Some(_) if p.strict => requisite.clone(),
        Some((node, _, term)) => match requisite.iter().position(|t| subset(t, term)) {
            Some(at) => rotated(&requisite, at),
            None => {
                return Err(TopologyError::Retry(format!(
                    "topology {} from selected node {node:?} is not in requisite: {}",
                    go_term(term),
                    go_terms(&requisite)
                )));
            }
        },
    };
    Ok(Some(TopologyRequirement {
        requisite: requisite.iter().map(to_topology).collect(),
        preferred: preferred.iter().map(to_topology).collect(),
    }))
}

/// The selected node's topology keys (from its CSINode) and its segment
/// (from its labels).
fn selected_segment(
    driver: &str,
    node: &str,
    cache: &Cache,
) -> Result<(Vec<String>, Term), TopologyError> {
    let Some(Object::CsiNode(csi_node)) = cache.find(Kind::CsiNode, "", node) else {
        return Err(TopologyError::Reschedule(format!(
            "csinodes.storage.k8s.io {node:?} not found"
        )));
    };
    let keys = csi_node
        .driver(driver)
        .map(|d| d.topology_keys.clone())
        .unwrap_or_default();
    if keys.is_empty() {
        // The driver is not (yet) registered there: retried, and the
        // scheduler may pick another node meanwhile.
        return Err(TopologyError::Retry(format!(
            "no topology key found for node {node}"
        )));
    }
    let Some(Object::Node(n)) = cache.find(Kind::Node, "", node) else {
        return Err(TopologyError::Reschedule(format!(
            "nodes {node:?} not found"
        )));
    };
    match segment(&n.metadata.labels, &keys) {
        Some(term) => Ok((keys, term)),
        None => Err(TopologyError::Retry(format!(
            "topology labels from selected node {} does not match topology keys from CSINode {}",
            go_map(&n.metadata.labels),
            go_list(&keys)
        ))),
    }
}

/// The segment `labels` give for `keys`; `None` when a key is missing.
fn segment(labels: &Labels, keys: &[String]) -> Option<Term> {
    keys.iter()
        .map(|k| labels.get(k).map(|v| (k.clone(), v.to_owned())))
        .collect()
}

/// The topology keys of the first CSINode (by name) where the driver
/// registered some.
fn any_keys(driver: &str, cache: &Cache) -> Option<Vec<String>> {
    cache.of_kind(Kind::CsiNode).find_map(|o| match o {
        Object::CsiNode(n) => n
            .driver(driver)
            .map(|d| d.topology_keys.clone())
            .filter(|k| !k.is_empty()),
        _ => None,
    })
}

/// Every distinct segment of the nodes where `driver` is registered: each
/// such node's labels for its CSINode's topology keys (a node missing a
/// label has none; a driver without keys gives the empty segment), as
/// upstream's node topology informer lists them for storage capacity.
pub fn node_segments(driver: &str, cache: &Cache) -> std::collections::BTreeSet<Term> {
    cache
        .of_kind(Kind::CsiNode)
        .filter_map(|o| {
            let Object::CsiNode(c) = o else { return None };
            let keys = &c.driver(driver)?.topology_keys;
            let Some(Object::Node(n)) = cache.find(Kind::Node, "", &c.metadata.name) else {
                return None;
            };
            segment(&n.metadata.labels, keys)
        })
        .collect()
}

/// The segments of every Node that carries all of `keys`.
fn aggregate(keys: &[String], cache: &Cache) -> Vec<Term> {
    cache
        .of_kind(Kind::Node)
        .filter_map(|o| match o {
            Object::Node(n) => segment(&n.metadata.labels, keys),
            _ => None,
        })
        .collect()
}

/// `allowedTopologies` as single-valued terms: within a term, each
/// requirement's OR of values is distributed over the AND of
/// requirements; the terms' results are OR'ed (upstream's `flatten`).
pub fn flatten(allowed: &[TopologySelectorTerm]) -> Vec<Term> {
    let mut out = Vec::new();
    for term in allowed {
        let mut terms: Vec<Term> = Vec::new();
        for req in &term.match_label_expressions {
            let mut next = Vec::new();
            for value in &req.values {
                if terms.is_empty() {
                    next.push(Term::from([(req.key.clone(), value.clone())]));
                } else {
                    for t in &terms {
                        let mut t = t.clone();
                        t.insert(req.key.clone(), value.clone());
                        next.push(t);
                    }
                }
            }
            terms = next;
        }
        out.extend(terms);
    }
    out
}

/// True when every segment of `t` is in `of` (an empty `t` is in anything).
pub fn subset(t: &Term, of: &Term) -> bool {
    t.iter().all(|(k, v)| of.get(k) == Some(v))
}

/// Upstream's term order: fewer segments first, then key by key, value by
/// value.
fn compare(a: &Term, b: &Term) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.iter().cmp(b.iter()))
}

fn rotated(terms: &[Term], at: usize) -> Vec<Term> {
    terms[at..].iter().chain(&terms[..at]).cloned().collect()
}

fn to_topology(t: &Term) -> Topology {
    t.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Where a claim's preferred list starts without a selected node, as
/// upstream (and the in-tree volume util) spreads StatefulSets: a name
/// `<claim>-<set>-<n>` hashes `<set>` (FNV-1, 32 bits) and adds `n`; any
/// other name hashes whole.
pub fn spread_offset(claim: &str) -> u32 {
    let mut hashed = claim;
    let mut index = 0u32;
    if let Some(dash) = claim.rfind('-')
        && let Ok(n) = claim[dash + 1..].parse::<u32>()
    {
        index = n;
        hashed = &claim[..dash];
        if let Some(dash) = hashed.rfind('-') {
            hashed = &hashed[dash + 1..];
        }
    }
    fnv1_32(hashed.as_bytes()).wrapping_add(index)
}

/// FNV-1 (not 1a), 32 bits: Go's `hash/fnv.New32`.
fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        h.wrapping_mul(0x0100_0193) ^ u32::from(*b)
    })
}

/// A term as Go's `%v` prints upstream's: `[{key value} …]`.
fn go_term(t: &Term) -> String {
    let mut s = String::from("[");
    for (i, (k, v)) in t.iter().enumerate() {
        let sep = if i == 0 { "" } else { " " };
        let _ = write!(s, "{sep}{{{k} {v}}}");
    }
    s.push(']');
    s
}

fn go_terms(ts: &[Term]) -> String {
    let inner: Vec<String> = ts.iter().map(go_term).collect();
    format!("[{}]", inner.join(" "))
}

fn go_list(keys: &[String]) -> String {
    format!("[{}]", keys.join(" "))
}

fn go_map(m: &Labels) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", inner.join(" "))
}

#[cfg(test)]
mod tests;
