//! `Secret`: what a CSI call's credentials come from. The machines read a
//! Secret when a call needs it (upstream's sidecars `get` them, never list
//! or watch), hand its data to that call, and show it nowhere else: its
//! `Debug` names the keys' count only.

use super::Labels;
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
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `data`: key → base64 of the value.
    pub data: Labels,
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
    pub fn credentials(&self) -> Result<BTreeMap<String, String>, CredentialsError> {
        use base64::Engine;
        let fault = |key: &str, not_utf8| CredentialsError {
            secret: format!("{}/{}", self.metadata.namespace, self.metadata.name),
            key: key.to_string(),
            not_utf8,
        };
        self.data
            .iter()
            .map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .map_err(|_| fault(k, false))?;
                let value = String::from_utf8(bytes).map_err(|_| fault(k, true))?;
                Ok((k.to_string(), value))
            })
            .collect()
    }
}

/// A Secret's value that a CSI call cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "secret {secret}: the value of {key:?} is not {}",
    if *not_utf8 { "UTF-8 text, which a CSI call cannot carry" } else { "base64" }
)]
pub struct CredentialsError {
    /// `namespace/name`.
    pub secret: String,
    /// The data key.
    pub key: String,
    /// It is base64, but not of UTF-8 text (else: not base64).
    pub not_utf8: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_decode_and_refuse_what_a_csi_call_cannot_carry() {
        let s = Secret::new("kube-system", "creds", &[("token", "t0k"), ("user", "ü")]);
        let plain = s.credentials().expect("plain UTF-8 values");
        assert_eq!(plain.get("token").map(String::as_str), Some("t0k"));
        assert_eq!(plain.get("user").map(String::as_str), Some("ü"));
        assert!(!format!("{s:?}").contains("dDBr"), "Debug shows no value");

        let mut bad = s.clone();
        bad.data.insert("key".into(), "not base64!".into());
        let e = bad.credentials().expect_err("not base64");
        assert!(!e.not_utf8);
        let e = e.to_string();
        assert!(
            e.contains("kube-system/creds") && e.contains("\"key\"") && e.contains("base64"),
            "{e}"
        );

        let mut binary = s;
        binary.data.insert("cert".into(), "/w==".into()); // 0xff
        let e = binary.credentials().expect_err("not UTF-8");
        assert!(e.not_utf8 && e.key == "cert");
        let e = e.to_string();
        assert!(e.contains("\"cert\"") && e.contains("UTF-8"), "{e}");
    }
}
