//! A step as the CSI request it sends, with the ids the driver handed out.

use super::oracle::{Facts, Known};
use super::step::{Names, Shape, Slot, StatsAt, Step};
use crate::driver::request::{self as rq, Request};
use crate::driver::{Attributes, CapacityRange, ContentSource, NodeCapability, Secrets};

fn volume_id(names: &Names, known: &Known, v: Slot) -> String {
    known
        .volumes
        .get(&v)
        .cloned()
        .unwrap_or_else(|| names.missing_volume(v))
}

fn context(map: &std::collections::BTreeMap<Slot, Attributes>, v: Slot) -> Attributes {
    map.get(&v).cloned().unwrap_or_default()
}

/// The request a page of a walk sends (`Step::ListVolumes` and
/// `Step::ListSnapshots`), from `token`.
pub fn page(step: &Step, token: &str) -> Request {
    match step {
        Step::ListSnapshots { page } => Request::ListSnapshots(rq::ListSnapshots {
            max_entries: u32::from(*page),
            starting_token: token.to_string(),
            source_volume_id: String::new(),
            snapshot_id: String::new(),
            secrets: Secrets::default(),
        }),
        Step::ListVolumes { page } => Request::ListVolumes(rq::ListVolumes {
            max_entries: u32::from(*page),
            starting_token: token.to_string(),
        }),
        _ => Request::ListVolumes(rq::ListVolumes {
            max_entries: 0,
            starting_token: token.to_string(),
        }),
    }
}

/// The request `step` sends; `None` for a step that is no CSI call (a
/// write and read through targets, a restart).
pub fn request(step: &Step, names: &Names, known: &Known, facts: &Facts) -> Option<Request> {
    use Step::*;
    let id = |v| volume_id(names, known, v);
    Some(match *step {
        CreateVolume { v, shape } => Request::CreateVolume(create(names, known, facts, v, shape)),
        DeleteVolume { v } => Request::DeleteVolume(rq::DeleteVolume {
            volume_id: id(v),
            secrets: Secrets::default(),
        }),
        ControllerPublish {
            v,
            known_node,
            readonly,
        } => Request::ControllerPublish(rq::ControllerPublish {
            volume_id: id(v),
            node_id: if known_node {
                facts.node_id.clone()
            } else {
                names.missing_node()
            },
            capability: names.capability(false),
            readonly,
            volume_context: context(&known.volume_context, v),
            secrets: Secrets::default(),
        }),
        ControllerUnpublish { v } => Request::ControllerUnpublish(rq::ControllerUnpublish {
            volume_id: id(v),
            node_id: Some(facts.node_id.clone()),
            secrets: Secrets::default(),
        }),
        Validate { v } => Request::ValidateCapabilities(rq::ValidateCapabilities {
            volume_id: id(v),
            volume_context: context(&known.volume_context, v),
            capabilities: vec![names.capability(false)],
            parameters: names.parameters.clone(),
            mutable_parameters: Attributes::new(),
            secrets: Secrets::default(),
        }),
        GetVolume { v } => Request::ControllerGetVolume { volume_id: id(v) },
        ControllerExpand { v, grow } => Request::ControllerExpand(rq::ControllerExpand {
            volume_id: id(v),
            capacity: CapacityRange {
                required_bytes: names.grown(grow),
                limit_bytes: 0,
            },
            capability: Some(names.capability(false)),
            secrets: Secrets::default(),
        }),
        ListVolumes { .. } | ListSnapshots { .. } => page(step, ""),
        ListVolumesBadToken => Request::ListVolumes(rq::ListVolumes {
            max_entries: 0,
            starting_token: format!("{}-no-such-token", names.prefix),
        }),
        ControllerModify { v, empty } => Request::ControllerModify(rq::ControllerModify {
            volume_id: id(v),
            mutable_parameters: if empty {
                Attributes::new()
            } else {
                names.mutable.clone()
            },
            secrets: Secrets::default(),
        }),
        GetCapacity => Request::GetCapacity(rq::GetCapacity {
            capabilities: vec![names.capability(false)],
            parameters: names.parameters.clone(),
            accessible_topology: facts.topology.clone(),
        }),
        NodeStage { .. }
        | NodeUnstage { .. }
        | NodePublish { .. }
        | NodeUnpublish { .. }
        | Stats { .. }
        | NodeExpand { .. } => node_request(step, names, known, facts),
        CreateSnapshot { s, v } => Request::CreateSnapshot(rq::CreateSnapshot {
            source_volume_id: id(v),
            name: names.snapshot_name(s),
            parameters: Attributes::new(),
            secrets: Secrets::default(),
        }),
        DeleteSnapshot { s } => Request::DeleteSnapshot(rq::DeleteSnapshot {
            snapshot_id: known
                .snapshots
                .get(&s)
                .cloned()
                .unwrap_or_else(|| names.missing_snapshot(s)),
            secrets: Secrets::default(),
        }),
        CreateGroupSnapshot { g, a, b } => Request::CreateGroupSnapshot(rq::CreateGroupSnapshot {
            name: names.group_name(g),
            source_volume_ids: vec![id(a), id(b)],
            parameters: Attributes::new(),
            secrets: Secrets::default(),
        }),
        DeleteGroupSnapshot { g } => Request::DeleteGroupSnapshot(rq::DeleteGroupSnapshot {
            group_snapshot_id: known
                .groups
                .get(&g)
                .cloned()
                .unwrap_or_else(|| names.missing_group(g)),
            snapshot_ids: Vec::new(),
            secrets: Secrets::default(),
        }),
        Data { .. } | Restart => return None,
    })
}

