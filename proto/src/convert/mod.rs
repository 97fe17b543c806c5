//! Conversions between CSI wire messages and the driver machine's types.
//! Requests are validated on the way in ([`fields`]); answers are built on
//! the way out.

pub mod fields;
pub mod outgoing;
pub mod queries;
pub mod snapshot;

use volplane_core::driver::{self as core, Request, Response};
use volplane_core::{Code, Status};

use crate::csi;
use fields as f;

/// A wire request that becomes a driver [`Request`] once validated.
pub trait IntoRequest {
    /// The validated request; INVALID_ARGUMENT naming the field otherwise.
    fn into_request(self) -> Result<Request, Status>;
}

impl IntoRequest for csi::GetPluginInfoRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::GetPluginInfo)
    }
}

impl IntoRequest for csi::GetPluginCapabilitiesRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::GetPluginCapabilities)
    }
}

impl IntoRequest for csi::ProbeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::Probe)
    }
}

impl IntoRequest for csi::CreateVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::CreateVolume(core::CreateVolume {
            name: f::name("name", self.name)?,
            capacity: f::capacity("capacity_range", self.capacity_range)?,
            capabilities: f::capabilities("volume_capabilities", self.volume_capabilities)?,
            parameters: f::attributes("parameters", self.parameters)?,
            mutable_parameters: f::attributes("mutable_parameters", self.mutable_parameters)?,
            secrets: f::secrets("secrets", self.secrets)?,
            content_source: f::content_source("volume_content_source", self.volume_content_source)?,
            accessibility: f::topology_requirement(
                "accessibility_requirements",
                self.accessibility_requirements,
            )?,
        }))
    }
}

impl IntoRequest for csi::DeleteVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::DeleteVolume(core::DeleteVolume {
            volume_id: f::id("volume_id", self.volume_id)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::ControllerPublishVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::ControllerPublish(core::ControllerPublish {
            volume_id: f::id("volume_id", self.volume_id)?,
            node_id: f::node_id("node_id", self.node_id)?,
            capability: f::capability("volume_capability", self.volume_capability)?,
            readonly: self.readonly,
            volume_context: f::attributes("volume_context", self.volume_context)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::ControllerUnpublishVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::ControllerUnpublish(core::ControllerUnpublish {
            volume_id: f::id("volume_id", self.volume_id)?,
            node_id: if self.node_id.is_empty() {
                None
            } else {
                Some(f::node_id("node_id", self.node_id)?)
            },
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::ValidateVolumeCapabilitiesRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::ValidateCapabilities(core::ValidateCapabilities {
            secrets: f::secrets("secrets", self.secrets)?,
            volume_id: f::id("volume_id", self.volume_id)?,
            volume_context: f::attributes("volume_context", self.volume_context)?,
            capabilities: f::capabilities("volume_capabilities", self.volume_capabilities)?,
            parameters: f::attributes("parameters", self.parameters)?,
            mutable_parameters: f::attributes("mutable_parameters", self.mutable_parameters)?,
        }))
    }
}

impl IntoRequest for csi::ListVolumesRequest {
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
        Ok(Request::ListVolumes(core::ListVolumes {
            max_entries,
            starting_token: self.starting_token,
        }))
    }
}

impl IntoRequest for csi::GetCapacityRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::GetCapacity(core::GetCapacity {
            capabilities: self
                .volume_capabilities
                .into_iter()
                .enumerate()
                .map(|(i, c)| f::capability(&format!("volume_capabilities[{i}]"), Some(c)))
                .collect::<Result<_, _>>()?,
            parameters: f::attributes("parameters", self.parameters)?,
            accessible_topology: self
                .accessible_topology
                .map(|t| f::topology("accessible_topology", t))
                .transpose()?,
        }))
    }
}

impl IntoRequest for csi::ControllerGetCapabilitiesRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::ControllerGetCapabilities)
    }
}

