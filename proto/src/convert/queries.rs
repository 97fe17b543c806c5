//! The client's direction for the questions a CO asks (validate, list,
//! get, stats): requests to the wire, wire answers back, malformed ones
//! refused (a REQUIRED field missing).

use volplane_core::Status;
use volplane_core::driver::{self as core, ListedVolume, Response};

use super::outgoing::{IntoResponse, ToWire, bytes, map};
use super::wire_capability;
use crate::csi;

impl ToWire for core::ValidateCapabilities {
    type Wire = csi::ValidateVolumeCapabilitiesRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ValidateVolumeCapabilitiesRequest {
            volume_id: self.volume_id.clone(),
            volume_context: map(&self.volume_context),
            volume_capabilities: self.capabilities.iter().map(wire_capability).collect(),
            parameters: map(&self.parameters),
            mutable_parameters: map(&self.mutable_parameters),
            secrets: map(&self.secrets.0),
        }
    }
}

impl ToWire for core::ListVolumes {
    type Wire = csi::ListVolumesRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ListVolumesRequest {
            max_entries: i32::try_from(self.max_entries).unwrap_or(i32::MAX),
            starting_token: self.starting_token.clone(),
        }
    }
}

impl ToWire for core::NodeVolumeStats {
    type Wire = csi::NodeGetVolumeStatsRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::NodeGetVolumeStatsRequest {
            volume_id: self.volume_id.clone(),
            volume_path: self.volume_path.clone(),
            staging_target_path: self.staging_target_path.clone(),
        }
    }
}

impl IntoResponse for csi::ValidateVolumeCapabilitiesResponse {
    fn into_response(self) -> Result<Response, Status> {
        let (confirmed, volume_context, parameters, mutable_parameters) = match self.confirmed {
            None => (
                None,
                Default::default(),
                Default::default(),
                Default::default(),
            ),
            Some(c) => (
                Some(Vec::new()),
                c.volume_context.into_iter().collect(),
                c.parameters.into_iter().collect(),
                c.mutable_parameters.into_iter().collect(),
            ),
        };
        Ok(Response::Validated {
            confirmed,
            volume_context,
            parameters,
            mutable_parameters,
            message: self.message,
        })
    }
}

fn volume(v: Option<csi::Volume>, rpc: &str) -> Result<core::Volume, Status> {
    let v =
        v.ok_or_else(|| Status::internal(format!("{rpc} answered an entry without a volume")))?;
    if v.volume_id.is_empty() {
        return Err(Status::internal(format!(
            "{rpc} answered a volume without a volume_id"
        )));
    }
    Ok(core::Volume {
        volume_id: v.volume_id,
        capacity_bytes: bytes(v.capacity_bytes),
        volume_context: v.volume_context.into_iter().collect(),
        accessible_topology: v
            .accessible_topology
            .into_iter()
            .map(|t| t.segments.into_iter().collect())
            .collect(),
        content_source: None,
    })
}

fn condition(c: Option<csi::VolumeCondition>) -> Option<core::VolumeCondition> {
    c.map(|c| core::VolumeCondition {
        abnormal: c.abnormal,
        message: c.message,
    })
}

impl IntoResponse for csi::ListVolumesResponse {
    fn into_response(self) -> Result<Response, Status> {
        let entries = self
            .entries
            .into_iter()
            .map(|e| {
                let (nodes, cond) = e
                    .status
                    .map(|s| (s.published_node_ids, s.volume_condition))
                    .unwrap_or_default();
                Ok(ListedVolume {
                    volume: volume(e.volume, "ListVolumes")?,
                    published_node_ids: nodes,
                    condition: condition(cond),
                })
            })
            .collect::<Result<_, Status>>()?;
        Ok(Response::Volumes {
            entries,
            next_token: self.next_token,
        })
    }
}

impl IntoResponse for csi::ControllerGetVolumeResponse {
    fn into_response(self) -> Result<Response, Status> {
        let (nodes, cond) = self
            .status
            .map(|s| (s.published_node_ids, s.volume_condition))
            .unwrap_or_default();
        Ok(Response::ControllerVolume(ListedVolume {
            volume: volume(self.volume, "ControllerGetVolume")?,
            published_node_ids: nodes,
            condition: condition(cond),
        }))
    }
}

impl IntoResponse for csi::NodeGetVolumeStatsResponse {
    fn into_response(self) -> Result<Response, Status> {
        use csi::volume_usage::Unit;
        if self.usage.is_empty() {
            return Err(Status::internal(
                "NodeGetVolumeStats answered no usage (REQUIRED)",
            ));
        }
        let mut usage = core::VolumeUsage::default();
        for u in &self.usage {
            match Unit::try_from(u.unit) {
                Ok(Unit::Bytes) => {
                    usage.total_bytes = bytes(u.total);
                    usage.used_bytes = bytes(u.used);
                    usage.available_bytes = bytes(u.available);
                }
                Ok(Unit::Inodes) => {
                    usage.total_inodes = bytes(u.total);
                    usage.used_inodes = bytes(u.used);
                    usage.available_inodes = bytes(u.available);
                }
                _ => {
                    return Err(Status::internal(format!(
                        "NodeGetVolumeStats answered a usage of unit {} (BYTES or INODES is REQUIRED)",
                        u.unit
                    )));
                }
            }
        }
        Ok(Response::Stats {
            usage,
            condition: condition(self.volume_condition),
        })
    }
}

impl IntoResponse for csi::GroupControllerGetCapabilitiesResponse {
    fn into_response(self) -> Result<Response, Status> {
        use csi::group_controller_service_capability::{Type, rpc::Type as T};
        // Capabilities this side does not know are left out.
        let caps = self.capabilities.into_iter().filter_map(|c| {
            let Some(Type::Rpc(rpc)) = c.r#type else {
                return None;
            };
            match T::try_from(rpc.r#type).ok()? {
                T::CreateDeleteGetVolumeGroupSnapshot => {
                    Some(core::GroupCapability::CreateDeleteGetVolumeGroupSnapshot)
                }
                _ => None,
            }
        });
        Ok(Response::GroupCapabilities(caps.collect()))
    }
}
