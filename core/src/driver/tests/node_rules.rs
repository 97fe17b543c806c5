//! The Node service's finer rules: what a refused stage leaves behind, which
//! republish is compatible, expansion bounds and repeats, and what a mount
//! table that still holds the mounts keeps.

use super::*;
use crate::mountinfo::MountEntry;

fn mount(path: &str) -> MountEntry {
    MountEntry {
        mount_id: 1,
        parent_id: 0,
        major: 7,
        minor: 0,
        root: "/".into(),
        mount_point: path.into(),
        options: "rw".into(),
        fs_type: "ext4".into(),
        source: "/dev/loop0".into(),
        super_options: "rw".into(),
    }
}

fn node_expand(v: &str, required: u64, limit: u64) -> Request {
    Request::NodeExpand(NodeExpand {
        volume_id: v.into(),
        volume_path: staging(v),
        capacity: CapacityRange {
            required_bytes: required,
            limit_bytes: limit,
        },
        staging_target_path: staging(v),
        capability: None,
        secrets: Secrets::default(),
    })
}

/// Sends a request and fails its one plan with `error`.
fn fail_plan(h: &mut Harness, request: Request, error: Status) {
    let (_, effects) = h.send(request);
    let Some(Effect::Execute { op, .. }) = effects
        .iter()
        .find(|e| matches!(e, Effect::Execute { .. }))
        .cloned()
    else {
        panic!("no plan: {effects:?}")
    };
    h.d.handle(
        h.now,
        Input::Done {
            op,
            result: Err(error),
        },
    );
    h.drain();
}

#[test]
fn a_stage_the_backend_refused_before_acting_leaves_no_record() {
    for error in [
        Status::invalid("bad fs"),
        Status::not_found("no device"),
        Status::failed_precondition("not attached"),
        Status::already_exists("other volume"),
    ] {
        let mut h = Harness::new();
        let code = error.code;
        fail_plan(&mut h, stage("v"), error);
        assert!(!h.d.state().node.contains_key("v"), "{code:?}");
        let (_, effects) = h.send(unstage("v"));
        assert!(executes(&effects).is_empty(), "{code:?}: {effects:?}");
    }
}

#[test]
fn a_target_nesting_in_the_volumes_own_other_target_is_refused() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    h.ok(publish("a", "p1", AccessMode::SingleNodeMultiWriter));
    let Request::NodePublish(mut r) = publish("a", "p2", AccessMode::SingleNodeMultiWriter) else {
        unreachable!()
    };
    r.target_path = format!("{}/inner", target("p1"));
    let e = h.err(Request::NodePublish(r));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("this volume"), "{e}");
}

#[test]
fn a_republish_differing_only_in_readonly_is_already_exists() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    h.ok(publish("a", "p1", AccessMode::SingleNodeMultiWriter));
    let Request::NodePublish(mut r) = publish("a", "p1", AccessMode::SingleNodeMultiWriter) else {
        unreachable!()
    };
    r.readonly = true;
    assert_eq!(h.err(Request::NodePublish(r)).code, Code::AlreadyExists);
}

#[test]
fn a_single_target_mode_on_either_side_refuses_a_second_target() {
    // Published for many targets first, then asked for one more as a
    // single-target mode: the new mode forbids sharing.
    let mut h = Harness::new();
    h.ok(stage("v"));
    h.ok(publish("v", "p1", AccessMode::SingleNodeMultiWriter));
    let e = h.err(publish("v", "p2", AccessMode::SingleNodeSingleWriter));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("SINGLE_NODE_SINGLE_WRITER"), "{e}");
    // The other way round: the first target's mode forbids sharing.
    let mut h = Harness::new();
    h.ok(stage("v"));
    h.ok(publish("v", "p1", AccessMode::SingleNodeSingleWriter));
    let e = h.err(publish("v", "p2", AccessMode::SingleNodeMultiWriter));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("SINGLE_NODE_SINGLE_WRITER"), "{e}");
}

#[test]
fn node_expand_checks_its_range_and_answers_repeats_from_memory() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    let e = h.err(node_expand("v", 2 << 20, (2 << 20) - 1));
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("smaller than required_bytes"), "{e}");
    assert_eq!(
        h.ok(node_expand("v", 2 << 20, 2 << 20)),
        Response::NodeExpanded {
            capacity_bytes: 2 << 20
        }
    );
    // At or below what is done: answered without a plan.
    for required in [2 << 20, 1 << 20] {
        let (_, effects) = h.send(node_expand("v", required, 0));
        assert!(executes(&effects).is_empty(), "{required}: {effects:?}");
        assert!(
            effects.iter().any(|e| matches!(
                e,
                Effect::Reply {
                    result: Ok(Response::NodeExpanded {
                        capacity_bytes: 0x200000
                    }),
                    ..
                }
            )),
            "{effects:?}"
        );
    }
    // Beyond it, or with no size asked for: the backend grows the filesystem.
    for (required, limit) in [(3 << 20, 4 << 20), (0, 0)] {
        let (_, effects) = h.send(node_expand("v", required, limit));
        let [Effect::Execute { op, plan }] = &executes_effects(&effects)[..] else {
            panic!("{required}: {effects:?}")
        };
        assert!(matches!(plan, Plan::NodeExpand { .. }), "{plan:?}");
        let (op, result) = (*op, Ok(success(plan)));
        h.d.handle(h.now, Input::Done { op, result });
        h.drain();
    }
}

fn executes_effects(effects: &[Effect]) -> Vec<Effect> {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::Execute { .. }))
        .cloned()
        .collect()
}

#[test]
fn records_whose_mounts_are_still_there_survive_a_mount_table_check() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    h.ok(publish("v", "p1", AccessMode::SingleNodeMultiWriter));
    let before = h.d.state().clone();
    h.d.handle(
        5,
        Input::Mounts(vec![mount(&staging("v")), mount(&target("p1"))]),
    );
    assert!(h.drain().is_empty());
    assert_eq!(h.d.state(), &before);
}

#[test]
fn an_uncertain_target_is_kept_though_its_mount_is_missing() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    fail_plan(
        &mut h,
        publish("v", "p1", AccessMode::SingleNodeMultiWriter),
        Status::internal("mount timed out"),
    );
    assert!(!h.d.state().node["v"].targets[&target("p1")].certain);
    h.d.handle(5, Input::Mounts(vec![mount(&staging("v"))]));
    h.drain();
    assert!(h.d.state().node["v"].targets.contains_key(&target("p1")));
}
