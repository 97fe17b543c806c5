//! Scenario tests and properties of the driver machine: given this state,
//! when this request arrives, then these effects and this answer.

use std::collections::VecDeque;

use super::*;
use crate::Code;
use crate::machine::{self, Machine};

const ROOT: &str = "/var/lib/kubelet";

fn staging(v: &str) -> String {
    format!("{ROOT}/plugins/kubernetes.io/csi/volplane.csi.io/{v}/globalmount")
}

fn target(pod: &str) -> String {
    format!("{ROOT}/pods/{pod}/volumes/kubernetes.io~csi/pv/mount")
}

fn mode_cap(mode: AccessMode) -> Capability {
    Capability::mount(mode)
}

fn create(name: &str, required: u64) -> Request {
    Request::CreateVolume(CreateVolume {
        name: name.into(),
        capacity: CapacityRange {
            required_bytes: required,
            limit_bytes: 0,
        },
        capabilities: vec![mode_cap(AccessMode::SingleNodeWriter)],
        parameters: Attributes::new(),
        mutable_parameters: Attributes::new(),
        secrets: Secrets::default(),
        content_source: None,
        accessibility: None,
    })
}

fn cpublish(v: &str, node: &str, mode: AccessMode) -> Request {
    Request::ControllerPublish(ControllerPublish {
        volume_id: v.into(),
        node_id: node.into(),
        capability: mode_cap(mode),
        readonly: false,
        volume_context: Attributes::new(),
        secrets: Secrets::default(),
    })
}

fn stage(v: &str) -> Request {
    stage_at(v, &staging(v), AccessMode::SingleNodeMultiWriter)
}

fn stage_at(v: &str, path: &str, mode: AccessMode) -> Request {
    Request::NodeStage(NodeStage {
        volume_id: v.into(),
        publish_context: Attributes::new(),
        staging_target_path: path.into(),
        capability: mode_cap(mode),
        volume_context: Attributes::new(),
        secrets: Secrets::default(),
    })
}

fn unstage(v: &str) -> Request {
    Request::NodeUnstage(NodeUnstage {
        volume_id: v.into(),
        staging_target_path: staging(v),
    })
}

fn publish(v: &str, pod: &str, mode: AccessMode) -> Request {
    Request::NodePublish(NodePublish {
        volume_id: v.into(),
        publish_context: Attributes::new(),
        staging_target_path: staging(v),
        target_path: target(pod),
        capability: mode_cap(mode),
        readonly: false,
        volume_context: Attributes::new(),
        secrets: Secrets::default(),
    })
}

fn snapshot(name: &str, source: &str) -> Request {
    Request::CreateSnapshot(CreateSnapshot {
        source_volume_id: source.into(),
        name: name.into(),
        parameters: Attributes::new(),
        secrets: Secrets::default(),
    })
}

/// CreateVolume `name` restored from snapshot `id`.
fn restore(name: &str, id: &str, required: u64) -> Request {
    let Request::CreateVolume(mut r) = create(name, required) else {
        unreachable!()
    };
    r.content_source = Some(ContentSource::Snapshot(id.into()));
    Request::CreateVolume(r)
}

fn unpublish(v: &str, pod: &str) -> Request {
    Request::NodeUnpublish(NodeUnpublish {
        volume_id: v.into(),
        target_path: target(pod),
    })
}

