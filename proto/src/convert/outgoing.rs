//! The client's direction: a driver [`Request`](volplane_core::driver::Request) becomes its wire message
//! ([`ToWire`]), and the wire answer becomes the [`Response`] the machines
//! read ([`IntoResponse`]). The server's direction is in the parent module.

use std::collections::HashMap;

use volplane_core::driver::{self as core, Response};
use volplane_core::registration::PluginInfo;
use volplane_core::{Code, Status};

use super::{wire_capability, wire_content_source, wire_i64, wire_topology};
use crate::{csi, registration as reg};

/// A driver request as its wire message.
pub trait ToWire {
    /// The wire message.
    type Wire;
    /// Builds the wire message.
    fn to_wire(&self) -> Self::Wire;
}

/// A wire answer as the machines read it.
pub trait IntoResponse {
    /// The core answer; a malformed one is an error.
    fn into_response(self) -> Result<Response, Status>;
}

/// A string map on the wire (attributes, secrets).
pub(super) fn map<K: AsRef<str>, V: AsRef<str>>(
    m: impl IntoIterator<Item = (K, V)>,
) -> HashMap<String, String> {
    m.into_iter()
        .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
        .collect()
}

fn range(r: &core::CapacityRange) -> Option<csi::CapacityRange> {
    Some(csi::CapacityRange {
        required_bytes: wire_i64(r.required_bytes),
        limit_bytes: wire_i64(r.limit_bytes),
    })
}

pub(super) fn bytes(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl ToWire for core::CreateVolume {
    type Wire = csi::CreateVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::CreateVolumeRequest {
            name: self.name.clone(),
            capacity_range: range(&self.capacity),
            volume_capabilities: self.capabilities.iter().map(wire_capability).collect(),
            parameters: map(&self.parameters),
            mutable_parameters: map(&self.mutable_parameters),
            secrets: map(&self.secrets.0),
            volume_content_source: self.content_source.clone().map(wire_content_source),
            accessibility_requirements: self.accessibility.as_ref().map(|a| {
                csi::TopologyRequirement {
                    requisite: a.requisite.iter().map(wire_topology).collect(),
                    preferred: a.preferred.iter().map(wire_topology).collect(),
                }
            }),
        }
    }
}

impl ToWire for core::DeleteVolume {
    type Wire = csi::DeleteVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::DeleteVolumeRequest {
            volume_id: self.volume_id.clone(),
            secrets: map(&self.secrets.0),
        }
    }
}

impl ToWire for core::ControllerPublish {
    type Wire = csi::ControllerPublishVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ControllerPublishVolumeRequest {
            volume_id: self.volume_id.clone(),
            node_id: self.node_id.clone(),
            volume_capability: Some(wire_capability(&self.capability)),
            readonly: self.readonly,
            secrets: map(&self.secrets.0),
            volume_context: map(&self.volume_context),
        }
    }
}

impl ToWire for core::ControllerUnpublish {
    type Wire = csi::ControllerUnpublishVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ControllerUnpublishVolumeRequest {
            volume_id: self.volume_id.clone(),
            node_id: self.node_id.clone().unwrap_or_default(),
            secrets: map(&self.secrets.0),
        }
    }
}

impl ToWire for core::ControllerExpand {
    type Wire = csi::ControllerExpandVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ControllerExpandVolumeRequest {
            volume_id: self.volume_id.clone(),
            capacity_range: range(&self.capacity),
            secrets: map(&self.secrets.0),
            volume_capability: self.capability.as_ref().map(wire_capability),
        }
    }
}

impl ToWire for core::GetCapacity {
    type Wire = csi::GetCapacityRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::GetCapacityRequest {
            volume_capabilities: self.capabilities.iter().map(wire_capability).collect(),
            parameters: map(&self.parameters),
            accessible_topology: self.accessible_topology.as_ref().map(wire_topology),
        }
    }
}

impl IntoResponse for csi::GetCapacityResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::Capacity {
            available_bytes: bytes(self.available_capacity),
            maximum_volume_size: self.maximum_volume_size.map(bytes),
            minimum_volume_size: self.minimum_volume_size.map(bytes),
        })
    }
}

impl ToWire for core::ControllerModify {
    type Wire = csi::ControllerModifyVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::ControllerModifyVolumeRequest {
            volume_id: self.volume_id.clone(),
            secrets: map(&self.secrets.0),
            mutable_parameters: map(&self.mutable_parameters),
        }
    }
}

impl ToWire for core::NodeStage {
    type Wire = csi::NodeStageVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::NodeStageVolumeRequest {
            volume_id: self.volume_id.clone(),
            publish_context: map(&self.publish_context),
            staging_target_path: self.staging_target_path.clone(),
            volume_capability: Some(wire_capability(&self.capability)),
            secrets: map(&self.secrets.0),
            volume_context: map(&self.volume_context),
        }
    }
}

