//! The plugin watcher's scenarios, named after SEMANTICS.md E5.

use super::*;
use crate::store::Store;

/// Drives the watcher against a store, answering GetInfo and NodeGetInfo
/// (a volume limit of 5, zone z1).
fn drive(
    w: &mut PluginWatcher,
    store: &mut Store,
    info: &PluginInfo,
    node_id: &str,
) -> Vec<(bool, String)> {
    drive_with(w, store, info, node_id, 5)
}

fn drive_with(
    w: &mut PluginWatcher,
    store: &mut Store,
    info: &PluginInfo,
    node_id: &str,
    max_volumes_per_node: u64,
) -> Vec<(bool, String)> {
    let mut notified = Vec::new();
    let mut carry = |_: &PluginWatcher, _, e, done: &mut VecDeque<WatcherInput>| match e {
        WatcherEffect::GetInfo { op, .. } => done.push_back(WatcherInput::InfoDone {
            op,
            result: Ok(info.clone()),
        }),
        WatcherEffect::NodeGetInfo { op, .. } => done.push_back(WatcherInput::NodeInfoDone {
            op,
            result: Ok(Response::NodeInfo {
                node_id: node_id.into(),
                max_volumes_per_node,
                accessible_topology: Some(
                    [("topology.volplane.io/zone".to_string(), "z1".to_string())].into(),
                ),
            }),
        }),
        WatcherEffect::Notify {
            op,
            registered,
            error,
            ..
        } => {
            notified.push((registered, error));
            done.push_back(WatcherInput::NotifyDone { op });
        }
        WatcherEffect::Api { op, call } => {
            let (result, watches) = store.apply(0, &call);
            done.push_back(WatcherInput::ApiDone { op, result });
            done.extend(watches.into_iter().map(WatcherInput::Watch));
        }
    };
    crate::machine::drain(w, 0, &mut carry);
    notified
}

fn info(name: &str, versions: &[&str]) -> PluginInfo {
    PluginInfo {
        type_: CSI_PLUGIN.into(),
        name: name.into(),
        endpoint: format!("/var/lib/kubelet/plugins/{name}/csi.sock"),
        supported_versions: versions.iter().map(|s| s.to_string()).collect(),
    }
}

