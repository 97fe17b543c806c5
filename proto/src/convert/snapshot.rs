//! The snapshot and group snapshot RPCs: requests validated on the way in,
//! answers built on the way out.

use volplane_core::driver::{self as core, Request, Response};
use volplane_core::{Code, Status};

use super::fields as f;
use super::{FromResponse, IntoRequest, mismatch, wire_i64};
use crate::csi;

impl IntoRequest for csi::CreateSnapshotRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::CreateSnapshot(core::CreateSnapshot {
            source_volume_id: f::id("source_volume_id", self.source_volume_id)?,
            name: f::name("name", self.name)?,
            parameters: f::attributes("parameters", self.parameters)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::DeleteSnapshotRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::DeleteSnapshot(core::DeleteSnapshot {
            snapshot_id: f::id("snapshot_id", self.snapshot_id)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::ListSnapshotsRequest {
    fn into_request(self) -> Result<Request, Status> {
        let max_entries = u32::try_from(self.max_entries).map_err(|_| {
            Status::invalid(format!("max_entries: {} is negative", self.max_entries))
        })?;
        if self.starting_token.len() > f::MAX_STRING {
            return Err(Status::new(
                Code::Aborted,
                "starting_token is longer than any token this driver hands out; list again from the start",
            ));
        }
        // The filters are only compared with what the driver holds: an id
        // that names nothing simply matches nothing.
        Ok(Request::ListSnapshots(core::ListSnapshots {
            max_entries,
            starting_token: self.starting_token,
            source_volume_id: f::optional_bounded("source_volume_id", self.source_volume_id)?,
            snapshot_id: f::optional_bounded("snapshot_id", self.snapshot_id)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::GetSnapshotRequest {
    fn into_request(self) -> Result<Request, Status> {
        f::secrets("secrets", self.secrets)?;
        Ok(Request::GetSnapshot {
            snapshot_id: f::id("snapshot_id", self.snapshot_id)?,
        })
    }
}

/// A snapshot as CSI sends it.
pub fn wire_snapshot(s: core::Snapshot) -> csi::Snapshot {
    csi::Snapshot {
        size_bytes: wire_i64(s.size_bytes),
        snapshot_id: s.snapshot_id,
        source_volume_id: s.source_volume_id,
        creation_time: Some(prost_types::Timestamp {
            seconds: s.creation_time.seconds,
            nanos: s.creation_time.nanos,
        }),
        ready_to_use: s.ready_to_use,
        group_snapshot_id: s.group_snapshot_id,
    }
}

/// Answers that carry one snapshot (or one group snapshot).
macro_rules! one_answer {
    ($($t:ty: $variant:ident => $field:ident via $wire:ident, $method:literal;)*) => {$(
        impl FromResponse for $t {
            fn from_response(r: Response) -> Result<Self, Status> {
                match r {
                    Response::$variant(x) => Ok(Self {
                        $field: Some($wire(x)),
                    }),
                    other => Err(mismatch($method, &other)),
                }
            }
        }
    )*};
}

one_answer! {
    csi::CreateSnapshotResponse: Snapshot => snapshot via wire_snapshot, "CreateSnapshot";
    csi::GetSnapshotResponse: Snapshot => snapshot via wire_snapshot, "GetSnapshot";
    csi::CreateVolumeGroupSnapshotResponse: GroupSnapshot => group_snapshot via wire_group, "CreateVolumeGroupSnapshot";
    csi::GetVolumeGroupSnapshotResponse: GroupSnapshot => group_snapshot via wire_group, "GetVolumeGroupSnapshot";
}

impl FromResponse for csi::ListSnapshotsResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::list_snapshots_response::Entry;
        match r {
            Response::Snapshots {
                entries,
                next_token,
            } => Ok(Self {
                entries: entries
                    .into_iter()
                    .map(|s| Entry {
                        snapshot: Some(wire_snapshot(s)),
                    })
                    .collect(),
                next_token,
            }),
            other => Err(mismatch("ListSnapshots", &other)),
        }
    }
}

impl IntoRequest for csi::GroupControllerGetCapabilitiesRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::GroupControllerGetCapabilities)
    }
}

/// Member snapshot ids a CO names: each a valid id.
fn member_ids(field: &str, ids: Vec<String>) -> Result<Vec<String>, Status> {
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| f::id(&format!("{field}[{i}]"), id))
        .collect()
}

impl IntoRequest for csi::CreateVolumeGroupSnapshotRequest {
    fn into_request(self) -> Result<Request, Status> {
        let name = f::name("name", self.name)?;
        if self.source_volume_ids.is_empty() {
            return Err(Status::invalid(
                "source_volume_ids: is required: name the volumes to snapshot together",
            ));
        }
        Ok(Request::CreateGroupSnapshot(core::CreateGroupSnapshot {
            name,
            source_volume_ids: member_ids("source_volume_ids", self.source_volume_ids)?,
            parameters: f::attributes("parameters", self.parameters)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::DeleteVolumeGroupSnapshotRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::DeleteGroupSnapshot(core::DeleteGroupSnapshot {
            group_snapshot_id: f::id("group_snapshot_id", self.group_snapshot_id)?,
            snapshot_ids: member_ids("snapshot_ids", self.snapshot_ids)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::GetVolumeGroupSnapshotRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::GetGroupSnapshot {
            group_snapshot_id: f::id("group_snapshot_id", self.group_snapshot_id)?,
            snapshot_ids: member_ids("snapshot_ids", self.snapshot_ids)?,
            secrets: f::secrets("secrets", self.secrets)?,
        })
    }
}

fn wire_group(g: core::GroupSnapshot) -> csi::VolumeGroupSnapshot {
    csi::VolumeGroupSnapshot {
        group_snapshot_id: g.group_snapshot_id,
        snapshots: g.snapshots.into_iter().map(wire_snapshot).collect(),
        creation_time: Some(prost_types::Timestamp {
            seconds: g.creation_time.seconds,
            nanos: g.creation_time.nanos,
        }),
        ready_to_use: g.ready_to_use,
    }
}

impl FromResponse for csi::GroupControllerGetCapabilitiesResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::group_controller_service_capability::{Rpc, Type, rpc::Type as T};
        let Response::GroupCapabilities(caps) = r else {
            return Err(mismatch("GroupControllerGetCapabilities", &r));
        };
        let capabilities = caps
            .into_iter()
            .map(|c| {
                let t = match c {
                    core::GroupCapability::CreateDeleteGetVolumeGroupSnapshot => {
                        T::CreateDeleteGetVolumeGroupSnapshot
                    }
                };
                csi::GroupControllerServiceCapability {
                    r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
                }
            })
            .collect();
        Ok(Self { capabilities })
    }
}

// The client's direction (the snapshotter calling a driver).

use super::outgoing::{IntoResponse, ToWire, bytes, map};

impl ToWire for core::CreateSnapshot {
    type Wire = csi::CreateSnapshotRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::CreateSnapshotRequest {
            source_volume_id: self.source_volume_id.clone(),
            name: self.name.clone(),
            secrets: map(&self.secrets.0),
            parameters: map(&self.parameters),
        }
    }
}

impl ToWire for core::DeleteSnapshot {
    type Wire = csi::DeleteSnapshotRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::DeleteSnapshotRequest {
            snapshot_id: self.snapshot_id.clone(),
            secrets: map(&self.secrets.0),
        }
    }
}

impl ToWire for core::ListSnapshots {
    type Wire = csi::ListSnapshotsRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ListSnapshotsRequest {
            max_entries: i32::try_from(self.max_entries).unwrap_or(i32::MAX),
            starting_token: self.starting_token.clone(),
            source_volume_id: self.source_volume_id.clone(),
            snapshot_id: self.snapshot_id.clone(),
            secrets: map(&self.secrets.0),
        }
    }
}

impl ToWire for core::CreateGroupSnapshot {
    type Wire = csi::CreateVolumeGroupSnapshotRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::CreateVolumeGroupSnapshotRequest {
            name: self.name.clone(),
            source_volume_ids: self.source_volume_ids.clone(),
            secrets: map(&self.secrets.0),
            parameters: map(&self.parameters),
        }
    }
}

impl ToWire for core::DeleteGroupSnapshot {
    type Wire = csi::DeleteVolumeGroupSnapshotRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::DeleteVolumeGroupSnapshotRequest {
            group_snapshot_id: self.group_snapshot_id.clone(),
            snapshot_ids: self.snapshot_ids.clone(),
            secrets: map(&self.secrets.0),
        }
    }
}

