//! The oracle's judgements, one rule at a time, on worlds built by hand.

use std::collections::BTreeMap;

use super::group::{self, Sent};
use super::oracle::{self, Answer, Cx, Facts, Known, Verdict};
use super::rules::{Rule, Tally};
use super::step::{Names, Shape, Step};
use super::world::{Choice, NodeSeen, PathSeen, World};
use crate::Code;
use crate::driver::{
    AccessMode, Attributes, Capability, ControllerCapability as C, ListedVolume,
    NodeCapability as N, Response, Volume,
};

fn names() -> Names {
    Names {
        prefix: "t".into(),
        kubelet_dir: "/k".into(),
        driver: "d.example.com".into(),
        parameters: Attributes::new(),
        capability: Capability::mount(AccessMode::SingleNodeWriter),
        bytes: 16,
        mutable: Attributes::new(),
        elsewhere: None,
    }
}

fn facts() -> Facts {
    Facts {
        controller_service: true,
        controller: [
            C::CreateDeleteVolume,
            C::PublishUnpublishVolume,
            C::ListVolumes,
        ]
        .into_iter()
        .collect(),
        node: [N::StageUnstageVolume].into_iter().collect(),
        node_id: "n1".into(),
        node_service: true,
        ..Facts::default()
    }
}

fn volume(id: &str, bytes: u64) -> Answer {
    Answer::Reply(Response::Volume(Volume {
        volume_id: id.into(),
        capacity_bytes: bytes,
        volume_context: Attributes::new(),
        accessible_topology: vec![],
        content_source: None,
    }))
}

fn ok() -> Answer {
    Answer::Reply(Response::Empty)
}

fn refused(code: Code) -> Answer {
    Answer::Refused {
        code,
        message: "no".into(),
    }
}

/// `step` sent beside another call on its object, answered `answer`.
fn in_flight(step: Step, answer: Answer) -> Sent {
    Sent {
        step,
        answer,
        busy: true,
    }
}

/// A judge with the ids of `known`, counting into `tally`.
struct Judge {
    names: Names,
    facts: Facts,
    known: Known,
    tally: Tally,
    notes: Vec<Rule>,
}

impl Judge {
    fn new() -> Judge {
        Judge {
            names: names(),
            facts: facts(),
            known: Known::default(),
            tally: Tally::default(),
            notes: Vec::new(),
        }
    }

    fn step(&mut self, w: &World, step: Step, answer: Answer) -> Verdict {
        let mut cx = Cx {
            names: &self.names,
            facts: &self.facts,
            known: &self.known,
            busy: false,
            certain: true,
            tally: Some(&mut self.tally),
            notes: Vec::new(),
        };
        let v = oracle::judge(&mut cx, w, &step, &answer);
        self.notes.extend(cx.notes.iter().map(|n| n.rule));
        v
    }

    /// Judges `group`, in flight together, from `worlds`.
    fn group(&mut self, worlds: &[World], group: &[Sent]) -> group::Judged {
        group::judge(
            worlds,
            group,
            &self.names,
            &self.facts,
            &self.known,
            None,
            &mut self.tally,
        )
    }

    /// Judges `step`, which must leave exactly one world; learns its ids.
    fn one(&mut self, w: &World, step: Step, answer: Answer) -> World {
        if let (Step::CreateVolume { v, .. }, Answer::Reply(Response::Volume(vol))) =
            (&step, &answer)
        {
            self.known.volumes.insert(*v, vol.volume_id.clone());
        }
        let mut ws = self.step(w, step, answer).expect("no rule broken");
        assert_eq!(ws.len(), 1, "{ws:?}");
        let w = ws.remove(0);
        self.known.node = w.node.iter().map(|(v, n)| (*v, n.id.clone())).collect();
        w
    }
}

const CREATE: Step = Step::CreateVolume {
    v: 0,
    shape: Shape::Plain,
};

#[test]
fn a_repeated_create_answering_another_volume_is_a_second_volume() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let breach = j.step(&w, CREATE, volume("b", 16)).unwrap_err();
    assert_eq!(breach.rule, Rule::CreateIdempotent);
    assert!(j.step(&w, CREATE, volume("a", 16)).is_ok());
}