/// Drives a driver machine with a backend that always succeeds.
struct Harness {
    d: Driver,
    rpc: RpcId,
    now: Tick,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(DriverConfig::new("volplane.csi.io", "test", "node-a"))
    }

    fn with(config: DriverConfig) -> Harness {
        Harness {
            d: Driver::new(config, DriverState::default()),
            rpc: 0,
            now: 0,
        }
    }

    /// Drains the machine, completing every persist successfully; returns
    /// the effects (persists included) in order.
    fn drain(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        let mut carry = |_: &Driver, _, e: Effect, done: &mut VecDeque<Input>| {
            if let Effect::Persist { op, .. } = e {
                done.push_back(Input::Persisted { op, result: Ok(()) });
            }
            out.push(e);
        };
        machine::drain(&mut self.d, self.now, &mut carry);
        out
    }

    /// Sends a request; returns the effects it produced at once.
    fn send(&mut self, request: Request) -> (RpcId, Vec<Effect>) {
        self.rpc += 1;
        self.now += 1;
        self.d.handle(
            self.now,
            Input::Request {
                rpc: self.rpc,
                request,
            },
        );
        (self.rpc, self.drain())
    }

    /// Sends a request and completes every plan successfully; returns the answer.
    fn call(&mut self, request: Request) -> Result<Response, Status> {
        let (rpc, effects) = self.send(request);
        self.finish(rpc, effects)
    }

    /// Completes every plan in `effects` (and those they lead to)
    /// successfully until request `rpc` is answered; returns the answer.
    fn finish(&mut self, rpc: RpcId, mut effects: Vec<Effect>) -> Result<Response, Status> {
        loop {
            let mut next = Vec::new();
            for e in effects {
                match e {
                    Effect::Reply { rpc: r, result } if r == rpc => return result,
                    Effect::Execute { op, plan } => {
                        self.d.handle(
                            self.now,
                            Input::Done {
                                op,
                                result: Ok(success(&plan)),
                            },
                        );
                        next.extend(self.drain());
                    }
                    _ => {}
                }
            }
            assert!(!next.is_empty(), "request {rpc} was never answered");
            effects = next;
        }
    }

    fn ok(&mut self, request: Request) -> Response {
        let method = request.method();
        self.call(request)
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    fn err(&mut self, request: Request) -> Status {
        let method = request.method();
        match self.call(request) {
            Ok(r) => panic!("{method} should have failed, answered {r:?}"),
            Err(e) => e,
        }
    }

    fn create_id(&mut self, name: &str) -> String {
        match self.ok(create(name, 1 << 20)) {
            Response::Volume(v) => v.volume_id,
            r => panic!("{r:?}"),
        }
    }
}

/// What a healthy backend reports for a plan.
fn success(plan: &Plan) -> Outcome {
    match plan {
        Plan::CreateVolume(p) => Outcome::Created(Volume {
            volume_id: format!("vol-{}", p.name),
            capacity_bytes: p.suggested_bytes,
            volume_context: Attributes::new(),
            accessible_topology: vec![],
            content_source: None,
        }),
        Plan::ControllerPublish { node_id, .. } => Outcome::Published {
            publish_context: [("device".to_string(), format!("/dev/loop-{node_id}"))].into(),
        },
        Plan::ControllerExpand { capacity, .. } => Outcome::ControllerExpanded {
            capacity_bytes: capacity.required_bytes,
            node_expansion_required: true,
        },
        Plan::NodeExpand { required_bytes, .. } => Outcome::NodeExpanded {
            capacity_bytes: *required_bytes,
        },
        Plan::GetCapacity { .. } => Outcome::Capacity {
            available_bytes: 7,
            maximum_volume_size: None,
            minimum_volume_size: None,
        },
        Plan::VolumeStats { .. } => Outcome::Stats {
            usage: VolumeUsage::default(),
            condition: None,
        },
        Plan::CreateSnapshot(p) => Outcome::SnapshotCreated(cut(p, true)),
        Plan::CreateGroupSnapshot(p) => Outcome::GroupCreated(GroupSnapshot {
            group_snapshot_id: format!("group-{}", p.name),
            snapshots: p
                .sources
                .iter()
                .map(|v| Snapshot {
                    snapshot_id: format!("snap-{}-{}", p.name, v.volume_id),
                    source_volume_id: v.volume_id.clone(),
                    size_bytes: v.capacity_bytes,
                    creation_time: Timestamp::default(),
                    ready_to_use: true,
                    group_snapshot_id: String::new(),
                })
                .collect(),
            creation_time: Timestamp::default(),
            ready_to_use: true,
        }),
        _ => Outcome::Done,
    }
}

/// The snapshot a backend cuts for `p`: `snap-<name>`, the source's size.
fn cut(p: &SnapshotPlan, ready_to_use: bool) -> Snapshot {
    Snapshot {
        snapshot_id: format!("snap-{}", p.name),
        source_volume_id: p.source.volume_id.clone(),
        size_bytes: p.source.capacity_bytes,
        creation_time: Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        },
        ready_to_use,
        group_snapshot_id: String::new(),
    }
}

