//! The snapshot RPCs: requests validated on the way in, answers built on
//! the way out.

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
        f::secrets("secrets", self.secrets)?;
        Ok(Request::ListSnapshots(core::ListSnapshots {
            max_entries,
            starting_token: self.starting_token,
            source_volume_id: f::optional_bounded("source_volume_id", self.source_volume_id)?,
            snapshot_id: f::optional_bounded("snapshot_id", self.snapshot_id)?,
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

impl FromResponse for csi::CreateSnapshotResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::Snapshot(s) => Ok(Self {
                snapshot: Some(wire_snapshot(s)),
            }),
            other => Err(mismatch("CreateSnapshot", &other)),
        }
    }
}

impl FromResponse for csi::GetSnapshotResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::Snapshot(s) => Ok(Self {
                snapshot: Some(wire_snapshot(s)),
            }),
            other => Err(mismatch("GetSnapshot", &other)),
        }
    }
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
