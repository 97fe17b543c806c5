//! The secrets a check (or a kit lifecycle) sends with each call, keyed as
//! csi-sanity's secrets file keys them (`CreateVolumeSecret`,
//! `NodeStageVolumeSecret`…), so one file serves both tools.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::driver::{Request, Secrets};

/// The keys a secrets file may hold: csi-sanity's, and the calls it does
/// not send (node expansion, group snapshots) under the same pattern.
pub const KEYS: &[&str] = &[
    "CreateVolumeSecret",
    "DeleteVolumeSecret",
    "ControllerPublishVolumeSecret",
    "ControllerUnpublishVolumeSecret",
    "ControllerValidateVolumeCapabilitiesSecret",
    "ControllerExpandVolumeSecret",
    "ControllerModifyVolumeSecret",
    "NodeStageVolumeSecret",
    "NodePublishVolumeSecret",
    "NodeExpandVolumeSecret",
    "CreateSnapshotSecret",
    "DeleteSnapshotSecret",
    "ListSnapshotsSecret",
    "GetSnapshotSecret",
    "CreateVolumeGroupSnapshotSecret",
    "DeleteVolumeGroupSnapshotSecret",
    "GetVolumeGroupSnapshotSecret",
];

/// A secrets file's key that names no call (a misspelt one would send
/// that call without its secrets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secrets file: unknown key {0:?}; the keys are csi-sanity's: {keys}", keys = KEYS.join(", "))]
pub struct UnknownSecretsKey(pub String);

/// Secrets per call. Never persisted with a replay, never printed.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallSecrets(BTreeMap<String, BTreeMap<String, String>>);

impl std::fmt::Debug for CallSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<secrets for {:?} redacted>", self.0.keys())
    }
}

impl CallSecrets {
    /// From a secrets file's contents (already parsed): every key must be
    /// one of [`KEYS`], so a misspelt call is not silently sent without.
    pub fn new(
        by_call: BTreeMap<String, BTreeMap<String, String>>,
    ) -> Result<CallSecrets, UnknownSecretsKey> {
        if let Some(k) = by_call.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(UnknownSecretsKey(k.clone()));
        }
        Ok(CallSecrets(by_call))
    }

    /// The same secrets for every call that carries any.
    pub fn everywhere(secrets: &BTreeMap<String, String>) -> CallSecrets {
        CallSecrets(
            KEYS.iter()
                .map(|k| (k.to_string(), secrets.clone()))
                .collect(),
        )
    }

    /// True when no call carries any.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(BTreeMap::is_empty)
    }

    /// The secrets for the call `key` names (empty when none).
    pub fn get(&self, key: &str) -> Secrets {
        Secrets(self.0.get(key).cloned().unwrap_or_default())
    }

    /// Gives `request` its call's secrets.
    pub fn apply(&self, request: &mut Request) {
        if let Some((key, slot)) = request.secrets_mut() {
            *slot = self.get(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::request::DeleteVolume;

    #[test]
    fn each_call_gets_its_own_and_unknown_keys_are_refused() {
        let token = BTreeMap::from([("token".to_string(), "t1".to_string())]);
        let s =
            CallSecrets::new(BTreeMap::from([("DeleteVolumeSecret".to_string(), token)])).unwrap();
        let mut delete = Request::DeleteVolume(DeleteVolume {
            volume_id: "v".into(),
            secrets: Secrets::default(),
        });
        s.apply(&mut delete);
        assert_eq!(delete.secrets().unwrap().1.0.get("token").unwrap(), "t1");
        assert!(s.get("CreateVolumeSecret").0.is_empty());
        assert!(!format!("{s:?}").contains("t1"));
        let e = CallSecrets::new(BTreeMap::from([(
            "CreateVolumeSecrets".into(),
            BTreeMap::new(),
        )]))
        .unwrap_err();
        assert_eq!(e, UnknownSecretsKey("CreateVolumeSecrets".into()));
        assert!(
            e.to_string()
                .contains("unknown key \"CreateVolumeSecrets\""),
            "{e}"
        );
    }
}