impl IntoRequest for csi::ControllerExpandVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        if self.capacity_range.is_none() {
            return Err(Status::invalid("capacity_range: is required"));
        }
        Ok(Request::ControllerExpand(core::ControllerExpand {
            volume_id: f::id("volume_id", self.volume_id)?,
            capacity: f::capacity("capacity_range", self.capacity_range)?,
            capability: f::optional_capability("volume_capability", self.volume_capability)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::ControllerGetVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::ControllerGetVolume {
            volume_id: f::id("volume_id", self.volume_id)?,
        })
    }
}

impl IntoRequest for csi::ControllerModifyVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        if self.mutable_parameters.is_empty() {
            return Err(Status::invalid(
                "mutable_parameters: is required: give at least one parameter to change",
            ));
        }
        Ok(Request::ControllerModify(core::ControllerModify {
            volume_id: f::id("volume_id", self.volume_id)?,
            mutable_parameters: f::attributes("mutable_parameters", self.mutable_parameters)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::NodeStageVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeStage(core::NodeStage {
            volume_id: f::id("volume_id", self.volume_id)?,
            publish_context: f::attributes("publish_context", self.publish_context)?,
            staging_target_path: f::path("staging_target_path", self.staging_target_path)?,
            capability: f::capability("volume_capability", self.volume_capability)?,
            volume_context: f::attributes("volume_context", self.volume_context)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::NodeUnstageVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeUnstage(core::NodeUnstage {
            volume_id: f::id("volume_id", self.volume_id)?,
            staging_target_path: f::path("staging_target_path", self.staging_target_path)?,
        }))
    }
}

impl IntoRequest for csi::NodePublishVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodePublish(core::NodePublish {
            volume_id: f::id("volume_id", self.volume_id)?,
            publish_context: f::attributes("publish_context", self.publish_context)?,
            staging_target_path: f::optional_path("staging_target_path", self.staging_target_path)?,
            target_path: f::path("target_path", self.target_path)?,
            capability: f::capability("volume_capability", self.volume_capability)?,
            readonly: self.readonly,
            volume_context: f::attributes("volume_context", self.volume_context)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::NodeUnpublishVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeUnpublish(core::NodeUnpublish {
            volume_id: f::id("volume_id", self.volume_id)?,
            target_path: f::path("target_path", self.target_path)?,
        }))
    }
}

impl IntoRequest for csi::NodeGetVolumeStatsRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeVolumeStats(core::NodeVolumeStats {
            volume_id: f::id("volume_id", self.volume_id)?,
            volume_path: f::queried_path("volume_path", self.volume_path)?,
            staging_target_path: f::optional_path("staging_target_path", self.staging_target_path)?,
        }))
    }
}

impl IntoRequest for csi::NodeExpandVolumeRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeExpand(core::NodeExpand {
            volume_id: f::id("volume_id", self.volume_id)?,
            volume_path: f::queried_path("volume_path", self.volume_path)?,
            capacity: f::capacity("capacity_range", self.capacity_range)?,
            staging_target_path: f::optional_path("staging_target_path", self.staging_target_path)?,
            capability: f::optional_capability("volume_capability", self.volume_capability)?,
            secrets: f::secrets("secrets", self.secrets)?,
        }))
    }
}

impl IntoRequest for csi::NodeGetCapabilitiesRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeGetCapabilities)
    }
}

impl IntoRequest for csi::NodeGetInfoRequest {
    fn into_request(self) -> Result<Request, Status> {
        Ok(Request::NodeGetInfo)
    }
}

/// A wire response built from a driver [`Response`].
pub trait FromResponse: Sized {
    /// The wire answer for `response`; INTERNAL when it is not this call's.
    fn from_response(response: Response) -> Result<Self, Status>;
}

fn mismatch(what: &str, r: &Response) -> Status {
    Status::internal(format!("the driver answered {what} with {r:?}"))
}