fn executes(effects: &[Effect]) -> Vec<&Plan> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Execute { plan, .. } => Some(plan),
            _ => None,
        })
        .collect()
}

#[test]
fn create_with_the_same_name_and_arguments_returns_the_same_volume() {
    let mut h = Harness::new();
    let a = h.ok(create("pvc-1", 1 << 20));
    let (_, effects) = h.send(create("pvc-1", 1 << 20));
    assert!(executes(&effects).is_empty(), "a repeat creates nothing");
    assert!(matches!(&effects[..], [Effect::Reply { result: Ok(r), .. }] if *r == a));
}

#[test]
fn create_with_the_same_name_and_a_bigger_size_is_already_exists() {
    let mut h = Harness::new();
    h.ok(create("pvc-1", 1 << 20));
    let e = h.err(create("pvc-1", 1 << 30));
    assert_eq!(e.code, Code::AlreadyExists);
    assert!(e.message.contains("pvc-1"), "{e}");
}

#[test]
fn create_with_limit_below_required_is_invalid() {
    let mut h = Harness::new();
    let Request::CreateVolume(mut r) = create("x", 10) else {
        unreachable!()
    };
    r.capacity.limit_bytes = 5;
    assert_eq!(h.err(Request::CreateVolume(r)).code, Code::InvalidArgument);
}

/// The journal is not the inventory: a volume it does not hold may still
/// be on the storage (made by an earlier controller whose state directory
/// is gone), so the storage's delete is asked; an id no backend could make
/// is answered OK at once.
#[test]
fn delete_of_an_unknown_volume_goes_to_the_storage() {
    let mut h = Harness::new();
    let delete = |id: &str| {
        Request::DeleteVolume(DeleteVolume {
            volume_id: id.into(),
            secrets: Secrets::default(),
        })
    };
    let (_, effects) = h.send(delete("nope"));
    assert!(
        matches!(&executes(&effects)[..], [Plan::DeleteVolume { volume, .. }] if volume.volume_id == "nope"),
        "{effects:?}"
    );
    let (_, effects) = h.send(delete("../etc"));
    assert!(executes(&effects).is_empty());
    assert!(matches!(
        &effects[..],
        [Effect::Reply {
            result: Ok(Response::Empty),
            ..
        }]
    ));
}

#[test]
fn delete_while_published_is_failed_precondition() {
    let mut h = Harness::new();
    let v = h.create_id("pvc-1");
    h.ok(cpublish(&v, "node-a", AccessMode::SingleNodeWriter));
    let e = h.err(Request::DeleteVolume(DeleteVolume {
        volume_id: v,
        secrets: Secrets::default(),
    }));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("node-a"), "{e}");
}

#[test]
fn controller_publish_codes_follow_the_spec() {
    let mut config = DriverConfig::new("d", "t", "node-a");
    config.known_nodes = ["node-a".to_string(), "node-b".to_string()].into();
    config.max_volumes_per_node = 1;
    let mut h = Harness::with(config);
    let v = h.create_id("pvc-1");
    let w = h.create_id("pvc-2");
    assert_eq!(
        h.err(cpublish("missing", "node-a", AccessMode::SingleNodeWriter))
            .code,
        Code::NotFound
    );
    assert_eq!(
        h.err(cpublish(&v, "node-z", AccessMode::SingleNodeWriter))
            .code,
        Code::NotFound
    );
    let first = h.ok(cpublish(&v, "node-a", AccessMode::SingleNodeWriter));
    assert_eq!(
        h.ok(cpublish(&v, "node-a", AccessMode::SingleNodeWriter)),
        first,
        "repeat answers the same"
    );
    assert_eq!(
        h.err(cpublish(&v, "node-a", AccessMode::SingleNodeReaderOnly))
            .code,
        Code::AlreadyExists
    );
    let e = h.err(cpublish(&v, "node-b", AccessMode::SingleNodeWriter));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("node-a"), "names the node: {e}");
    assert_eq!(
        h.err(cpublish(&w, "node-a", AccessMode::SingleNodeWriter))
            .code,
        Code::ResourceExhausted
    );
}