/// GetVolumeGroupSnapshot's wire message (its core request is a variant,
/// not a struct of its own).
pub fn get_group_wire(
    group_snapshot_id: &str,
    snapshot_ids: &[String],
    secrets: &core::Secrets,
) -> csi::GetVolumeGroupSnapshotRequest {
    csi::GetVolumeGroupSnapshotRequest {
        group_snapshot_id: group_snapshot_id.to_string(),
        snapshot_ids: snapshot_ids.to_vec(),
        secrets: map(&secrets.0),
    }
}

/// A wire group snapshot as the machines read it.
fn core_group(g: Option<csi::VolumeGroupSnapshot>, method: &str) -> Result<Response, Status> {
    let g =
        g.ok_or_else(|| Status::internal(format!("{method} answered without a group snapshot")))?;
    if g.group_snapshot_id.is_empty() {
        return Err(Status::internal(format!(
            "{method} answered a group snapshot without an id"
        )));
    }
    let t = g.creation_time.unwrap_or_default();
    Ok(Response::GroupSnapshot(core::GroupSnapshot {
        group_snapshot_id: g.group_snapshot_id,
        snapshots: g.snapshots.into_iter().map(core_snapshot).collect(),
        creation_time: core::Timestamp {
            seconds: t.seconds,
            nanos: t.nanos,
        },
        ready_to_use: g.ready_to_use,
    }))
}