#[test]
fn an_incompatible_repeat_must_be_already_exists() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let larger = Step::CreateVolume {
        v: 0,
        shape: Shape::Larger,
    };
    assert_eq!(
        j.step(&w, larger, volume("a", 16)).unwrap_err().rule,
        Rule::CreateIncompatible
    );
    assert!(j.step(&w, larger, refused(Code::AlreadyExists)).is_ok());
    // Required fields.
    let unnamed = Step::CreateVolume {
        v: 0,
        shape: Shape::Unnamed,
    };
    assert_eq!(
        j.step(&w, unnamed, volume("c", 16)).unwrap_err().rule,
        Rule::RequiredFields
    );
}

/// A name taken, asked again as a clone of a volume that does not exist:
/// both "already exists but incompatible" and "source does not exist"
/// apply, and the spec orders neither.
#[test]
fn a_taken_name_cloned_from_nothing_may_be_not_found() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let clone_of_nothing = Step::CreateVolume {
        v: 0,
        shape: Shape::Clone(1),
    };
    assert!(
        j.step(&w, clone_of_nothing, refused(Code::NotFound))
            .is_ok()
    );
    assert!(
        j.step(&w, clone_of_nothing, refused(Code::AlreadyExists))
            .is_ok()
    );
    let breach = j.step(&w, clone_of_nothing, volume("a", 16)).unwrap_err();
    assert_eq!(breach.rule, Rule::CreateIncompatible);
    // A clone of a volume that exists: only ALREADY_EXISTS.
    let w = j.one(
        &w,
        Step::CreateVolume {
            v: 1,
            shape: Shape::Plain,
        },
        volume("b", 16),
    );
    let breach = j
        .step(&w, clone_of_nothing, refused(Code::NotFound))
        .unwrap_err();
    assert_eq!(breach.rule, Rule::CreateIncompatible);
}

#[test]
fn a_lost_create_leaves_two_worlds_until_its_repeat_answers() {
    let mut j = Judge::new();
    let ws = j
        .step(&World::default(), CREATE, Answer::Lost("killed".into()))
        .unwrap();
    assert_eq!(ws.len(), 2);
    let mut after: Vec<World> = ws
        .iter()
        .flat_map(|w| j.step(w, CREATE, volume("a", 16)).unwrap())
        .collect();
    after.sort();
    after.dedup();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].volumes[&0].id.as_deref(), Some("a"));
}

#[test]
fn a_list_must_hold_every_volume_once_and_none_deleted() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let listed = |ids: &[&str]| {
        Answer::Reply(Response::Volumes {
            entries: ids
                .iter()
                .map(|id| ListedVolume {
                    volume: Volume {
                        volume_id: (*id).into(),
                        capacity_bytes: 16,
                        volume_context: Attributes::new(),
                        accessible_topology: vec![],
                        content_source: None,
                    },
                    published_node_ids: vec![],
                    condition: None,
                })
                .collect(),
            next_token: String::new(),
        })
    };
    let list = Step::ListVolumes { page: 1 };
    assert!(j.step(&w, list, listed(&["a", "someone-else"])).is_ok());
    assert_eq!(
        j.step(&w, list, listed(&[])).unwrap_err().rule,
        Rule::ListComplete
    );
    assert_eq!(
        j.step(&w, list, listed(&["a", "a"])).unwrap_err().rule,
        Rule::ListComplete
    );
    let gone = j.one(&w, Step::DeleteVolume { v: 0 }, ok());
    assert_eq!(
        j.step(&gone, list, listed(&["a"])).unwrap_err().rule,
        Rule::ListComplete
    );
}

#[test]
fn an_acknowledged_volume_is_found() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let breach = j
        .step(&w, Step::Validate { v: 0 }, refused(Code::NotFound))
        .unwrap_err();
    assert_eq!(breach.rule, Rule::Acknowledged);
    let gone = j.one(&w, Step::DeleteVolume { v: 0 }, ok());
    assert!(
        j.step(&gone, Step::Validate { v: 0 }, refused(Code::NotFound))
            .is_ok()
    );
    // Deleting it again: OK, never NOT_FOUND.
    let again = j.step(&gone, Step::DeleteVolume { v: 0 }, refused(Code::NotFound));
    assert_eq!(again.unwrap_err().rule, Rule::DeleteIdempotent);
}