#[test]
fn multi_node_volumes_publish_to_several_nodes_and_unpublish_from_all() {
    let mut config = DriverConfig::new("d", "t", "node-x");
    config.known_nodes.clear();
    let mut h = Harness::with(config);
    let v = h.create_id("pvc-1");
    h.ok(cpublish(&v, "node-a", AccessMode::MultiNodeMultiWriter));
    h.ok(cpublish(&v, "node-b", AccessMode::MultiNodeMultiWriter));
    h.ok(Request::ControllerUnpublish(ControllerUnpublish {
        volume_id: v.clone(),
        node_id: None,
        secrets: Secrets::default(),
    }));
    assert!(
        h.d.state()
            .volumes
            .unpacked(&v)
            .unwrap()
            .published
            .is_empty()
    );
    check_invariants(h.d.state()).unwrap();
}

#[test]
fn stage_once_publish_many_and_unstage_waits_for_the_last_unpublish() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    let (_, effects) = h.send(stage("v"));
    assert!(
        executes(&effects).is_empty(),
        "second stage is answered from memory"
    );
    for pod in ["p1", "p2", "p3"] {
        h.ok(publish("v", pod, AccessMode::SingleNodeMultiWriter));
    }
    h.ok(unpublish("v", "p1"));
    h.ok(unpublish("v", "p2"));
    let e = h.err(unstage("v"));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(
        e.message.contains(&target("p3")),
        "names the live target: {e}"
    );
    h.ok(unpublish("v", "p3"));
    h.ok(unstage("v"));
    assert!(h.d.state().node.is_empty());
    let (_, effects) = h.send(unstage("v"));
    assert!(
        executes(&effects).is_empty(),
        "unstage of the unknown does nothing"
    );
}

#[test]
fn publish_before_stage_is_failed_precondition() {
    let mut h = Harness::new();
    let e = h.err(publish("v", "p1", AccessMode::SingleNodeWriter));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("NodeStageVolume"), "{e}");
}

#[test]
fn a_single_writer_volume_refuses_a_second_target() {
    let mut h = Harness::new();
    h.ok(stage_at("v", &staging("v"), AccessMode::SingleNodeWriter));
    h.ok(publish("v", "p1", AccessMode::SingleNodeWriter));
    let e = h.err(publish("v", "p2", AccessMode::SingleNodeWriter));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert_eq!(
        h.err(publish("v", "p1", AccessMode::SingleNodeReaderOnly))
            .code,
        Code::AlreadyExists
    );
}

#[test]
fn stage_at_another_path_is_already_exists() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    let e = h.err(stage_at(
        "v",
        &staging("other"),
        AccessMode::SingleNodeMultiWriter,
    ));
    assert_eq!(e.code, Code::AlreadyExists);
}

#[test]
fn paths_outside_the_kubelet_dir_are_invalid_and_touch_nothing() {
    let mut h = Harness::new();
    for bad in ["/etc", "/var/lib/kubelet", "/var/lib/kubeletx/a"] {
        let (_, effects) = h.send(stage_at("v", bad, AccessMode::SingleNodeWriter));
        assert!(executes(&effects).is_empty());
        assert!(
            matches!(&effects[..], [Effect::Reply { result: Err(e), .. }] if e.code == Code::InvalidArgument),
            "{bad}: {effects:?}"
        );
    }
    assert!(h.d.state().node.is_empty());
}

#[test]
fn a_request_for_a_volume_with_an_operation_in_flight_is_aborted() {
    let mut h = Harness::new();
    let (_, first) = h.send(stage("v"));
    let [Effect::Persist { .. }, Effect::Execute { op, plan }] = &first[..] else {
        panic!("write-ahead: persist, then execute; got {first:?}")
    };
    let (_, second) = h.send(publish("v", "p1", AccessMode::SingleNodeMultiWriter));
    let [Effect::Reply { result: Err(e), .. }] = &second[..] else {
        panic!("{second:?}")
    };
    assert_eq!(e.code, Code::Aborted);
    assert!(e.message.contains("operation pending for volume"), "{e}");
    let plan = plan.clone();
    h.d.handle(
        9,
        Input::Done {
            op: *op,
            result: Ok(success(&plan)),
        },
    );
    let done = h.drain();
    assert!(
        matches!(
            &done[..],
            [Effect::Persist { .. }, Effect::Reply { result: Ok(_), .. }]
        ),
        "{done:?}"
    );
}

