//! `volplane check` as a fuzz target: a template for your driver.
//!
//! Copy this file into your driver's `fuzz/fuzz_targets/`, put your
//! [`Backend`] where `Dirs` is, add `volplane = { version = "…", features =
//! ["testing"] }` to the fuzz crate, and run `cargo +nightly fuzz run
//! check`. The fuzzer's bytes choose the calls — create, attach, stage,
//! publish and back, repeated as a CO retries, and the ones a driver must
//! refuse — through the same generator `volplane check` uses; the same
//! oracle of the CSI specification's rules judges every answer and what
//! the node's mounts show. A broken MUST-rule is a crash whose message is
//! the trace. The node side mounts: run it as root.
//!
//! Here the backend is a directory per volume (the `volplane` crate
//! documentation's example), and the driver runs in this process, its
//! state in memory.
#![no_main]
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use volplane::testing::check::InProcess;
use volplane::{Attributes, Backend, CreatePlan, Driver, NodeHost, NodeSource, Secrets, Status};
use volplane::{Volume, host_status};

/// Your storage goes here: this one makes a directory per volume.
struct Dirs(PathBuf);

impl Backend for Dirs {
    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        let id = volume_id(&plan.name);
        let path = self.0.join(&id);
        host.run(move |h| h.create_dir(&path).map(|_| ()))
            .await
            .map_err(|e| host_status(&format!("create volume {}", plan.name), e))?;
        Ok(Volume {
            volume_id: id,
            capacity_bytes: plan.suggested_bytes,
            volume_context: Attributes::new(),
            accessible_topology: vec![],
            content_source: None,
        })
    }

    async fn delete_volume(&self, host: &NodeHost, v: &Volume, _: &Secrets) -> Result<(), Status> {
        let path = self.0.join(&v.volume_id);
        host.run(move |h| h.remove_tree(&path))
            .await
            .map_err(|e| host_status(&format!("delete volume {}", v.volume_id), e))
    }

    async fn node_source(
        &self,
        _host: &NodeHost,
        volume_id: &str,
        _publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> Result<NodeSource, Status> {
        Ok(NodeSource::Directory(self.0.join(volume_id)))
    }
}

/// The same name, the same id (FNV-1a).
fn volume_id(name: &str) -> String {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("dir-{hash:016x}")
}

/// The driver, started once per fuzzing process, in a directory of its own.
fn driver() -> &'static InProcess {
    static DRIVER: OnceLock<InProcess> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("volplane-fuzz-check-{}", std::process::id()));
        let storage = root.join("volumes");
        std::fs::create_dir_all(&storage).expect("a storage directory");
        let driver = Driver::new("dirs.example.com", Dirs(storage.clone()))
            .node_id("fuzz-node")
            .kubelet_dir(root.join("kubelet"))
            .storage_dir(storage);
        InProcess::new(driver).expect("the driver starts")
    })
}

fuzz_target!(|data: &[u8]| driver().fuzz(data));