fn wire_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A capability as CSI sends it.
pub fn wire_capability(c: &core::Capability) -> csi::VolumeCapability {
    use csi::volume_capability::{
        AccessMode, AccessType, BlockVolume, MountVolume, access_mode::Mode,
    };
    let mode = match c.access_mode {
        core::AccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
        core::AccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
        core::AccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
        core::AccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
        core::AccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
        core::AccessMode::SingleNodeSingleWriter => Mode::SingleNodeSingleWriter,
        core::AccessMode::SingleNodeMultiWriter => Mode::SingleNodeMultiWriter,
    };
    csi::VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(match &c.access_type {
            core::AccessType::Block => AccessType::Block(BlockVolume {}),
            core::AccessType::Mount {
                fs_type,
                mount_flags,
                volume_mount_group,
            } => AccessType::Mount(MountVolume {
                fs_type: fs_type.clone(),
                mount_flags: mount_flags.clone(),
                volume_mount_group: volume_mount_group.clone(),
            }),
        }),
    }
}

fn wire_topology(t: &core::Topology) -> csi::Topology {
    csi::Topology {
        segments: t.clone().into_iter().collect(),
    }
}

fn wire_content_source(s: core::ContentSource) -> csi::VolumeContentSource {
    use csi::volume_content_source::{SnapshotSource, Type, VolumeSource};
    csi::VolumeContentSource {
        r#type: Some(match s {
            core::ContentSource::Snapshot(snapshot_id) => {
                Type::Snapshot(SnapshotSource { snapshot_id })
            }
            core::ContentSource::Volume(volume_id) => Type::Volume(VolumeSource { volume_id }),
        }),
    }
}

/// A volume as CSI sends it.
pub fn wire_volume(v: core::Volume) -> csi::Volume {
    csi::Volume {
        capacity_bytes: wire_i64(v.capacity_bytes),
        volume_id: v.volume_id,
        volume_context: v.volume_context.into_iter().collect(),
        content_source: v.content_source.map(wire_content_source),
        accessible_topology: v.accessible_topology.iter().map(wire_topology).collect(),
    }
}

fn wire_condition(c: Option<core::VolumeCondition>) -> Option<csi::VolumeCondition> {
    c.map(|c| csi::VolumeCondition {
        abnormal: c.abnormal,
        message: c.message,
    })
}

macro_rules! empty_response {
    ($($t:ty),*) => {$(
        impl FromResponse for $t {
            fn from_response(r: Response) -> Result<Self, Status> {
                match r {
                    Response::Empty => Ok(Self::default()),
                    other => Err(mismatch(stringify!($t), &other)),
                }
            }
        }
    )*};
}

empty_response!(
    csi::DeleteVolumeResponse,
    csi::DeleteSnapshotResponse,
    csi::DeleteVolumeGroupSnapshotResponse,
    csi::ControllerUnpublishVolumeResponse,
    csi::ControllerModifyVolumeResponse,
    csi::NodeStageVolumeResponse,
    csi::NodeUnstageVolumeResponse,
    csi::NodePublishVolumeResponse,
    csi::NodeUnpublishVolumeResponse
);

impl FromResponse for csi::GetPluginInfoResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::PluginInfo {
                name,
                vendor_version,
                manifest,
            } => Ok(Self {
                name,
                vendor_version,
                manifest: manifest.into_iter().collect(),
            }),
            other => Err(mismatch("GetPluginInfo", &other)),
        }
    }
}

impl FromResponse for csi::GetPluginCapabilitiesResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::plugin_capability::{Service, Type, VolumeExpansion, service, volume_expansion};
        let Response::PluginCapabilities(caps) = r else {
            return Err(mismatch("GetPluginCapabilities", &r));
        };
        let capabilities = caps
            .into_iter()
            .map(|c| csi::PluginCapability {
                r#type: Some(match c {
                    core::PluginCapability::ControllerService => Type::Service(Service {
                        r#type: service::Type::ControllerService as i32,
                    }),
                    core::PluginCapability::VolumeAccessibilityConstraints => {
                        Type::Service(Service {
                            r#type: service::Type::VolumeAccessibilityConstraints as i32,
                        })
                    }
                    core::PluginCapability::GroupControllerService => Type::Service(Service {
                        r#type: service::Type::GroupControllerService as i32,
                    }),
                    core::PluginCapability::OnlineExpansion => {
                        Type::VolumeExpansion(VolumeExpansion {
                            r#type: volume_expansion::Type::Online as i32,
                        })
                    }
                    core::PluginCapability::OfflineExpansion => {
                        Type::VolumeExpansion(VolumeExpansion {
                            r#type: volume_expansion::Type::Offline as i32,
                        })
                    }
                }),
            })
            .collect();
        Ok(Self { capabilities })
    }
}

