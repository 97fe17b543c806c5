//! A volume asked for again under its name is the same volume when it is
//! accessible from the new request's requisite topology (the CSI spec's
//! test), whatever else the requirement says.

use super::*;

fn zone(z: &str) -> Topology {
    [("zone".to_string(), z.to_string())].into_iter().collect()
}

/// CreateVolume `name` requiring one of `requisite`.
fn create_in(name: &str, requisite: &[&str]) -> Request {
    let Request::CreateVolume(mut c) = create(name, 1 << 20) else {
        unreachable!()
    };
    c.accessibility = Some(TopologyRequirement {
        requisite: requisite.iter().map(|z| zone(z)).collect(),
        preferred: requisite.iter().take(1).map(|z| zone(z)).collect(),
    });
    Request::CreateVolume(c)
}

/// Creates `name` with `request`; the backend places it in zone `a`.
fn placed_in_a(h: &mut Harness, request: Request) -> Volume {
    let (rpc, effects) = h.send(request);
    let Some(Effect::Execute { op, plan }) = effects
        .into_iter()
        .find(|e| matches!(e, Effect::Execute { .. }))
    else {
        panic!("no plan")
    };
    let Outcome::Created(mut v) = success(&plan) else {
        panic!()
    };
    v.accessible_topology = vec![zone("a")];
    h.d.handle(
        h.now,
        Input::Done {
            op,
            result: Ok(Outcome::Created(v)),
        },
    );
    for e in h.drain() {
        if let Effect::Reply { rpc: r, result } = e
            && r == rpc
        {
            let Ok(Response::Volume(v)) = result else {
                panic!("{result:?}")
            };
            return v;
        }
    }
    panic!("not answered")
}

#[test]
fn a_volume_asked_for_again_is_the_same_while_the_requisite_topology_admits_it() {
    let mut h = Harness::new();
    let first = placed_in_a(&mut h, create_in("v", &["a", "b"]));
    // The cluster's topology changed between the attempts: another
    // requisite list, still admitting zone a.
    let Response::Volume(again) = h.ok(create_in("v", &["a", "c"])) else {
        panic!()
    };
    assert_eq!(again, first);
    let Response::Volume(again) = h.ok(create("v", 1 << 20)) else {
        panic!()
    };
    assert_eq!(again, first, "no requirement admits any topology");
    // A requisite list without zone a cannot have it.
    let e = h.err(create_in("v", &["b", "c"]));
    assert_eq!(e.code, Code::AlreadyExists);
    assert!(
        e.message
            .contains("none of this request's requisite segments"),
        "{e}"
    );
}
