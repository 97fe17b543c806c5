//! The public CSI conformance suite, csi-sanity (kubernetes-csi/csi-test),
//! against `volplane serve` on each runtime: every spec runs and passes,
//! and none is skipped for a feature the reference driver lacks.
//!
//! Runs when VOLPLANE_TEST_CSI_SANITY names a csi-sanity binary; skipped,
//! saying so, otherwise. It is in no registry reachable here: build it from
//! its public source outside this repository
//! (`go build -o /somewhere/csi-sanity ./cmd/csi-sanity` in csi-test).

mod common;

use std::path::Path;
use std::process::Command;

use common::{Driver, Runtime};

/// The mutable parameter the driver accepts and the suite modifies.
const MUTABLE: &str = "iops";

fn strip_colours(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

async fn sanity(runtime: Runtime) {
    let Some(binary) = std::env::var_os("VOLPLANE_TEST_CSI_SANITY") else {
        eprintln!(
            "skipping csi-sanity: set VOLPLANE_TEST_CSI_SANITY to a csi-sanity binary (build it from kubernetes-csi/csi-test outside this repository)"
        );
        return;
    };
    require_root!();
    let d = Driver::start_with(
        runtime,
        &[
            "--mutable-parameter",
            MUTABLE,
            "--max-volumes-per-node",
            "3",
        ],
    );
    let mutable = d.root().join("mutable.yaml");
    std::fs::write(&mutable, format!("{MUTABLE}: \"3000\"\n")).unwrap();
    let pods = d.kubelet().join("pods/sanity");
    let plugins = d.kubelet().join("plugins");
    std::fs::create_dir_all(&pods).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    let socket = d.endpoint.trim_start_matches("unix://").to_string();
    let out = Command::new(Path::new(&binary))
        .arg(format!("--csi.endpoint={socket}"))
        .arg(format!("--csi.mountdir={}", pods.join("mount").display()))
        .arg(format!(
            "--csi.stagingdir={}",
            plugins.join("stage").display()
        ))
        .arg(format!(
            "--csi.testvolumemutableparameters={}",
            mutable.display()
        ))
        .arg("--csi.testnodevolumeattachlimit")
        .arg("--ginkgo.v")
        .output()
        .expect("csi-sanity runs");
    let text = strip_colours(&String::from_utf8_lossy(&out.stdout));
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("Passed") && l.contains("Failed"))
        .unwrap_or("no summary line")
        .to_string();
    eprintln!("csi-sanity on {}: {summary}", runtime.flag());
    assert!(out.status.success(), "csi-sanity failed:\n{text}");
    let missing: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("[SKIPPED]") && !l.starts_with("[SKIPPED] in ["))
        .collect();
    assert!(
        missing.is_empty(),
        "csi-sanity skipped specs for features the driver lacks:\n{}",
        missing.join("\n")
    );
}

both_runtimes!(csi_sanity, sanity);