impl IntoResponse for csi::CreateVolumeGroupSnapshotResponse {
    fn into_response(self) -> Result<Response, Status> {
        core_group(self.group_snapshot, "CreateVolumeGroupSnapshot")
    }
}

impl IntoResponse for csi::GetVolumeGroupSnapshotResponse {
    fn into_response(self) -> Result<Response, Status> {
        core_group(self.group_snapshot, "GetVolumeGroupSnapshot")
    }
}

impl IntoResponse for csi::DeleteVolumeGroupSnapshotResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::Empty)
    }
}

/// A wire snapshot as the machines read it.
fn core_snapshot(s: csi::Snapshot) -> core::Snapshot {
    let t = s.creation_time.unwrap_or_default();
    core::Snapshot {
        snapshot_id: s.snapshot_id,
        source_volume_id: s.source_volume_id,
        size_bytes: bytes(s.size_bytes),
        creation_time: core::Timestamp {
            seconds: t.seconds,
            nanos: t.nanos,
        },
        ready_to_use: s.ready_to_use,
        group_snapshot_id: s.group_snapshot_id,
    }
}

impl IntoResponse for csi::CreateSnapshotResponse {
    fn into_response(self) -> Result<Response, Status> {
        let s = self
            .snapshot
            .ok_or_else(|| Status::internal("CreateSnapshot answered without a snapshot"))?;
        if s.snapshot_id.is_empty() {
            return Err(Status::internal(
                "CreateSnapshot answered a snapshot without an id",
            ));
        }
        Ok(Response::Snapshot(core_snapshot(s)))
    }
}

impl IntoResponse for csi::DeleteSnapshotResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::Empty)
    }
}

impl IntoResponse for csi::ListSnapshotsResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::Snapshots {
            entries: self
                .entries
                .into_iter()
                .filter_map(|e| e.snapshot)
                .map(core_snapshot)
                .collect(),
            next_token: self.next_token,
        })
    }
}
