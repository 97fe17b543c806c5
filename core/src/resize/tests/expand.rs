//! The expand half as external-resizer's expandAndRecover behaves
//! (RecoverVolumeExpansionFailure): the size it goes for, case by case,
//! and a user's way back from an expansion the storage cannot do.

use super::*;
use crate::Code;
use crate::model::names::expansion::*;
use crate::resize::expand::Expansion;

const G: u64 = 1 << 30;

/// A driver whose storage grows volumes up to 4Gi and answers
/// OUT_OF_RANGE beyond; `first` answers its first call instead.
fn limited(first: Option<Code>) -> impl FnMut(&Request) -> crate::control::CsiResult {
    let mut first = first;
    move |c| match c {
        Request::ControllerExpand(_) if first.is_some() => {
            let code = first.take().unwrap();
            Err(Status::new(code, "injected"))
        }
        Request::ControllerExpand(e) if e.capacity.required_bytes > 4 * G => Err(Status::new(
            Code::OutOfRange,
            "volumes of this pool grow to 4Gi at most",
        )),
        Request::ControllerExpand(e) => Ok(Response::ControllerExpanded {
            capacity_bytes: e.capacity.required_bytes,
            node_expansion_required: false,
        }),
        other => Err(Status::unimplemented(other.method())),
    }
}

fn expands(r: &Rig<Resizer>) -> Vec<u64> {
    r.csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::ControllerExpand(e) => Some(e.capacity.required_bytes / G),
            _ => None,
        })
        .collect()
}

/// One row: its name, (PV, spec, allocated) in GiB, the status, whether
/// the last call failed for good, and the size expanded to.
type Case = (
    &'static str,
    (u64, u64, Option<u64>),
    Option<&'static str>,
    bool,
    Option<u64>,
);

/// Upstream's table (expand_and_recover_test.go), as the sizes it goes
/// for: (PV, spec, allocated, status, final error) → target.
#[test]
fn the_size_expanded_to_follows_upstreams_cases() {
    #[rustfmt::skip]
    let cases: [Case; 10] = [
        ("spec > pv, no expansion recorded", (1, 2, None), None, false, Some(2)),
        ("spec > pv, controller infeasible: the new spec", (3, 5, Some(10)), Some(CONTROLLER_INFEASIBLE), false, Some(5)),
        ("spec > pv, in progress, failed for good: the new spec", (3, 5, Some(10)), Some(CONTROLLER_IN_PROGRESS), true, Some(5)),
        ("spec > pv, in progress, may still run: carried on", (3, 5, Some(10)), Some(CONTROLLER_IN_PROGRESS), false, Some(10)),
        ("spec = pv, node infeasible: the controller says the node may retry", (10, 5, Some(10)), Some(NODE_INFEASIBLE), false, Some(10)),
        ("spec = pv, node pending: the node finishes", (1, 1, Some(1)), Some(NODE_PENDING), false, None),
        ("spec > pv, node pending, pv as allocated: the node finishes first", (3, 10, Some(3)), Some(NODE_PENDING), false, None),
        ("spec > pv, node in progress, pv as allocated", (3, 10, Some(3)), Some(NODE_IN_PROGRESS), false, None),
        ("spec > pv, node pending, pv short of allocated", (2, 10, Some(3)), Some(NODE_PENDING), false, Some(3)),
        ("spec = pv, no status, allocated recorded: resumed to it", (2, 2, Some(2)), None, false, Some(2)),
    ];
    for (name, (pv, spec, allocated), status, final_error, want) in cases {
        let e = Expansion {
            pv: pv * G,
            spec: spec * G,
            allocated: allocated.map(|a| a * G),
            status,
            final_error,
            fs_pending: false,
        };
        assert_eq!(e.target(), want.map(|w| w * G), "{name}");
    }
    let legacy = Expansion {
        pv: 2 * G,
        spec: 2 * G,
        allocated: None,
        status: None,
        final_error: false,
        fs_pending: true,
    };
    assert_eq!(
        legacy.target(),
        None,
        "an older resizer's node step is left to the node"
    );
}