impl ToWire for core::NodeUnstage {
    type Wire = csi::NodeUnstageVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::NodeUnstageVolumeRequest {
            volume_id: self.volume_id.clone(),
            staging_target_path: self.staging_target_path.clone(),
        }
    }
}

impl ToWire for core::NodePublish {
    type Wire = csi::NodePublishVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::NodePublishVolumeRequest {
            volume_id: self.volume_id.clone(),
            publish_context: map(&self.publish_context),
            staging_target_path: self.staging_target_path.clone(),
            target_path: self.target_path.clone(),
            volume_capability: Some(wire_capability(&self.capability)),
            readonly: self.readonly,
            secrets: map(&self.secrets.0),
            volume_context: map(&self.volume_context),
        }
    }
}

impl ToWire for core::NodeUnpublish {
    type Wire = csi::NodeUnpublishVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::NodeUnpublishVolumeRequest {
            volume_id: self.volume_id.clone(),
            target_path: self.target_path.clone(),
        }
    }
}

impl ToWire for core::NodeExpand {
    type Wire = csi::NodeExpandVolumeRequest;
    fn to_wire(&self) -> Self::Wire {
        csi::NodeExpandVolumeRequest {
            volume_id: self.volume_id.clone(),
            volume_path: self.volume_path.clone(),
            capacity_range: range(&self.capacity),
            staging_target_path: self.staging_target_path.clone(),
            volume_capability: self.capability.as_ref().map(wire_capability),
            secrets: map(&self.secrets.0),
        }
    }
}

macro_rules! empty_answer {
    ($($t:ty),*) => {$(
        impl IntoResponse for $t {
            fn into_response(self) -> Result<Response, Status> {
                Ok(Response::Empty)
            }
        }
    )*};
}

empty_answer!(
    csi::DeleteVolumeResponse,
    csi::ControllerUnpublishVolumeResponse,
    csi::ControllerModifyVolumeResponse,
    csi::NodeStageVolumeResponse,
    csi::NodeUnstageVolumeResponse,
    csi::NodePublishVolumeResponse,
    csi::NodeUnpublishVolumeResponse
);

impl IntoResponse for csi::GetPluginInfoResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::PluginInfo {
            name: self.name,
            vendor_version: self.vendor_version,
            manifest: self.manifest.into_iter().collect(),
        })
    }
}

impl IntoResponse for csi::GetPluginCapabilitiesResponse {
    fn into_response(self) -> Result<Response, Status> {
        use csi::plugin_capability::{Type, service, volume_expansion};
        // Capabilities this side does not know are left out.
        let caps = self
            .capabilities
            .into_iter()
            .filter_map(|c| match c.r#type? {
                Type::Service(s) => match service::Type::try_from(s.r#type).ok()? {
                    service::Type::ControllerService => {
                        Some(core::PluginCapability::ControllerService)
                    }
                    service::Type::VolumeAccessibilityConstraints => {
                        Some(core::PluginCapability::VolumeAccessibilityConstraints)
                    }
                    service::Type::GroupControllerService => {
                        Some(core::PluginCapability::GroupControllerService)
                    }
                    _ => None,
                },
                Type::VolumeExpansion(e) => {
                    match volume_expansion::Type::try_from(e.r#type).ok()? {
                        volume_expansion::Type::Online => {
                            Some(core::PluginCapability::OnlineExpansion)
                        }
                        volume_expansion::Type::Offline => {
                            Some(core::PluginCapability::OfflineExpansion)
                        }
                        _ => None,
                    }
                }
            });
        Ok(Response::PluginCapabilities(caps.collect()))
    }
}

impl IntoResponse for csi::ProbeResponse {
    fn into_response(self) -> Result<Response, Status> {
        // An unset `ready` means ready (the spec).
        Ok(Response::Probe {
            ready: self.ready.unwrap_or(true),
        })
    }
}

impl IntoResponse for csi::CreateVolumeResponse {
    fn into_response(self) -> Result<Response, Status> {
        let v = self
            .volume
            .ok_or_else(|| Status::internal("CreateVolume answered without a volume"))?;
        if v.volume_id.is_empty() {
            return Err(Status::internal(
                "CreateVolume answered a volume without a volume_id (REQUIRED)",
            ));
        }
        Ok(Response::Volume(core::Volume {
            volume_id: v.volume_id,
            capacity_bytes: bytes(v.capacity_bytes),
            volume_context: v.volume_context.into_iter().collect(),
            accessible_topology: v
                .accessible_topology
                .into_iter()
                .map(|t| t.segments.into_iter().collect())
                .collect(),
            content_source: v.content_source.and_then(core_content_source),
        }))
    }
}

