//! Snapshots in the control plane, as kubernetes-csi/external-snapshotter
//! divides them: the snapshot controller ([`controller`], one per cluster)
//! binds VolumeSnapshots to VolumeSnapshotContents, makes the content of a
//! dynamic snapshot, keeps their finalizers and copies the content's status
//! up; csi-snapshotter ([`sidecar`], beside each driver) cuts and deletes
//! the storage snapshots a content stands for.

pub mod controller;
pub mod sidecar;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use controller::SnapshotController;
pub use sidecar::Snapshotter;

const PREFIX: &str = "csi.storage.k8s.io/";

/// The `csi.storage.k8s.io/` parameters of a VolumeSnapshotClass that are
/// the sidecars' own (its secrets), not the driver's.
const KNOWN_PREFIXED: [&str; 4] = [
    "snapshotter-secret-name",
    "snapshotter-secret-namespace",
    "snapshotter-list-secret-name",
    "snapshotter-list-secret-namespace",
];

/// A class's parameters as the driver gets them: the known prefixed ones
/// dropped, an unknown prefixed one refused (upstream's
/// RemovePrefixedParameters).
pub fn csi_parameters(
    parameters: &BTreeMap<String, String>,
) -> Result<crate::driver::Attributes, String> {
    let mut out = crate::driver::Attributes::new();
    for (k, v) in parameters {
        match k.strip_prefix(PREFIX) {
            Some(short) if KNOWN_PREFIXED.contains(&short) => {}
            Some(_) => {
                return Err(format!(
                    "found unknown parameter key {k:?} with reserved namespace {PREFIX}"
                ));
            }
            None => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(out)
}
