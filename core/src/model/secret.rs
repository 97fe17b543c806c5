//! `Secret`: what a CSI call's credentials come from. The machines read a
//! Secret when a call needs it (upstream's sidecars `get` them, never list
//! or watch), hand its data to that call, and show it nowhere else: its
//! `Debug` names the keys' count only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ObjectMeta;

/// A Secret, as the API serves it: `data` values base64-encoded.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    /// `data`: key → base64 of the value.
    pub data: BTreeMap<String, String>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Secret {{ {}/{}, <{} key(s) redacted> }}",
            self.metadata.namespace,
            self.metadata.name,
            self.data.len()
        )
    }
}

impl Secret {
    /// A Secret `namespace`/`name` holding `data` (plain values).
    pub fn new(namespace: &str, name: &str, data: &[(&str, &str)]) -> Secret {
        use base64::Engine;
        Secret {
            metadata: ObjectMeta::namespaced(namespace, name),
            data: data
                .iter()
                .map(|(k, v)| {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(v);
                    (k.to_string(), encoded)
                })
                .collect(),
        }
    }

    /// The data as a CSI call takes it (key → value), or why it cannot be:
    /// a value that is not base64, or not UTF-8 (CSI's secrets are strings).
    pub fn credentials(&self) -> Result<BTreeMap<String, String>, String> {
        use base64::Engine;
        let whose = || format!("secret {}/{}", self.metadata.namespace, self.metadata.name);
        self.data
            .iter()
            .map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .map_err(|_| format!("{}: the value of {k:?} is not base64", whose()))?;
                let value = String::from_utf8(bytes).map_err(|_| {
                    format!(
                        "{}: the value of {k:?} is not UTF-8 text, which a CSI call cannot carry",
                        whose()
                    )
                })?;
                Ok((k.clone(), value))
            })
            .collect()
    }
}
