//! Plugin registration (SEMANTICS.md E.5): node-driver-registrar
//! ([`registrar::Registrar`]) and the kubelet's plugin watcher with its CSI
//! handler ([`watcher::PluginWatcher`]), as sans-IO machines.
//!
//! Both follow the crate's contract (`handle`, `poll`, `poll_timeout`,
//! `handle_timeout`); their inputs and effects are sockets and the
//! registration RPCs rather than only API objects, so they have their own
//! input and effect types.

pub mod registrar;
pub mod watcher;

use serde::{Deserialize, Serialize};

/// `pluginregistration.PluginInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct PluginInfo {
    /// "CSIPlugin", "DevicePlugin" or "DRAPlugin".
    pub type_: String,
    /// The driver's name.
    pub name: String,
    /// The plugin's CSI socket, as the kubelet must dial it.
    pub endpoint: String,
    /// The CSI versions it supports.
    pub supported_versions: Vec<String>,
}

/// The plugin type CSI drivers register with.
pub const CSI_PLUGIN: &str = "CSIPlugin";

/// The registration socket's file name in the registry directory.
pub fn registration_socket(driver: &str) -> String {
    debug_assert!(check_driver_name(driver).is_ok());
    format!("{driver}-reg.sock")
}

/// E5.5: the highest supported 1.x version in `versions`, if any (≥2.x is
/// ignored, 0.x unsupported).
pub fn highest_v1(versions: &[String]) -> Option<(u64, u64, u64)> {
    versions
        .iter()
        .filter_map(|v| {
            let mut parts = v
                .trim_start_matches('v')
                .split('.')
                .map(|p| p.parse::<u64>().ok());
            let major = parts.next()??;
            let minor = parts.next().flatten().unwrap_or(0);
            let patch = parts.next().flatten().unwrap_or(0);
            (major == 1).then_some((major, minor, patch))
        })
        .max()
}

/// A name a driver answered GetPluginInfo with that is not a CSI driver
/// name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the driver answered GetPluginInfo with name {0:?}, which is not a CSI driver name \
     (at most 63 characters, alphanumerics, '-' and '.', starting and ending with an \
     alphanumeric); fix the driver's name: no registration socket was created"
)]
pub struct BadDriverName(pub String);

/// A CSI driver name as the spec requires it: at most 63 characters,
/// alphanumerics, `-` and `.`, beginning and ending with an alphanumeric.
/// Anything else (a `/`, `..`, an empty name) is refused before it can name
/// a file.
pub fn check_driver_name(name: &str) -> Result<(), BadDriverName> {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let ok = name.len() <= 63
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(BadDriverName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e5_5_versions_need_a_1_x() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(highest_v1(&v(&["1.0.0"])), Some((1, 0, 0)));
        assert_eq!(
            highest_v1(&v(&["0.3.0", "1.2.0", "2.0.0"])),
            Some((1, 2, 0))
        );
        assert_eq!(highest_v1(&v(&["0.3.0"])), None);
        assert_eq!(highest_v1(&v(&[])), None);
        assert_eq!(highest_v1(&v(&["garbage"])), None);
    }
}