fn setup() -> (PluginWatcher, Store) {
    let mut store = Store::new();
    let mut w = PluginWatcher::new("node-a");
    let mut n = Node::new("node-a");
    n.metadata
        .annotations
        .insert(names::ANN_NODE_ID.into(), r#"{"other.csi.io":"x"}"#.into());
    let (_, watches) = store.apply(0, &ApiCall::Create(Object::Node(n)));
    for x in watches {
        w.handle(0, WatcherInput::Watch(x));
    }
    (w, store)
}

#[test]
fn e5_6_e5_7_registration_writes_the_annotation_labels_and_csinode_then_notifies() {
    let (mut w, mut store) = setup();
    w.handle(
        0,
        WatcherInput::SocketAdded(
            "/var/lib/kubelet/plugins_registry/volplane.csi.io-reg.sock".into(),
        ),
    );
    let notified = drive(
        &mut w,
        &mut store,
        &info("volplane.csi.io", &["1.0.0"]),
        "node-a-id",
    );
    assert_eq!(notified, vec![(true, String::new())]);
    let Some(Object::Node(n)) = store.get(&ObjectKey::new(Kind::Node, "", "node-a")) else {
        panic!()
    };
    assert_eq!(
        n.metadata.annotation(names::ANN_NODE_ID),
        Some(r#"{"other.csi.io":"x","volplane.csi.io":"node-a-id"}"#)
    );
    assert_eq!(&n.metadata.labels["topology.volplane.io/zone"], "z1");
    let Some(Object::CsiNode(c)) = store.get(&ObjectKey::new(Kind::CsiNode, "", "node-a")) else {
        panic!()
    };
    let d = c.driver("volplane.csi.io").unwrap();
    assert_eq!(d.node_id, "node-a-id");
    assert_eq!(
        d.topology_keys,
        vec!["topology.volplane.io/zone".to_string()]
    );
    assert_eq!(d.allocatable.as_ref().unwrap().count, Some(5));
    assert_eq!(c.metadata.owner_references[0].kind, "Node");

    // Deregistration: the socket goes, so do the entry and the key.
    w.handle(
        0,
        WatcherInput::SocketRemoved(
            "/var/lib/kubelet/plugins_registry/volplane.csi.io-reg.sock".into(),
        ),
    );
    drive(&mut w, &mut store, &info("x", &[]), "");
    let Some(Object::Node(n)) = store.get(&ObjectKey::new(Kind::Node, "", "node-a")) else {
        panic!()
    };
    assert_eq!(
        n.metadata.annotation(names::ANN_NODE_ID),
        Some(r#"{"other.csi.io":"x"}"#)
    );
    let Some(Object::CsiNode(c)) = store.get(&ObjectKey::new(Kind::CsiNode, "", "node-a")) else {
        panic!()
    };
    assert!(c.driver("volplane.csi.io").is_none());
    assert!(w.registered().is_empty());
}

#[test]
fn e5_5_bad_versions_types_and_downgrades_are_refused() {
    let (mut w, mut store) = setup();
    w.handle(0, WatcherInput::SocketAdded("s1".into()));
    let n = drive(&mut w, &mut store, &info("d", &["0.3.0"]), "id");
    assert!(!n[0].0 && n[0].1.contains("None of the versions"), "{n:?}");
    w.handle(0, WatcherInput::SocketAdded("s2".into()));
    let mut dev = info("d", &["1.0.0"]);
    dev.type_ = "DevicePlugin".into();
    let n = drive(&mut w, &mut store, &dev, "id");
    assert_eq!(
        n[0].1,
        "no handler registered for plugin type: DevicePlugin"
    );
    w.handle(0, WatcherInput::SocketAdded("s3".into()));
    assert!(drive(&mut w, &mut store, &info("d", &["1.2.0"]), "id")[0].0);
    w.handle(0, WatcherInput::SocketAdded("s4".into()));
    let n = drive(&mut w, &mut store, &info("d", &["1.1.0"]), "id");
    assert!(
        !n[0].0
            && n[0].1.contains(
                "Another driver with the same name is already registered with a higher supported version: \"1.2.0\""
            ),
        "{n:?}"
    );
    // The same socket again (its registrar restarted) replaces it.
    w.handle(0, WatcherInput::SocketAdded("s3".into()));
    assert!(drive(&mut w, &mut store, &info("d", &["1.2.0"]), "id")[0].0);
    assert_eq!(w.registered()["d"].socket, "s3");
    w.handle(0, WatcherInput::SocketAdded("s5".into()));
    let n = drive(&mut w, &mut store, &info("e", &["1.0.0"]), "");
    assert_eq!(n[0].1, "error registering CSI driver: node ID is empty");
}

/// Upstream's RegisterPlugin records the driver before NodeGetInfo: of
/// two sockets naming one driver at one version, whose GetInfo answers
/// both came before either registration finished, the first holds the
/// name and the second is refused (it did not replace the first).
#[test]
fn e5_5_of_two_racing_sockets_with_one_name_the_first_holds_it() {
    let (mut w, mut store) = setup();
    w.handle(0, WatcherInput::SocketAdded("first".into()));
    w.handle(0, WatcherInput::SocketAdded("second".into()));
    let mut asked = Vec::new();
    while let Some(e) = w.poll() {
        if let WatcherEffect::GetInfo { op, socket } = e {
            asked.push((op, socket));
        }
    }
    assert_eq!(asked.len(), 2);
    for (op, _) in asked {
        w.handle(
            0,
            WatcherInput::InfoDone {
                op,
                result: Ok(info("d", &["1.0.0"])),
            },
        );
    }
    let n = drive(&mut w, &mut store, &info("d", &["1.0.0"]), "id");
    assert_eq!(
        n.iter().filter(|(ok, _)| *ok).count(),
        1,
        "both registered, or neither: {n:?}"
    );
    assert!(
        n.iter()
            .any(|(ok, e)| !ok && e.contains("Another driver with the same name")),
        "{n:?}"
    );
    assert_eq!(w.registered()["d"].socket, "first");
}

#[test]
fn nobody_answering_on_a_socket_is_retried_with_backoff_not_refused() {
    let (mut w, _) = setup();
    w.handle(0, WatcherInput::SocketAdded("s".into()));
    let Some(WatcherEffect::GetInfo { op, .. }) = w.poll() else {
        panic!()
    };
    w.handle(
        10,
        WatcherInput::InfoDone {
            op,
            result: Err("connect: connection refused".into()),
        },
    );
    assert_eq!(w.poll(), None, "no NotifyRegistrationStatus to nobody");
    assert_eq!(w.poll_timeout(), Some(510));
    w.handle_timeout(510);
    assert!(matches!(w.poll(), Some(WatcherEffect::GetInfo { .. })));
    // A socket gone is not retried.
    w.handle(600, WatcherInput::SocketRemoved("s".into()));
    assert_eq!(w.poll_timeout(), None);
}

fn csinode_entry(store: &Store, driver: &str) -> CsiNodeDriver {
    let Some(Object::CsiNode(c)) = store.get(&ObjectKey::new(Kind::CsiNode, "", "node-a")) else {
        panic!("no CSINode")
    };
    c.driver(driver).cloned().expect("an entry")
}

#[test]
fn e5_5_two_racing_sockets_of_different_drivers_both_register() {
    let (mut w, mut store) = setup();
    w.handle(0, WatcherInput::SocketAdded("a".into()));
    w.handle(0, WatcherInput::SocketAdded("b".into()));
    let mut asked = Vec::new();
    while let Some(e) = w.poll() {
        if let WatcherEffect::GetInfo { op, socket } = e {
            asked.push((op, socket));
        }
    }
    for (op, socket) in asked {
        let name = format!("{socket}.csi.io");
        w.handle(
            0,
            WatcherInput::InfoDone {
                op,
                result: Ok(info(&name, &["1.0.0"])),
            },
        );
    }
    let n = drive(&mut w, &mut store, &info("unused", &["1.0.0"]), "id");
    assert_eq!(n, vec![(true, String::new()), (true, String::new())]);
    assert_eq!(w.registered().len(), 2);
}

#[test]
fn e5_6_a_topology_label_the_node_already_has_otherwise_refuses_the_driver() {
    let (mut w, mut store) = setup();
    let Some(Object::Node(mut n)) = store
        .get(&ObjectKey::new(Kind::Node, "", "node-a"))
        .cloned()
    else {
        panic!()
    };
    n.metadata
        .labels
        .insert("topology.volplane.io/zone".into(), "z0".into());
    let (_, watches) = store.apply(0, &ApiCall::Update(Object::Node(n)));
    for x in watches {
        w.handle(0, WatcherInput::Watch(x));
    }
    w.handle(0, WatcherInput::SocketAdded("s".into()));
    let n = drive(&mut w, &mut store, &info("d", &["1.0.0"]), "id");
    assert_eq!(
        n,
        vec![(
            false,
            "error registering CSI driver: node label topology.volplane.io/zone is \"z0\", topology wants \"z1\"".to_string()
        )]
    );
    assert!(w.registered().is_empty());
}

#[test]
fn e5_7_no_volume_limit_means_no_allocatable_and_a_new_node_id_updates_the_entry() {
    let (mut w, mut store) = setup();
    w.handle(0, WatcherInput::SocketAdded("s".into()));
    drive_with(&mut w, &mut store, &info("d", &["1.0.0"]), "id-1", 0);
    let entry = csinode_entry(&store, "d");
    assert_eq!(entry.node_id, "id-1");
    assert_eq!(entry.allocatable, None, "0: no limit");
    // The registrar restarted and the driver now names itself otherwise.
    w.handle(0, WatcherInput::SocketAdded("s".into()));
    let n = drive_with(&mut w, &mut store, &info("d", &["1.0.0"]), "id-2", 0);
    assert!(n[0].0, "{n:?}");
    assert_eq!(csinode_entry(&store, "d").node_id, "id-2");
}

#[test]
fn the_invariants_name_a_driver_without_a_node_id_or_a_1x_version() {
    let (mut w, _) = setup();
    let good = Registered {
        socket: "s".into(),
        endpoint: "/csi.sock".into(),
        version: (1, 0, 0),
        node_id: "id".into(),
        topology: BTreeMap::new(),
        max_volumes: 0,
    };
    w.plugins.insert("d".into(), good.clone());
    w.check_invariants().unwrap();
    w.plugins.insert(
        "d".into(),
        Registered {
            node_id: String::new(),
            ..good.clone()
        },
    );
    let e = w.check_invariants().unwrap_err();
    assert!(e.0.contains("without a node id"), "{e}");
    w.plugins.insert(
        "d".into(),
        Registered {
            version: (0, 3, 0),
            ..good
        },
    );
    let e = w.check_invariants().unwrap_err();
    assert!(e.0.contains("registered with version"), "{e}");
}
