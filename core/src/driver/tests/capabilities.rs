//! CSI spec: a request the plugin does not advertise the capability for is
//! UNIMPLEMENTED, naming the capability; with it advertised the same
//! request is served (whatever its own answer).

use super::*;

fn requests() -> Vec<(Request, &'static str)> {
    let any = || CapacityRange {
        required_bytes: 1 << 20,
        limit_bytes: 0,
    };
    vec![
        (create("pvc-a", 1 << 20), "CREATE_DELETE_VOLUME"),
        (
            Request::DeleteVolume(DeleteVolume {
                volume_id: "vol-a".into(),
                secrets: Secrets::default(),
            }),
            "CREATE_DELETE_VOLUME",
        ),
        (
            cpublish("vol-a", "node-a", AccessMode::SingleNodeWriter),
            "PUBLISH_UNPUBLISH_VOLUME",
        ),
        (
            Request::ControllerUnpublish(ControllerUnpublish {
                volume_id: "vol-a".into(),
                node_id: None,
                secrets: Secrets::default(),
            }),
            "PUBLISH_UNPUBLISH_VOLUME",
        ),
        (
            Request::ListVolumes(ListVolumes {
                max_entries: 0,
                starting_token: String::new(),
            }),
            "LIST_VOLUMES",
        ),
        (
            Request::GetCapacity(GetCapacity {
                capabilities: vec![],
                parameters: Attributes::new(),
                accessible_topology: None,
            }),
            "GET_CAPACITY",
        ),
        (
            Request::ControllerExpand(ControllerExpand {
                volume_id: "vol-a".into(),
                capacity: any(),
                capability: None,
                secrets: Secrets::default(),
            }),
            "EXPAND_VOLUME",
        ),
        (
            Request::ControllerGetVolume {
                volume_id: "vol-a".into(),
            },
            "GET_VOLUME",
        ),
        (
            Request::ControllerModify(ControllerModify {
                volume_id: "vol-a".into(),
                mutable_parameters: Attributes::new(),
                secrets: Secrets::default(),
            }),
            "MODIFY_VOLUME",
        ),
        (
            Request::NodeVolumeStats(NodeVolumeStats {
                volume_id: "vol-a".into(),
                volume_path: target("p"),
                staging_target_path: String::new(),
            }),
            "GET_VOLUME_STATS",
        ),
        (
            Request::NodeExpand(NodeExpand {
                volume_id: "vol-a".into(),
                volume_path: target("p"),
                capacity: any(),
                staging_target_path: String::new(),
                capability: None,
                secrets: Secrets::default(),
            }),
            "node EXPAND_VOLUME",
        ),
    ]
}

#[test]
fn a_request_without_its_capability_is_unimplemented_and_names_it() {
    for (request, capability) in requests() {
        let mut config = DriverConfig::new("volplane.csi.io", "test", "node-a");
        config.controller_capabilities.clear();
        config.node_capabilities.clear();
        let method = request.method();
        let e = Harness::with(config).err(request);
        assert_eq!(e.code, Code::Unimplemented, "{method}: {e}");
        assert_eq!(
            e.message,
            format!("{method}: driver volplane.csi.io does not advertise {capability}")
        );
    }
}

#[test]
fn a_request_with_its_capability_is_served() {
    for (request, _) in requests() {
        let mut config = DriverConfig::new("volplane.csi.io", "test", "node-a");
        config
            .controller_capabilities
            .insert(ControllerCapability::ModifyVolume);
        let method = request.method();
        if let Err(e) = Harness::with(config).call(request) {
            assert_ne!(e.code, Code::Unimplemented, "{method}: {e}");
        }
    }
}

#[test]
fn stages_and_has_read_the_advertised_capabilities() {
    let mut config = DriverConfig::new("volplane.csi.io", "test", "node-a");
    assert!(config.stages());
    assert!(config.has(ControllerCapability::GetVolume));
    config.node_capabilities.clear();
    config.controller_capabilities.clear();
    assert!(!config.stages());
    assert!(!config.has(ControllerCapability::GetVolume));
}

#[test]
fn controller_get_volume_reports_the_mutable_parameters_as_they_are_now() {
    let mut h = Harness::new();
    let Request::CreateVolume(mut r) = create("a", 1 << 20) else {
        unreachable!()
    };
    r.mutable_parameters.insert("iops".into(), "3000".into());
    let Response::Volume(v) = h.ok(Request::CreateVolume(r)) else {
        panic!()
    };
    let modify = |value: &str| {
        Request::ControllerModify(ControllerModify {
            volume_id: v.volume_id.clone(),
            mutable_parameters: [("iops".to_string(), value.to_string())].into(),
            secrets: Secrets::default(),
        })
    };
    let get = || Request::ControllerGetVolume {
        volume_id: v.volume_id.clone(),
    };
    let iops = |r: Response| match r {
        Response::ControllerVolume(e) => e.volume.volume_context["iops"].to_string(),
        r => panic!("{r:?}"),
    };
    assert_eq!(iops(h.ok(get())), "3000");
    let (_, effects) = h.send(modify("3000"));
    assert!(executes(&effects).is_empty(), "unchanged: answered at once");
    h.ok(modify("6000"));
    assert_eq!(iops(h.ok(get())), "6000");
}

/// A backend that makes an id no CO could send back (here 132 bytes, from
/// a 128-byte name) is caught at CreateVolume, naming the problem, instead
/// of a volume that can never be deleted.
#[test]
fn a_volume_id_a_co_could_not_send_back_is_refused() {
    let mut h = Harness::new();
    let name = "a".repeat(128);
    let e = h.err(create(&name, 1 << 20));
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(
        e.message
            .contains("is 132 bytes long, over the 128 CSI allows"),
        "{e}"
    );
    assert!(super::super::unusable_id("vol-1").is_none());
    assert!(super::super::unusable_id("a/../b").is_some());
}
