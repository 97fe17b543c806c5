//! Field-by-field validation of CSI wire messages, with the size limits and
//! codes the specification names. Every failure is INVALID_ARGUMENT with a
//! message naming the field and what was wrong with it.

use std::collections::HashMap;

use volplane_core::driver::{
    AccessMode, AccessType, Attributes, Capability, CapacityRange, ContentSource, Secrets,
    Topology, TopologyRequirement,
};
use volplane_core::{Status, path};

use crate::csi;

/// CSI's general limit for strings.
pub const MAX_STRING: usize = 128;
/// CSI's limit for node ids.
pub const MAX_NODE_ID: usize = 256;
/// CSI's limit for maps (keys and values together).
pub const MAX_MAP: usize = 4096;

fn invalid(field: &str, what: impl std::fmt::Display) -> Status {
    Status::invalid(format!("{field}: {what}"))
}

/// The control characters CSI bans from names (everything below U+0020
/// except tab, newline and carriage return, and U+007F–U+009F).
fn banned(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

fn bounded(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.len() > max {
        return Err(invalid(
            field,
            format!("{} bytes long; the limit is {max}", value.len()),
        ));
    }
    if let Some(c) = value.chars().find(|c| banned(*c)) {
        return Err(invalid(
            field,
            format!("contains the control character U+{:04X}", c as u32),
        ));
    }
    Ok(())
}

/// A required free-form name (CreateVolume.name).
pub fn name(field: &str, value: String) -> Result<String, Status> {
    if value.is_empty() {
        return Err(invalid(field, "is required"));
    }
    bounded(field, &value, MAX_STRING)?;
    Ok(value)
}

/// An optional string compared with what the driver holds (a filter):
/// empty means none, and only its length is bounded.
pub fn optional_bounded(field: &str, value: String) -> Result<String, Status> {
    bounded(field, &value, MAX_STRING)?;
    Ok(value)
}

/// A required identifier (volume id, snapshot id). Ids are opaque to the CO
/// but drivers use them to name storage, so path traversal is refused.
pub fn id(field: &str, value: String) -> Result<String, Status> {
    id_bounded(field, value, MAX_STRING)
}

fn id_bounded(field: &str, value: String, max: usize) -> Result<String, Status> {
    if value.is_empty() {
        return Err(invalid(field, "is required"));
    }
    bounded(field, &value, max)?;
    if value.contains('\t') || value.contains('\n') || value.contains('\r') {
        return Err(invalid(
            field,
            format!("{value:?} contains whitespace control characters"),
        ));
    }
    if value.starts_with('/')
        || value
            .split('/')
            .any(|p| p == ".." || p == "." || p.is_empty())
    {
        return Err(invalid(
            field,
            format!("{value:?} is not a usable id (absolute, empty or \".\"/\"..\" components)"),
        ));
    }
    Ok(value)
}

/// A required node id (up to 256 bytes).
pub fn node_id(field: &str, value: String) -> Result<String, Status> {
    id_bounded(field, value, MAX_NODE_ID)
}

/// An opaque string map (parameters, contexts), at most 4 KiB in all.
pub fn attributes(field: &str, map: HashMap<String, String>) -> Result<Attributes, Status> {
    let size: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_MAP {
        return Err(invalid(
            field,
            format!("{size} bytes in all; the limit is {MAX_MAP}"),
        ));
    }
    for k in map.keys() {
        if k.is_empty() {
            return Err(invalid(field, "has an empty key"));
        }
        bounded(&format!("{field} key"), k, MAX_MAP)?;
    }
    Ok(map.into_iter().collect())
}

/// Secrets: keys alphanumeric or `-`, `_`, `.`; at most 4 KiB.
pub fn secrets(field: &str, map: HashMap<String, String>) -> Result<Secrets, Status> {
    let size: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_MAP {
        return Err(invalid(
            field,
            format!("{size} bytes in all; the limit is {MAX_MAP}"),
        ));
    }
    if let Some(k) = map.keys().find(|k| {
        k.is_empty()
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    }) {
        return Err(invalid(
            field,
            format!("key {k:?} must be alphanumeric, '-', '_' or '.'"),
        ));
    }
    Ok(Secrets(map.into_iter().collect()))
}

/// A required absolute path, normalised; `..` is refused.
pub fn path(field: &str, value: String) -> Result<String, Status> {
    path::absolute(field, &value)
}

/// A path the caller asks about (NodeGetVolumeStats, NodeExpandVolume):
/// required and bounded here; one the driver never recorded, relative ones
/// included, is the driver's NOT_FOUND, not a malformed request.
pub fn queried_path(field: &str, value: String) -> Result<String, Status> {
    if value.is_empty() {
        return Err(Status::invalid(format!("{field} is required")));
    }
    if value.len() > path::MAX_PATH {
        return Err(invalid(
            field,
            format!(
                "is {} bytes long; the limit is {}",
                value.len(),
                path::MAX_PATH
            ),
        ));
    }
    Ok(value)
}

/// An optional absolute path: empty stays empty.
pub fn optional_path(field: &str, value: String) -> Result<String, Status> {
    if value.is_empty() {
        Ok(value)
    } else {
        path::absolute(field, &value)
    }
}

fn bytes(field: &str, value: i64) -> Result<u64, Status> {
    u64::try_from(value).map_err(|_| invalid(field, format!("{value} is negative")))
}

/// An optional capacity range; when given, at least one bound must be set.
pub fn capacity(field: &str, range: Option<csi::CapacityRange>) -> Result<CapacityRange, Status> {
    let Some(r) = range else {
        return Ok(CapacityRange::default());
    };
    let out = CapacityRange {
        required_bytes: bytes(&format!("{field}.required_bytes"), r.required_bytes)?,
        limit_bytes: bytes(&format!("{field}.limit_bytes"), r.limit_bytes)?,
    };
    if out.limit_bytes != 0 && out.limit_bytes < out.required_bytes {
        return Err(invalid(
            field,
            format!(
                "limit_bytes {} is smaller than required_bytes {}",
                out.limit_bytes, out.required_bytes
            ),
        ));
    }
    Ok(out)
}

/// A CSI access mode, checked to be one this driver knows.
pub fn access_mode(field: &str, mode: i32) -> Result<AccessMode, Status> {
    use csi::volume_capability::access_mode::Mode;
    Ok(match Mode::try_from(mode) {
        Ok(Mode::SingleNodeWriter) => AccessMode::SingleNodeWriter,
        Ok(Mode::SingleNodeReaderOnly) => AccessMode::SingleNodeReaderOnly,
        Ok(Mode::MultiNodeReaderOnly) => AccessMode::MultiNodeReaderOnly,
        Ok(Mode::MultiNodeSingleWriter) => AccessMode::MultiNodeSingleWriter,
        Ok(Mode::MultiNodeMultiWriter) => AccessMode::MultiNodeMultiWriter,
        Ok(Mode::SingleNodeSingleWriter) => AccessMode::SingleNodeSingleWriter,
        Ok(Mode::SingleNodeMultiWriter) => AccessMode::SingleNodeMultiWriter,
        Ok(Mode::Unknown) => {
            return Err(invalid(
                field,
                "access mode is UNKNOWN; set one of the CSI modes",
            ));
        }
        Err(_) => {
            return Err(invalid(
                field,
                format!("access mode {mode} is not a CSI access mode"),
            ));
        }
    })
}

/// A required volume capability.
pub fn capability(field: &str, cap: Option<csi::VolumeCapability>) -> Result<Capability, Status> {
    use csi::volume_capability::AccessType as Wire;
    let cap = cap.ok_or_else(|| invalid(field, "is required"))?;
    let mode = cap
        .access_mode
        .ok_or_else(|| invalid(&format!("{field}.access_mode"), "is required"))?;
    let access_mode = access_mode(&format!("{field}.access_mode"), mode.mode)?;
    let access_type = match cap.access_type {
        Some(Wire::Block(_)) => AccessType::Block,
        Some(Wire::Mount(m)) => {
            bounded(&format!("{field}.mount.fs_type"), &m.fs_type, MAX_STRING)?;
            if !m
                .fs_type
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
            {
                return Err(invalid(
                    &format!("{field}.mount.fs_type"),
                    format!("{:?} is not a filesystem type", m.fs_type),
                ));
            }
            let flags: usize = m.mount_flags.iter().map(String::len).sum();
            if flags > MAX_MAP {
                return Err(invalid(
                    &format!("{field}.mount.mount_flags"),
                    format!("{flags} bytes in all; the limit is {MAX_MAP}"),
                ));
            }
            if let Some(f) = m
                .mount_flags
                .iter()
                .find(|f| f.is_empty() || f.contains('\0'))
            {
                return Err(invalid(
                    &format!("{field}.mount.mount_flags"),
                    format!("{f:?} is not a mount flag"),
                ));
            }
            bounded(
                &format!("{field}.mount.volume_mount_group"),
                &m.volume_mount_group,
                MAX_STRING,
            )?;
            AccessType::Mount {
                fs_type: m.fs_type,
                mount_flags: m.mount_flags,
                volume_mount_group: m.volume_mount_group,
            }
        }
        None => {
            return Err(invalid(
                field,
                "access_type is required: set block or mount",
            ));
        }
    };
    Ok(Capability {
        access_type,
        access_mode,
    })
}

/// An optional capability: `None` when absent.
pub fn optional_capability(
    field: &str,
    cap: Option<csi::VolumeCapability>,
) -> Result<Option<Capability>, Status> {
    cap.map(|c| capability(field, Some(c))).transpose()
}

/// A required, non-empty list of capabilities.
pub fn capabilities(
    field: &str,
    caps: Vec<csi::VolumeCapability>,
) -> Result<Vec<Capability>, Status> {
    if caps.is_empty() {
        return Err(invalid(
            field,
            "is required: give at least one volume capability",
        ));
    }
    caps.into_iter()
        .enumerate()
        .map(|(i, c)| capability(&format!("{field}[{i}]"), Some(c)))
        .collect()
}

/// A topology segment (its map, bounded like any attributes).
pub fn topology(field: &str, t: csi::Topology) -> Result<Topology, Status> {
    attributes(field, t.segments)
}

/// A topology requirement: requisite and preferred segments, each checked.
pub fn topology_requirement(
    field: &str,
    t: Option<csi::TopologyRequirement>,
) -> Result<Option<TopologyRequirement>, Status> {
    let Some(t) = t else { return Ok(None) };
    if t.requisite.is_empty() && t.preferred.is_empty() {
        return Err(invalid(
            field,
            "set requisite or preferred topologies, or leave the field out",
        ));
    }
    let list = |name: &str, v: Vec<csi::Topology>| -> Result<Vec<Topology>, Status> {
        v.into_iter()
            .enumerate()
            .map(|(i, t)| topology(&format!("{field}.{name}[{i}]"), t))
            .collect()
    };
    Ok(Some(TopologyRequirement {
        requisite: list("requisite", t.requisite)?,
        preferred: list("preferred", t.preferred)?,
    }))
}

/// A volume content source: a snapshot or a volume, by a checked id.
pub fn content_source(
    field: &str,
    s: Option<csi::VolumeContentSource>,
) -> Result<Option<ContentSource>, Status> {
    use csi::volume_content_source::Type;
    let Some(s) = s else { return Ok(None) };
    match s.r#type {
        Some(Type::Snapshot(s)) => Ok(Some(ContentSource::Snapshot(id(
            &format!("{field}.snapshot.snapshot_id"),
            s.snapshot_id,
        )?))),
        Some(Type::Volume(v)) => Ok(Some(ContentSource::Volume(id(
            &format!("{field}.volume.volume_id"),
            v.volume_id,
        )?))),
        None => Err(invalid(field, "set snapshot or volume")),
    }
}
