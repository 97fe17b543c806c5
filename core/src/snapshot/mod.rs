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

pub use controller::SnapshotController;
pub use sidecar::Snapshotter;

const PREFIX: &str = "csi.storage.k8s.io/";

/// The `csi.storage.k8s.io/` parameters of a VolumeSnapshotClass (or a
/// VolumeGroupSnapshotClass) that are the sidecars' own (its secrets), not
/// the driver's.
const KNOWN_PREFIXED: [&str; 8] = [
    "snapshotter-secret-name",
    "snapshotter-secret-namespace",
    "snapshotter-list-secret-name",
    "snapshotter-list-secret-namespace",
    "group-snapshotter-secret-name",
    "group-snapshotter-secret-namespace",
    "group-snapshotter-get-secret-name",
    "group-snapshotter-get-secret-namespace",
];

/// Names on a new content `meta`, as its deletion-secret annotations
/// `keys`, the Secret `params` resolve to under a class's `parameters`
/// (nothing when the class names none), so that the content's create and
/// delete need neither class nor snapshot to find it.
pub(crate) fn name_deletion_secret(
    meta: &mut crate::model::ObjectMeta,
    params: &crate::control::secrets::SecretParams,
    parameters: &crate::model::Labels,
    tokens: crate::control::secrets::SnapshotTokens<'_>,
    keys: (&str, &str),
) -> Result<(), String> {
    if let Some(secret) = crate::control::secrets::secret_ref(params, parameters, tokens)
        .map_err(|e| e.to_string())?
    {
        meta.annotations.insert(keys.0.into(), secret.name);
        meta.annotations.insert(keys.1.into(), secret.namespace);
    }
    Ok(())
}

/// A class parameter under `csi.storage.k8s.io/` that no sidecar knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("found unknown parameter key {0:?} with reserved namespace csi.storage.k8s.io/")]
pub struct ReservedParameter(pub String);

/// A class's parameters as the driver gets them: the known prefixed ones
/// dropped, an unknown prefixed one refused (upstream's
/// RemovePrefixedParameters).
pub fn csi_parameters(
    parameters: &crate::model::Labels,
) -> Result<crate::driver::Attributes, ReservedParameter> {
    let mut out = crate::driver::Attributes::new();
    for (k, v) in parameters {
        match k.strip_prefix(PREFIX) {
            Some(short) if KNOWN_PREFIXED.contains(&short) => {}
            Some(_) => return Err(ReservedParameter(k.to_owned())),
            None => {
                out.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    Ok(out)
}