impl FromResponse for csi::ProbeResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::Probe { ready } => Ok(Self { ready: Some(ready) }),
            other => Err(mismatch("Probe", &other)),
        }
    }
}

impl FromResponse for csi::CreateVolumeResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::Volume(v) => Ok(Self {
                volume: Some(wire_volume(v)),
            }),
            other => Err(mismatch("CreateVolume", &other)),
        }
    }
}

impl FromResponse for csi::ControllerPublishVolumeResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::Published { publish_context } => Ok(Self {
                publish_context: publish_context.into_iter().collect(),
            }),
            other => Err(mismatch("ControllerPublishVolume", &other)),
        }
    }
}

impl FromResponse for csi::ValidateVolumeCapabilitiesResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::validate_volume_capabilities_response::Confirmed;
        match r {
            Response::Validated {
                confirmed,
                volume_context,
                parameters,
                mutable_parameters,
                message,
            } => Ok(Self {
                confirmed: confirmed.map(|caps| Confirmed {
                    volume_context: volume_context.into_iter().collect(),
                    volume_capabilities: caps.iter().map(wire_capability).collect(),
                    parameters: parameters.into_iter().collect(),
                    mutable_parameters: mutable_parameters.into_iter().collect(),
                }),
                message,
            }),
            other => Err(mismatch("ValidateVolumeCapabilities", &other)),
        }
    }
}

impl FromResponse for csi::ListVolumesResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::list_volumes_response::{Entry, VolumeStatus};
        match r {
            Response::Volumes {
                entries,
                next_token,
            } => Ok(Self {
                entries: entries
                    .into_iter()
                    .map(|e| Entry {
                        volume: Some(wire_volume(e.volume)),
                        status: Some(VolumeStatus {
                            published_node_ids: e.published_node_ids,
                            volume_condition: wire_condition(e.condition),
                        }),
                    })
                    .collect(),
                next_token,
            }),
            other => Err(mismatch("ListVolumes", &other)),
        }
    }
}

impl FromResponse for csi::GetCapacityResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::Capacity {
                available_bytes,
                maximum_volume_size,
                minimum_volume_size,
            } => Ok(Self {
                available_capacity: wire_i64(available_bytes),
                maximum_volume_size: maximum_volume_size.map(wire_i64),
                minimum_volume_size: minimum_volume_size.map(wire_i64),
            }),
            other => Err(mismatch("GetCapacity", &other)),
        }
    }
}

impl FromResponse for csi::ControllerGetCapabilitiesResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::controller_service_capability::{Rpc, Type, rpc::Type as T};
        let Response::ControllerCapabilities(caps) = r else {
            return Err(mismatch("ControllerGetCapabilities", &r));
        };
        use core::ControllerCapability as C;
        let capabilities = caps
            .into_iter()
            .map(|c| {
                let t = match c {
                    C::CreateDeleteVolume => T::CreateDeleteVolume,
                    C::PublishUnpublishVolume => T::PublishUnpublishVolume,
                    C::ListVolumes => T::ListVolumes,
                    C::GetCapacity => T::GetCapacity,
                    C::PublishReadonly => T::PublishReadonly,
                    C::ExpandVolume => T::ExpandVolume,
                    C::ListVolumesPublishedNodes => T::ListVolumesPublishedNodes,
                    C::VolumeCondition => T::VolumeCondition,
                    C::GetVolume => T::GetVolume,
                    C::SingleNodeMultiWriter => T::SingleNodeMultiWriter,
                    C::ModifyVolume => T::ModifyVolume,
                    C::CreateDeleteSnapshot => T::CreateDeleteSnapshot,
                    C::ListSnapshots => T::ListSnapshots,
                    C::CloneVolume => T::CloneVolume,
                    C::GetSnapshot => T::GetSnapshot,
                };
                csi::ControllerServiceCapability {
                    r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
                }
            })
            .collect();
        Ok(Self { capabilities })
    }
}