/// A volume created, attached, staged and published at t0.
fn published(j: &mut Judge) -> World {
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let attach = Step::ControllerPublish {
        v: 0,
        known_node: true,
        readonly: false,
    };
    let w = j.one(
        &w,
        attach,
        Answer::Reply(Response::Published {
            publish_context: Attributes::new(),
        }),
    );
    let w = j.one(
        &w,
        Step::NodeStage {
            v: 0,
            other_mode: false,
        },
        ok(),
    );
    j.one(
        &w,
        Step::NodePublish {
            v: 0,
            t: 0,
            readonly: false,
        },
        ok(),
    )
}

#[test]
fn unstaging_beneath_a_published_target_is_noted() {
    let mut j = Judge::new();
    let w = published(&mut j);
    assert!(
        j.step(
            &w,
            Step::NodeUnstage { v: 0 },
            refused(Code::FailedPrecondition)
        )
        .is_ok()
    );
    assert!(j.notes.is_empty());
    assert!(j.step(&w, Step::NodeUnstage { v: 0 }, ok()).is_ok());
    assert_eq!(j.notes, vec![Rule::UnstageWhilePublished]);
}

#[test]
fn a_published_target_must_be_a_mount_and_an_unpublished_one_gone() {
    let mut j = Judge::new();
    let w = published(&mut j);
    let target = j.names.target(0, 0);
    let seen = |mounted: Option<bool>, exists: bool| NodeSeen {
        paths: BTreeMap::from([(
            target.clone(),
            PathSeen {
                exists,
                mounted,
                block_device: false,
            },
        )]),
        ..NodeSeen::default()
    };
    let observe = |w: &World, removed: &[(u8, u8)], s: &NodeSeen| {
        oracle::observe(&j.names, w, &[(0, 0)], removed, s, None)
    };
    assert!(observe(&w, &[], &seen(Some(false), true)).is_ok());
    assert_eq!(
        observe(&w, &[], &seen(None, true)).unwrap_err().rule,
        Rule::PublishMounts
    );
    let mut ro = w.clone();
    ro.node.get_mut(&0).unwrap().targets.insert(0, true);
    assert_eq!(
        observe(&ro, &[], &seen(Some(false), true))
            .unwrap_err()
            .rule,
        Rule::PublishMounts
    );
    let mut jj = Judge::new();
    let _ = published(&mut jj);
    let down = jj.one(&w, Step::NodeUnpublish { v: 0, t: 0 }, ok());
    assert_eq!(
        observe(&down, &[(0, 0)], &seen(Some(false), true))
            .unwrap_err()
            .rule,
        Rule::UnpublishUnmounts
    );
    assert_eq!(
        observe(&down, &[(0, 0)], &seen(None, true))
            .unwrap_err()
            .rule,
        Rule::UnpublishUnmounts
    );
    assert!(observe(&down, &[(0, 0)], &seen(None, false)).is_ok());
}

#[test]
fn a_delete_and_a_publish_both_ok_at_once_fit_no_order_for_a_driver_that_refuses_deleting_in_use() {
    let mut j = Judge::new();
    let mut w = j.one(&World::default(), CREATE, volume("a", 16));
    w.choices.insert(Choice::DeletePublished, false);
    let group = [
        in_flight(Step::DeleteVolume { v: 0 }, ok()),
        Sent {
            step: Step::ControllerPublish {
                v: 0,
                known_node: true,
                readonly: false,
            },
            answer: Answer::Reply(Response::Published {
                publish_context: Attributes::new(),
            }),
            busy: true,
        },
    ];
    let judged = j.group(&[w.clone()], &group);
    assert!(judged.worlds.is_empty());
    assert_eq!(judged.breach.unwrap().rule, Rule::Linearizable);
    // ABORTED for one of them is fair, and so is either order when the
    // driver has not said how it answers deleting a volume in use.
    let mut aborted = group.clone();
    aborted[1].answer = refused(Code::Aborted);
    let judged = j.group(&[w.clone()], &aborted);
    assert!(judged.breach.is_none());
    w.choices.clear();
    let judged = j.group(&[w], &group);
    assert!(judged.breach.is_none(), "{:?}", judged.breach);
}

