//! Arbitrary sequences of requests and plan completions against the driver
//! machine: the state invariants hold after every step, no unstage plan is
//! handed out while targets remain, no publish plan before its stage.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeMap, VecDeque};

use volplane_core::driver::*;
use volplane_core::machine::{self, Machine};
use volplane_core::{OpId, Status};

#[derive(Debug, Arbitrary)]
enum Op {
    Create {
        v: u8,
        big: bool,
    },
    Delete {
        v: u8,
    },
    ControllerPublish {
        v: u8,
        node: bool,
        multi: bool,
    },
    ControllerUnpublish {
        v: u8,
    },
    Stage {
        v: u8,
        multi: bool,
        other_path: bool,
    },
    Unstage {
        v: u8,
    },
    Publish {
        v: u8,
        pod: u8,
        multi: bool,
        ro: bool,
    },
    Unpublish {
        v: u8,
        pod: u8,
    },
    Expand {
        v: u8,
    },
    Snapshot {
        v: u8,
        s: u8,
    },
    DeleteSnapshot {
        s: u8,
    },
    /// A volume restored from snapshot `s`, or cloned from volume `s`.
    CreateFrom {
        v: u8,
        s: u8,
        clone: bool,
    },
    Complete {
        ok: bool,
    },
    /// The next persist fails (a full or broken disk).
    FailPersist,
    Restart,
}

fn cap(multi: bool) -> Capability {
    Capability::mount(if multi {
        AccessMode::SingleNodeMultiWriter
    } else {
        AccessMode::SingleNodeWriter
    })
}

fn staging(v: u8, other: bool) -> String {
    format!(
        "/var/lib/kubelet/plugins/x/{}{v}/globalmount",
        if other { "o" } else { "" }
    )
}

fn request(op: &Op) -> Option<Request> {
    let vol = |v: &u8| format!("vol-{}", v % 3);
    Some(match op {
        Op::Create { v, big } => Request::CreateVolume(CreateVolume {
            name: format!("{}", v % 3),
            capacity: CapacityRange {
                required_bytes: if *big { 2 << 30 } else { 1 << 30 },
                limit_bytes: 0,
            },
            capabilities: vec![cap(false)],
            parameters: Default::default(),
            mutable_parameters: Default::default(),
            secrets: Default::default(),
            content_source: None,
            accessibility: None,
        }),
        Op::Delete { v } => Request::DeleteVolume(DeleteVolume {
            volume_id: vol(v),
            secrets: Default::default(),
        }),
        Op::ControllerPublish { v, node, multi } => Request::ControllerPublish(ControllerPublish {
            volume_id: vol(v),
            node_id: if *node { "a" } else { "b" }.into(),
            capability: cap(*multi),
            readonly: false,
            volume_context: Default::default(),
            secrets: Default::default(),
        }),
        Op::ControllerUnpublish { v } => Request::ControllerUnpublish(ControllerUnpublish {
            volume_id: vol(v),
            node_id: None,
            secrets: Default::default(),
        }),
        Op::Stage {
            v,
            multi,
            other_path,
        } => Request::NodeStage(NodeStage {
            volume_id: vol(v),
            publish_context: Default::default(),
            staging_target_path: staging(v % 3, *other_path),
            capability: cap(*multi),
            volume_context: Default::default(),
            secrets: Default::default(),
        }),
        Op::Unstage { v } => Request::NodeUnstage(NodeUnstage {
            volume_id: vol(v),
            staging_target_path: staging(v % 3, false),
        }),
        Op::Publish { v, pod, multi, ro } => Request::NodePublish(NodePublish {
            volume_id: vol(v),
            publish_context: Default::default(),
            staging_target_path: staging(v % 3, false),
            target_path: format!("/var/lib/kubelet/pods/{}/mount", pod % 3),
            capability: cap(*multi),
            readonly: *ro,
            volume_context: Default::default(),
            secrets: Default::default(),
        }),
        Op::Unpublish { v, pod } => Request::NodeUnpublish(NodeUnpublish {
            volume_id: vol(v),
            target_path: format!("/var/lib/kubelet/pods/{}/mount", pod % 3),
        }),
        Op::Expand { v } => Request::ControllerExpand(ControllerExpand {
            volume_id: vol(v),
            capacity: CapacityRange {
                required_bytes: 4 << 30,
                limit_bytes: 0,
            },
            capability: None,
            secrets: Default::default(),
        }),
        Op::Snapshot { v, s } => Request::CreateSnapshot(CreateSnapshot {
            source_volume_id: vol(v),
            name: format!("s{}", s % 3),
            parameters: Default::default(),
            secrets: Default::default(),
        }),
        Op::DeleteSnapshot { s } => Request::DeleteSnapshot(DeleteSnapshot {
            snapshot_id: format!("snap-s{}", s % 3),
            secrets: Default::default(),
        }),
        Op::CreateFrom { v, s, clone } => Request::CreateVolume(CreateVolume {
            name: format!("{}", v % 3),
            capacity: CapacityRange::default(),
            capabilities: vec![cap(false)],
            parameters: Default::default(),
            mutable_parameters: Default::default(),
            secrets: Default::default(),
            content_source: Some(if *clone {
                ContentSource::Volume(vol(s))
            } else {
                ContentSource::Snapshot(format!("snap-s{}", s % 3))
            }),
            accessibility: None,
        }),
        Op::Complete { .. } | Op::Restart | Op::FailPersist => return None,
    })
}