#[test]
fn a_restart_carries_out_the_plans_that_were_in_flight() {
    let mut h = Harness::new();
    let (_, effects) = h.send(stage("v"));
    assert!(matches!(effects[1], Effect::Execute { .. }));
    let persisted: DriverState =
        serde_json::from_str(&serde_json::to_string(h.d.state()).unwrap()).unwrap();
    let mut d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        persisted,
    );
    assert!(d.recovering());
    let Some(Effect::Execute {
        op,
        plan: Plan::Stage(p),
    }) = d.poll()
    else {
        panic!("no recovery")
    };
    assert_eq!(p.staging_path, staging("v"));
    d.handle(
        1,
        Input::Done {
            op,
            result: Ok(Outcome::Done),
        },
    );
    assert!(!d.recovering());
    assert!(d.state().node["v"].stage.as_ref().unwrap().certain);
}

#[test]
fn a_failed_stage_is_kept_uncertain_so_unstage_still_cleans_up() {
    let mut h = Harness::new();
    let (_, effects) = h.send(stage("v"));
    let Effect::Execute { op, .. } = effects[1] else {
        panic!()
    };
    h.d.handle(
        2,
        Input::Done {
            op,
            result: Err(Status::internal("mount: device busy")),
        },
    );
    h.drain();
    let (_, effects) = h.send(unstage("v"));
    assert!(
        matches!(executes(&effects)[..], [Plan::Unstage(_)]),
        "{effects:?}"
    );
}

#[test]
fn vanished_mounts_are_forgotten_after_a_reboot() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    h.ok(publish("v", "p1", AccessMode::SingleNodeMultiWriter));
    h.d.handle(5, Input::Mounts(vec![]));
    assert!(matches!(h.drain()[..], [Effect::Persist { .. }]));
    assert!(h.d.state().node.is_empty());
}

#[test]
fn list_volumes_pages_with_tokens_and_aborts_on_a_bad_token() {
    let mut h = Harness::new();
    for n in ["a", "b", "c"] {
        h.create_id(n);
    }
    let list = |h: &mut Harness, token: &str| {
        h.call(Request::ListVolumes(ListVolumes {
            max_entries: 2,
            starting_token: token.into(),
        }))
    };
    let Ok(Response::Volumes {
        entries,
        next_token,
    }) = list(&mut h, "")
    else {
        panic!()
    };
    assert_eq!(entries.len(), 2);
    let Ok(Response::Volumes {
        entries,
        next_token: last,
    }) = list(&mut h, &next_token)
    else {
        panic!()
    };
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].volume.volume_id, "vol-c");
    assert!(last.is_empty());
    assert_eq!(list(&mut h, "garbage").unwrap_err().code, Code::Aborted);
}

#[test]
fn expansion_is_answered_from_memory_once_done() {
    let mut h = Harness::new();
    let v = h.create_id("pvc-1");
    let expand = |v: &str, n| {
        Request::ControllerExpand(ControllerExpand {
            volume_id: v.into(),
            capacity: CapacityRange {
                required_bytes: n,
                limit_bytes: 0,
            },
            capability: None,
            secrets: Secrets::default(),
        })
    };
    assert_eq!(
        h.ok(expand(&v, 2 << 20)),
        Response::ControllerExpanded {
            capacity_bytes: 2 << 20,
            node_expansion_required: true
        }
    );
    let (_, effects) = h.send(expand(&v, 2 << 20));
    assert!(executes(&effects).is_empty());
    assert_eq!(h.err(expand("missing", 1)).code, Code::NotFound);
}

#[test]
fn a_node_only_driver_refuses_controller_rpcs_as_unimplemented() {
    let mut config = DriverConfig::new("d", "t", "n");
    config.controller = false;
    let mut h = Harness::with(config);
    assert_eq!(h.err(create("x", 1)).code, Code::Unimplemented);
    let Response::PluginCapabilities(caps) = h.ok(Request::GetPluginCapabilities) else {
        panic!()
    };
    assert!(!caps.contains(&PluginCapability::ControllerService));
}

mod authority;
mod capabilities;
mod groups;
mod node_rules;
mod ownership;
mod persist;
mod properties;
mod snapshots;
mod topology;
mod types;