#[test]
fn the_claim_records_the_size_set_out_for_before_the_call() {
    let mut r = rig(true, true);
    grow(&mut r, "2Gi");
    let first = r
        .writes
        .iter()
        .find_map(|w| match w {
            ApiCall::UpdateStatus(Object::Pvc(c)) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(first.resize_status(), Some(CONTROLLER_IN_PROGRESS));
    assert_eq!(first.allocated().unwrap().bytes(), 2 * G);
    assert!(first.condition(RESIZING).is_some());
    let c = claim(&r);
    assert_eq!(c.resize_status(), Some(NODE_PENDING));
    let pending = c.condition(FS_RESIZE_PENDING).unwrap();
    assert_eq!(pending.message, crate::resize::expand::WAITING_FOR_NODE);
}

#[test]
fn an_expansion_without_a_node_step_leaves_no_status_and_says_the_node_is_not_needed() {
    let mut r = rig(false, true);
    grow(&mut r, "3Gi");
    let c = claim(&r);
    assert_eq!(c.status_capacity().unwrap().bytes(), 3 * G);
    assert_eq!(c.resize_status(), None);
    assert!(c.status.conditions.is_empty(), "{:?}", c.status.conditions);
    assert_eq!(
        c.metadata.annotation(ANN_NODE_EXPANSION_NOT_REQUIRED),
        Some("true")
    );
    assert_eq!(c.allocated().unwrap().bytes(), 3 * G, "allocated stays");
}

/// The user's way back: OUT_OF_RANGE makes the claim Infeasible, it is
/// not tried again at that size, and a smaller request (still above the
/// status capacity) is expanded to instead.
#[test]
fn an_infeasible_expansion_waits_for_a_smaller_request_and_recovers_to_it() {
    let mut r = rig(false, true);
    r.answer_csi(limited(None));
    grow(&mut r, "10Gi");
    let c = claim(&r);
    assert_eq!(c.resize_status(), Some(CONTROLLER_INFEASIBLE));
    let error = c.condition(CONTROLLER_RESIZE_ERROR).unwrap();
    assert!(
        error
            .message
            .starts_with("failed to expand pvc with rpc error: code = OutOfRange"),
        "{}",
        error.message
    );
    assert_eq!(c.allocated().unwrap().bytes(), 10 * G);
    assert_eq!(
        c.status_capacity().unwrap().bytes(),
        G,
        "the old size stays"
    );
    r.advance(3_600_000);
    assert_eq!(
        expands(&r),
        vec![10],
        "never again at the size found infeasible"
    );

    grow(&mut r, "3Gi");
    assert_eq!(expands(&r), vec![10, 3]);
    let c = claim(&r);
    assert_eq!(c.status_capacity().unwrap().bytes(), 3 * G);
    assert_eq!(pv_bytes(&r), 3 * G);
    assert_eq!(c.resize_status(), None);
    assert!(c.status.conditions.is_empty(), "{:?}", c.status.conditions);
}

/// A call that may still be running (UNAVAILABLE) is carried on to its
/// size even when the user asks for less meanwhile.
#[test]
fn an_expansion_that_may_still_run_is_carried_on_to_its_size() {
    let mut r = rig(false, true);
    r.answer_csi(limited(Some(Code::Unavailable)));
    grow(&mut r, "4Gi");
    assert_eq!(claim(&r).resize_status(), Some(CONTROLLER_IN_PROGRESS));
    assert!(claim(&r).condition(CONTROLLER_RESIZE_ERROR).is_none());
    grow(&mut r, "2Gi");
    r.advance(5_000);
    assert_eq!(expands(&r), vec![4, 4]);
    assert_eq!(claim(&r).status_capacity().unwrap().bytes(), 4 * G);
}

/// A call that surely ended (INTERNAL) is not carried on: the next try is
/// for the size asked then.
#[test]
fn after_a_final_error_the_next_try_is_for_the_size_asked_then() {
    let mut r = rig(false, true);
    r.answer_csi(limited(Some(Code::Internal)));
    grow(&mut r, "4Gi");
    let c = claim(&r);
    assert_eq!(c.resize_status(), Some(CONTROLLER_IN_PROGRESS));
    assert!(c.condition(CONTROLLER_RESIZE_ERROR).is_some());
    grow(&mut r, "2Gi");
    r.advance(5_000);
    assert_eq!(expands(&r), vec![4, 2]);
    assert_eq!(claim(&r).status_capacity().unwrap().bytes(), 2 * G);
}

/// While the node finishes an expansion, a larger request waits for it.
#[test]
fn a_larger_request_waits_for_the_node_to_finish_the_last_expansion() {
    let mut r = rig(true, true);
    grow(&mut r, "2Gi");
    assert_eq!(claim(&r).resize_status(), Some(NODE_PENDING));
    grow(&mut r, "3Gi");
    r.advance(5_000);
    assert_eq!(expands(&r), vec![2]);
    // The node finishes (as the kubelet writes it): the next expansion starts.
    let mut c = claim(&r);
    c.status
        .capacity
        .insert("storage".into(), Quantity::from_bytes(2 * G));
    c.merge_resize_conditions(Vec::new(), false);
    c.set_resize_status(None);
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    r.advance(5_000);
    assert_eq!(expands(&r), vec![2, 3]);
}