/// The Node service's requests: they name the volume the node holds.
fn node_request(step: &Step, names: &Names, known: &Known, facts: &Facts) -> Request {
    use Step::*;
    // A node step names the volume the node holds, while it holds it.
    let held = |v| {
        known
            .node
            .get(&v)
            .cloned()
            .unwrap_or_else(|| volume_id(names, known, v))
    };
    match *step {
        NodeStage { v, other_mode } => Request::NodeStage(rq::NodeStage {
            volume_id: held(v),
            publish_context: context(&known.publish_context, v),
            staging_target_path: names.staging(v),
            capability: names.capability(other_mode),
            volume_context: context(&known.volume_context, v),
            secrets: Secrets::default(),
        }),
        NodeUnstage { v } => Request::NodeUnstage(rq::NodeUnstage {
            volume_id: held(v),
            staging_target_path: names.staging(v),
        }),
        NodePublish { v, t, readonly } => Request::NodePublish(rq::NodePublish {
            volume_id: held(v),
            publish_context: context(&known.publish_context, v),
            staging_target_path: staging(names, facts, v),
            target_path: names.target(v, t),
            capability: names.capability(false),
            readonly,
            volume_context: context(&known.volume_context, v),
            secrets: Secrets::default(),
        }),
        NodeUnpublish { v, t } => Request::NodeUnpublish(rq::NodeUnpublish {
            volume_id: held(v),
            target_path: names.target(v, t),
        }),
        Stats { v, at } => Request::NodeVolumeStats(rq::NodeVolumeStats {
            volume_id: held(v),
            volume_path: match at {
                StatsAt::Target(t) => names.target(v, t),
                StatsAt::Nowhere => names.nowhere(),
            },
            staging_target_path: staging(names, facts, v),
        }),
        NodeExpand { v, t, grow } => Request::NodeExpand(rq::NodeExpand {
            volume_id: held(v),
            volume_path: names.target(v, t),
            capacity: CapacityRange {
                required_bytes: names.grown(grow),
                limit_bytes: 0,
            },
            staging_target_path: staging(names, facts, v),
            capability: Some(names.capability(false)),
            secrets: Secrets::default(),
        }),
        _ => unreachable!("not a node step: {step}"),
    }
}

fn staging(names: &Names, facts: &Facts, v: Slot) -> String {
    if facts.node_has(NodeCapability::StageUnstageVolume) {
        names.staging(v)
    } else {
        String::new()
    }
}

fn create(names: &Names, known: &Known, facts: &Facts, v: Slot, shape: Shape) -> rq::CreateVolume {
    rq::CreateVolume {
        name: match shape {
            Shape::Unnamed => String::new(),
            _ => names.volume_name(v),
        },
        capacity: names.range(shape),
        capabilities: match shape {
            Shape::NoCapability => Vec::new(),
            _ => vec![names.capability(false)],
        },
        parameters: names.parameters.clone(),
        mutable_parameters: Attributes::new(),
        secrets: Secrets::default(),
        content_source: match shape {
            Shape::FromSnapshot(s) => Some(ContentSource::Snapshot(
                known
                    .snapshots
                    .get(&s)
                    .cloned()
                    .unwrap_or_else(|| names.missing_snapshot(s)),
            )),
            Shape::Clone(from) => Some(ContentSource::Volume(volume_id(names, known, from))),
            _ => None,
        },
        accessibility: facts.requirement_for(shape, names.elsewhere.as_ref()),
    }
}