fn outcome(plan: &Plan) -> Outcome {
    match plan {
        Plan::CreateVolume(p) => Outcome::Created(Volume {
            volume_id: format!("vol-{}", p.name),
            capacity_bytes: p.suggested_bytes,
            volume_context: Default::default(),
            accessible_topology: vec![],
            content_source: None,
        }),
        Plan::ControllerExpand { capacity, .. } => Outcome::ControllerExpanded {
            capacity_bytes: capacity.required_bytes,
            node_expansion_required: true,
        },
        Plan::CreateSnapshot(p) => Outcome::SnapshotCreated(Snapshot {
            snapshot_id: format!("snap-{}", p.name),
            source_volume_id: p.source.volume_id.clone(),
            size_bytes: p.source.capacity_bytes,
            creation_time: Timestamp::default(),
            ready_to_use: !p.name.ends_with('1'),
            group_snapshot_id: String::new(),
        }),
        _ => Outcome::Done,
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let config = DriverConfig::new("fuzz.volplane.io", "0", "a");
    let mut d = Driver::new(config.clone(), DriverState::default());
    // The records persisted, as a record store keeps them; a restart reads
    // the state back from them.
    let mut records: BTreeMap<(&'static str, String), Vec<u8>> = BTreeMap::new();
    let load = |records: &BTreeMap<(&'static str, String), Vec<u8>>| {
        DriverState::from_records(
            records
                .iter()
                .map(|((t, k), v)| (*t, k.as_str(), v.as_slice())),
        )
        .expect("persisted records load")
    };
    let mut persisted = DriverState::default();
    let mut pending: Vec<(OpId, Plan)> = Vec::new();
    let mut fail_persist = false;
    for (i, op) in ops.iter().enumerate() {
        let now = i as u64;
        match op {
            Op::Complete { ok } => {
                if !pending.is_empty() {
                    let (id, plan) = pending.remove(0);
                    let result = if *ok {
                        Ok(outcome(&plan))
                    } else {
                        Err(Status::internal("fuzz"))
                    };
                    d.handle(now, Input::Done { op: id, result });
                }
            }
            Op::Restart => {
                d = Driver::new(config.clone(), load(&records));
                pending.clear();
            }
            Op::FailPersist => fail_persist = true,
            op => d.handle(
                now,
                Input::Request {
                    rpc: now,
                    request: request(op).expect("a request"),
                },
            ),
        }
        let mut carry = |d: &Driver, _, e, done: &mut VecDeque<Input>| match e {
            Effect::Persist { op, changes } => {
                let result = if std::mem::take(&mut fail_persist) {
                    Err("fuzz: disk full".into())
                } else {
                    for c in changes {
                        match c.value {
                            Some(v) => records.insert((c.table, c.key), v),
                            None => records.remove(&(c.table, c.key)),
                        };
                    }
                    persisted = load(&records);
                    Ok(())
                };
                done.push_back(Input::Persisted { op, result });
            }
            Effect::Execute { op, plan } => {
                match &plan {
                    Plan::Unstage(p) => assert!(
                        d.state().targets(&p.volume_id).is_empty(),
                        "unstage with live targets"
                    ),
                    Plan::Publish(p) => {
                        let staged = d
                            .state()
                            .node
                            .get(&p.volume_id)
                            .and_then(|v| v.stage.as_ref());
                        assert!(
                            staged.is_some_and(|s| s.certain && s.staging_path == p.staging_path),
                            "publish before stage"
                        );
                    }
                    _ => {}
                }
                // Write-ahead: a plan runs only once recorded durably.
                assert!(
                    persisted.in_flight.contains_key(&op),
                    "a plan ran before it was persisted"
                );
                pending.push((op, plan));
            }
            Effect::Reply { .. } => {}
        };
        machine::drain(&mut d, now, &mut carry);
        if let Err(e) = check_invariants(d.state()) {
            panic!("invariant: {e}");
        }
    }
});
