//! Each staging and target path belongs to one volume; a queried path the
//! driver never recorded is NOT_FOUND.

use super::*;

fn stats(v: &str, path: &str) -> Request {
    Request::NodeVolumeStats(NodeVolumeStats {
        volume_id: v.into(),
        volume_path: path.into(),
        staging_target_path: String::new(),
    })
}

fn publish_at(v: &str, target: &str) -> Request {
    let Request::NodePublish(mut r) = publish(v, "p", AccessMode::SingleNodeMultiWriter) else {
        unreachable!()
    };
    r.target_path = target.into();
    Request::NodePublish(r)
}

#[test]
fn a_target_of_one_volume_is_refused_to_another_and_nothing_is_planned() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    h.ok(stage("b"));
    h.ok(publish("a", "p1", AccessMode::SingleNodeMultiWriter));
    let (_, effects) = h.send(publish_at("b", &target("p1")));
    assert!(executes(&effects).is_empty(), "{effects:?}");
    let e = h.err(publish_at("b", &target("p1")));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("volume a"), "{e}");
    // b's unpublish of a's target finds nothing of b's there: a's mount stays.
    let (_, effects) = h.send(unpublish("b", "p1"));
    assert!(executes(&effects).is_empty(), "{effects:?}");
    assert!(h.d.state().node["a"].targets.contains_key(&target("p1")));
}

#[test]
fn a_staging_path_of_one_volume_is_refused_to_another_as_stage_or_target() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    let e = h.err(stage_at(
        "b",
        &staging("a"),
        AccessMode::SingleNodeMultiWriter,
    ));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("staging path"), "{e}");
    h.ok(stage("b"));
    let e = h.err(publish_at("b", &staging("a")));
    assert_eq!(e.code, Code::FailedPrecondition);
}

#[test]
fn paths_nesting_in_another_volumes_paths_are_refused() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    h.ok(stage("b"));
    let inside = format!("{}/sub/mount", staging("a"));
    let e = h.err(publish_at("b", &inside));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("nests"), "{e}");
    h.ok(publish("a", "p1", AccessMode::SingleNodeMultiWriter));
    let around = format!("{ROOT}/pods/p1");
    let e = h.err(stage_at("c", &around, AccessMode::SingleNodeMultiWriter));
    assert_eq!(e.code, Code::FailedPrecondition);
}

#[test]
fn a_volume_may_not_publish_into_its_own_staging_path() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    let e = h.err(publish_at("a", &format!("{}/x", staging("a"))));
    assert_eq!(e.code, Code::FailedPrecondition);
}

#[test]
fn repeats_on_a_volumes_own_paths_stay_idempotent() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    h.ok(stage("a"));
    h.ok(publish("a", "p1", AccessMode::SingleNodeMultiWriter));
    h.ok(publish("a", "p1", AccessMode::SingleNodeMultiWriter));
    h.ok(publish("a", "p2", AccessMode::SingleNodeMultiWriter));
}

#[test]
fn stats_of_a_relative_outside_or_unknown_path_are_not_found() {
    let mut h = Harness::new();
    h.ok(stage("a"));
    for p in [
        "some/relative/path",
        "/etc/passwd",
        &target("nobody"),
        "/a/../b",
    ] {
        let e = h.err(stats("a", p));
        assert_eq!(e.code, Code::NotFound, "{p}: {e}");
    }
    assert_eq!(h.err(stats("a", "")).code, Code::InvalidArgument);
    h.ok(stats("a", &staging("a")));
}