#[test]
fn a_group_snapshot_is_of_a_set_of_volumes() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), CREATE, volume("a", 16));
    let w = j.one(
        &w,
        Step::CreateVolume {
            v: 1,
            shape: Shape::Plain,
        },
        volume("b", 16),
    );
    let group = |id: &str| {
        let member = |of: &str| crate::driver::Snapshot {
            snapshot_id: format!("{id}-{of}"),
            source_volume_id: of.into(),
            size_bytes: 16,
            creation_time: Default::default(),
            ready_to_use: true,
            group_snapshot_id: id.into(),
        };
        Answer::Reply(Response::GroupSnapshot(crate::driver::GroupSnapshot {
            group_snapshot_id: id.into(),
            snapshots: vec![member("a"), member("b")],
            creation_time: Default::default(),
            ready_to_use: true,
        }))
    };
    let w = j.one(
        &w,
        Step::CreateGroupSnapshot { g: 0, a: 0, b: 1 },
        group("g"),
    );
    // The same set named the other way round: the same group.
    assert!(
        j.step(
            &w,
            Step::CreateGroupSnapshot { g: 0, a: 1, b: 0 },
            group("g")
        )
        .is_ok()
    );
    let twice = j.step(
        &w,
        Step::CreateGroupSnapshot { g: 0, a: 0, b: 1 },
        group("h"),
    );
    assert_eq!(twice.unwrap_err().rule, Rule::SnapshotIdempotent);
    let w = j.one(
        &w,
        Step::CreateVolume {
            v: 2,
            shape: Shape::Plain,
        },
        volume("c", 16),
    );
    let other = j.step(
        &w,
        Step::CreateGroupSnapshot { g: 0, a: 0, b: 2 },
        group("g"),
    );
    assert_eq!(other.unwrap_err().rule, Rule::SnapshotIdempotent);
    // A volume in a group is the source of snapshots: deleting it is the driver's choice.
    assert!(
        j.step(
            &w,
            Step::DeleteVolume { v: 0 },
            refused(Code::FailedPrecondition)
        )
        .is_ok()
    );
}

fn capacity(available: u64) -> Answer {
    Answer::Reply(Response::Capacity {
        available_bytes: available,
        maximum_volume_size: None,
        minimum_volume_size: None,
    })
}

#[test]
fn a_create_granted_more_than_get_capacity_said_is_noted() {
    let mut j = Judge::new();
    let w = j.one(&World::default(), Step::GetCapacity, capacity(100));
    assert_eq!(w.capacity, Some(100));
    let w = j.one(&w, CREATE, volume("vol-0", 16));
    assert_eq!(
        w.capacity,
        Some(84),
        "what a create takes is no longer free"
    );
    assert!(j.notes.is_empty(), "{:?}", j.notes);
    let w = j.one(&w, Step::GetCapacity, capacity(0));
    let second = Step::CreateVolume {
        v: 1,
        shape: Shape::Plain,
    };
    let w = j.one(&w, second, volume("vol-1", 16));
    assert_eq!(j.notes, vec![Rule::CapacityCoversGranted]);
    assert_eq!(w.capacity, None, "noted once, then unknown");
    // A delete may give space back: unknown until asked again.
    let w = j.one(&w, Step::GetCapacity, capacity(16));
    let w = j.one(&w, Step::DeleteVolume { v: 0 }, ok());
    assert_eq!(w.capacity, None);
}

/// Facts of a driver whose node is in zone `a`.
fn zonal() -> Facts {
    Facts {
        topology: Some([("zone", "a")].into_iter().collect()),
        ..facts()
    }
}

fn made_in(id: &str, zone: &str) -> Answer {
    Answer::Reply(Response::Volume(Volume {
        accessible_topology: vec![[("zone", zone)].into_iter().collect()],
        volume_context: Attributes::new(),
        volume_id: id.into(),
        capacity_bytes: 16,
        content_source: None,
    }))
}

const ELSEWHERE: Step = Step::CreateVolume {
    v: 0,
    shape: Shape::Elsewhere { here_too: false },
};