fn core_content_source(s: csi::VolumeContentSource) -> Option<core::ContentSource> {
    use csi::volume_content_source::Type;
    match s.r#type? {
        Type::Snapshot(s) => Some(core::ContentSource::Snapshot(s.snapshot_id)),
        Type::Volume(v) => Some(core::ContentSource::Volume(v.volume_id)),
    }
}

impl IntoResponse for csi::ControllerPublishVolumeResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::Published {
            publish_context: self.publish_context.into_iter().collect(),
        })
    }
}

impl IntoResponse for csi::ControllerExpandVolumeResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::ControllerExpanded {
            capacity_bytes: bytes(self.capacity_bytes),
            node_expansion_required: self.node_expansion_required,
        })
    }
}

impl IntoResponse for csi::NodeExpandVolumeResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::NodeExpanded {
            capacity_bytes: bytes(self.capacity_bytes),
        })
    }
}

impl IntoResponse for csi::NodeGetInfoResponse {
    fn into_response(self) -> Result<Response, Status> {
        Ok(Response::NodeInfo {
            node_id: self.node_id,
            max_volumes_per_node: bytes(self.max_volumes_per_node),
            accessible_topology: self
                .accessible_topology
                .map(|t| t.segments.into_iter().collect()),
        })
    }
}

impl IntoResponse for csi::ControllerGetCapabilitiesResponse {
    fn into_response(self) -> Result<Response, Status> {
        use core::ControllerCapability as C;
        use csi::controller_service_capability::{Type, rpc::Type as T};
        // Capabilities this side does not know are left out.
        let caps = self.capabilities.into_iter().filter_map(|c| {
            let Some(Type::Rpc(rpc)) = c.r#type else {
                return None;
            };
            Some(match T::try_from(rpc.r#type).ok()? {
                T::CreateDeleteVolume => C::CreateDeleteVolume,
                T::PublishUnpublishVolume => C::PublishUnpublishVolume,
                T::ListVolumes => C::ListVolumes,
                T::GetCapacity => C::GetCapacity,
                T::PublishReadonly => C::PublishReadonly,
                T::ExpandVolume => C::ExpandVolume,
                T::ListVolumesPublishedNodes => C::ListVolumesPublishedNodes,
                T::VolumeCondition => C::VolumeCondition,
                T::GetVolume => C::GetVolume,
                T::SingleNodeMultiWriter => C::SingleNodeMultiWriter,
                T::ModifyVolume => C::ModifyVolume,
                T::CreateDeleteSnapshot => C::CreateDeleteSnapshot,
                T::ListSnapshots => C::ListSnapshots,
                T::CloneVolume => C::CloneVolume,
                T::GetSnapshot => C::GetSnapshot,
                _ => return None,
            })
        });
        Ok(Response::ControllerCapabilities(caps.collect()))
    }
}

impl IntoResponse for csi::NodeGetCapabilitiesResponse {
    fn into_response(self) -> Result<Response, Status> {
        use core::NodeCapability as N;
        use csi::node_service_capability::{Type, rpc::Type as T};
        let caps = self.capabilities.into_iter().filter_map(|c| {
            let Some(Type::Rpc(rpc)) = c.r#type else {
                return None;
            };
            Some(match T::try_from(rpc.r#type).ok()? {
                T::StageUnstageVolume => N::StageUnstageVolume,
                T::GetVolumeStats => N::GetVolumeStats,
                T::ExpandVolume => N::ExpandVolume,
                T::VolumeCondition => N::VolumeCondition,
                T::SingleNodeMultiWriter => N::SingleNodeMultiWriter,
                _ => return None,
            })
        });
        Ok(Response::NodeCapabilities(caps.collect()))
    }
}

/// A request the machines' client does not send.
pub fn not_sent(method: &str) -> Status {
    Status::new(
        Code::Unimplemented,
        format!("the machines' client does not send {method}"),
    )
}

impl From<reg::PluginInfo> for PluginInfo {
    fn from(info: reg::PluginInfo) -> PluginInfo {
        PluginInfo {
            type_: info.r#type,
            name: info.name,
            endpoint: info.endpoint,
            supported_versions: info.supported_versions,
        }
    }
}

impl From<PluginInfo> for reg::PluginInfo {
    fn from(info: PluginInfo) -> reg::PluginInfo {
        reg::PluginInfo {
            r#type: info.type_,
            name: info.name,
            endpoint: info.endpoint,
            supported_versions: info.supported_versions,
        }
    }
}
