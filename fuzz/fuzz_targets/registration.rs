//! Arbitrary plugin infos and node answers through the kubelet's plugin
//! watcher: no panic, and a driver is registered only with a 1.x version and
//! a node id.
#![no_main]
use std::collections::VecDeque;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use volplane_core::control::ApiCall;
use volplane_core::driver::Response;
use volplane_core::machine::{self, Machine};
use volplane_core::model::{Node, Object};
use volplane_core::registration::PluginInfo;
use volplane_core::registration::watcher::{PluginWatcher, WatcherEffect, WatcherInput};
use volplane_core::store::Store;

#[derive(Debug, Arbitrary)]
struct Plugin {
    socket: u8,
    type_: String,
    name: String,
    versions: Vec<String>,
    node_id: String,
    max: u64,
    remove: bool,
}

fuzz_target!(|plugins: Vec<Plugin>| {
    let mut store = Store::new();
    let mut w = PluginWatcher::new("n");
    let (_, ws) = store.apply(0, &ApiCall::Create(Object::Node(Node::new("n"))));
    for x in ws {
        w.handle(0, WatcherInput::Watch(x));
    }
    for p in plugins.iter().take(16) {
        let socket = format!("/reg/{}", p.socket % 4);
        if p.remove {
            w.handle(0, WatcherInput::SocketRemoved(socket.clone()));
        } else {
            w.handle(0, WatcherInput::SocketAdded(socket.clone()));
        }
        let mut carried = 0;
        let mut carry = |_: &PluginWatcher, _, e, done: &mut VecDeque<WatcherInput>| {
            carried += 1;
            assert!(carried < 1_000, "the watcher does not settle");
            match e {
                WatcherEffect::GetInfo { op, .. } => done.push_back(WatcherInput::InfoDone {
                    op,
                    result: Ok(PluginInfo {
                        type_: p.type_.clone(),
                        name: p.name.clone(),
                        endpoint: "/csi.sock".into(),
                        supported_versions: p.versions.clone(),
                    }),
                }),
                WatcherEffect::NodeGetInfo { op, .. } => {
                    done.push_back(WatcherInput::NodeInfoDone {
                        op,
                        result: Ok(Response::NodeInfo {
                            node_id: p.node_id.clone(),
                            max_volumes_per_node: p.max,
                            accessible_topology: None,
                        }),
                    })
                }
                WatcherEffect::Notify { op, .. } => done.push_back(WatcherInput::NotifyDone { op }),
                WatcherEffect::Api { op, call } => {
                    store.serve(0, op, call, done);
                }
            }
        };
        machine::drain(&mut w, 0, &mut carry);
        if let Err(e) = w.check_invariants() {
            panic!("{e}");
        }
    }
});