/// The steps generated for a world over many draws, one volume slot.
fn generated(w: &World, facts: &Facts) -> Vec<Step> {
    let bounds = super::generate::Bounds {
        volumes: 1,
        ..Default::default()
    };
    let mut rng = super::choose::Chooser::Seeded(crate::rng::Rng::new(7));
    (0..2_000)
        .map(|_| super::generate::next(&mut rng, w, facts, &bounds, None))
        .collect()
}

fn on_the_node(s: &Step) -> bool {
    matches!(
        s,
        Step::NodeStage { .. }
            | Step::NodePublish { .. }
            | Step::ControllerPublish {
                known_node: true,
                ..
            }
    )
}

#[test]
fn a_create_for_another_segment_only_is_made_there_or_refused_as_exhausted() {
    let mut j = Judge::new();
    j.facts = zonal();
    let requirement = j
        .facts
        .requirement_for(Shape::Elsewhere { here_too: false }, None)
        .unwrap();
    assert_eq!(requirement.requisite.len(), 1);
    assert_eq!(
        requirement.requisite[0].get("zone"),
        Some("volplane-check-elsewhere")
    );
    let none = World::default();
    assert_eq!(
        j.step(&none, ELSEWHERE, refused(Code::ResourceExhausted))
            .unwrap(),
        vec![none.clone()]
    );
    let wrong = j
        .step(&none, ELSEWHERE, refused(Code::InvalidArgument))
        .unwrap_err();
    assert_eq!(wrong.rule, Rule::KnownCode);
    assert!(
        wrong.detail.contains("RESOURCE_EXHAUSTED"),
        "{}",
        wrong.detail
    );
    let here = j.step(&none, ELSEWHERE, made_in("a", "a")).unwrap_err();
    assert_eq!(here.rule, Rule::CreateTopology);
    // Made there: kept off this node, and deleted in time.
    let w = j.one(&none, ELSEWHERE, made_in("x", "volplane-check-elsewhere"));
    assert!(!w.volumes[&0].reachable());
    let steps = generated(&w, &j.facts);
    assert!(
        !steps.iter().any(on_the_node),
        "sent to the node: {steps:?}"
    );
    assert!(steps.contains(&Step::DeleteVolume { v: 0 }));
}

#[test]
fn a_create_for_either_segment_made_here_is_used_here() {
    let mut j = Judge::new();
    j.facts = zonal();
    j.names.elsewhere = Some([("zone", "b")].into_iter().collect());
    let either = Step::CreateVolume {
        v: 0,
        shape: Shape::Elsewhere { here_too: true },
    };
    let r = j
        .facts
        .requirement_for(
            Shape::Elsewhere { here_too: true },
            j.names.elsewhere.as_ref(),
        )
        .unwrap();
    let zones = |t: &[crate::driver::Topology]| -> Vec<String> {
        t.iter()
            .map(|s| s.get("zone").unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(zones(&r.requisite), ["a", "b"]);
    assert_eq!(zones(&r.preferred), ["b", "a"], "the other segment first");
    // Here: used here. Lost: kept off until an answer says where.
    let w = j.one(&World::default(), either, made_in("x", "a"));
    assert!(w.volumes[&0].reachable());
    assert!(generated(&w, &j.facts).iter().any(on_the_node));
    let lost = Answer::Lost("transport error".into());
    let ws = j.step(&World::default(), either, lost).unwrap();
    assert!(
        ws.iter()
            .any(|w| w.volumes.get(&0).is_some_and(|v| !v.reachable()))
    );
    // Asked for here under the same name: either answer changes nothing.
    assert!(j.step(&w, CREATE, refused(Code::AlreadyExists)).is_ok());
    assert!(j.step(&w, CREATE, made_in("x", "a")).is_ok());
}

#[test]
fn a_call_wrong_in_every_order_is_its_own_finding_among_calls_in_flight() {
    let mut j = Judge::new();
    j.facts = zonal();
    let group = [
        in_flight(Step::DeleteVolume { v: 0 }, ok()),
        in_flight(ELSEWHERE, made_in("x", "a")),
    ];
    let judged = j.group(&[World::default()], &group);
    let breach = judged.breach.expect("made outside the requisite");
    assert_eq!(breach.rule, Rule::CreateTopology, "{}", breach.detail);
}