impl FromResponse for csi::ControllerExpandVolumeResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::ControllerExpanded {
                capacity_bytes,
                node_expansion_required,
            } => Ok(Self {
                capacity_bytes: wire_i64(capacity_bytes),
                node_expansion_required,
            }),
            other => Err(mismatch("ControllerExpandVolume", &other)),
        }
    }
}

impl FromResponse for csi::ControllerGetVolumeResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::controller_get_volume_response::VolumeStatus;
        match r {
            Response::ControllerVolume(e) => Ok(Self {
                volume: Some(wire_volume(e.volume)),
                status: Some(VolumeStatus {
                    published_node_ids: e.published_node_ids,
                    volume_condition: wire_condition(e.condition),
                }),
            }),
            other => Err(mismatch("ControllerGetVolume", &other)),
        }
    }
}

impl FromResponse for csi::NodeGetVolumeStatsResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use csi::volume_usage::Unit;
        match r {
            Response::Stats { usage, condition } => Ok(Self {
                usage: vec![
                    csi::VolumeUsage {
                        available: wire_i64(usage.available_bytes),
                        total: wire_i64(usage.total_bytes),
                        used: wire_i64(usage.used_bytes),
                        unit: Unit::Bytes as i32,
                    },
                    csi::VolumeUsage {
                        available: wire_i64(usage.available_inodes),
                        total: wire_i64(usage.total_inodes),
                        used: wire_i64(usage.used_inodes),
                        unit: Unit::Inodes as i32,
                    },
                ],
                volume_condition: wire_condition(condition),
            }),
            other => Err(mismatch("NodeGetVolumeStats", &other)),
        }
    }
}

impl FromResponse for csi::NodeExpandVolumeResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::NodeExpanded { capacity_bytes } => Ok(Self {
                capacity_bytes: wire_i64(capacity_bytes),
            }),
            other => Err(mismatch("NodeExpandVolume", &other)),
        }
    }
}

impl FromResponse for csi::NodeGetCapabilitiesResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        use core::NodeCapability as N;
        use csi::node_service_capability::{Rpc, Type, rpc::Type as T};
        let Response::NodeCapabilities(caps) = r else {
            return Err(mismatch("NodeGetCapabilities", &r));
        };
        let capabilities = caps
            .into_iter()
            .map(|c| {
                let t = match c {
                    N::StageUnstageVolume => T::StageUnstageVolume,
                    N::GetVolumeStats => T::GetVolumeStats,
                    N::ExpandVolume => T::ExpandVolume,
                    N::VolumeCondition => T::VolumeCondition,
                    N::SingleNodeMultiWriter => T::SingleNodeMultiWriter,
                };
                csi::NodeServiceCapability {
                    r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
                }
            })
            .collect();
        Ok(Self { capabilities })
    }
}

impl FromResponse for csi::NodeGetInfoResponse {
    fn from_response(r: Response) -> Result<Self, Status> {
        match r {
            Response::NodeInfo {
                node_id,
                max_volumes_per_node,
                accessible_topology,
            } => Ok(Self {
                node_id,
                max_volumes_per_node: wire_i64(max_volumes_per_node),
                accessible_topology: accessible_topology.as_ref().map(wire_topology),
            }),
            other => Err(mismatch("NodeGetInfo", &other)),
        }
    }
}

/// A core status as a gRPC status (details always empty, as CSI requires).
pub fn to_tonic(s: Status) -> tonic::Status {
    tonic::Status::new(tonic::Code::from_i32(s.code as i32), s.message)
}

/// A gRPC status as a core status.
pub fn from_tonic(s: &tonic::Status) -> Status {
    Status::new(Code::from_i32(s.code() as i32), s.message())
}
