//! `Debug` for secrets: the keys are shown, the values never.

use std::collections::HashMap;

/// Wraps a secrets map so that printing it shows only its keys.
pub struct Redacted<'a>(pub &'a HashMap<String, String>);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<&String> = self.0.keys().collect();
        keys.sort();
        f.debug_map()
            .entries(keys.into_iter().map(|k| (k, "<redacted>")))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::csi;

    #[test]
    fn debug_never_prints_secret_values() {
        let req = csi::NodeStageVolumeRequest {
            volume_id: "vol-1".into(),
            secrets: [("password".to_string(), "hunter2".to_string())].into(),
            ..Default::default()
        };
        let printed = format!("{req:?}");
        assert!(printed.contains("vol-1"), "{printed}");
        assert!(printed.contains("password"), "{printed}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }
}
