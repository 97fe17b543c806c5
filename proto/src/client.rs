//! A CSI client for the machines: a core [`Request`] goes out as its wire
//! message over any transport (tokio's channel or smol's), and the answer
//! comes back as a core [`Response`]. This is how the control-plane machines
//! reach real drivers (the lab); the bench uses the same transport bound.

use std::collections::BTreeMap;

use volplane_core::driver::{self as core, Request, Response};
use volplane_core::{Code, Status};

use crate::convert::{from_tonic, wire_capability};
use crate::csi;
use crate::csi::controller_client::ControllerClient;
use crate::csi::identity_client::IdentityClient;
use crate::csi::node_client::NodeClient;

/// What a gRPC transport must be for the generated clients.
pub trait Transport:
    tonic::client::GrpcService<
        tonic::body::Body,
        Error: Into<tonic::codegen::StdError>,
        ResponseBody: tonic::codegen::Body<
            Data = tonic::codegen::Bytes,
            Error: Into<tonic::codegen::StdError> + Send,
        > + Send
                          + 'static,
        Future: Send,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> Transport for T where
    T: tonic::client::GrpcService<
            tonic::body::Body,
            Error: Into<tonic::codegen::StdError>,
            ResponseBody: tonic::codegen::Body<
                Data = tonic::codegen::Bytes,
                Error: Into<tonic::codegen::StdError> + Send,
            > + Send
                              + 'static,
            Future: Send,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// The three CSI clients on one connection.
#[derive(Debug, Clone)]
pub struct CsiClient<T> {
    pub identity: IdentityClient<T>,
    pub controller: ControllerClient<T>,
    pub node: NodeClient<T>,
}

fn map(m: &BTreeMap<String, String>) -> std::collections::HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn range(r: &core::CapacityRange) -> csi::CapacityRange {
    csi::CapacityRange {
        required_bytes: i64::try_from(r.required_bytes).unwrap_or(i64::MAX),
        limit_bytes: i64::try_from(r.limit_bytes).unwrap_or(i64::MAX),
    }
}

fn topology(t: &core::Topology) -> csi::Topology {
    csi::Topology { segments: map(t) }
}

fn core_volume(v: csi::Volume) -> core::Volume {
    core::Volume {
        volume_id: v.volume_id,
        capacity_bytes: u64::try_from(v.capacity_bytes).unwrap_or(0),
        volume_context: v.volume_context.into_iter().collect(),
        accessible_topology: v
            .accessible_topology
            .into_iter()
            .map(|t| t.segments.into_iter().collect())
            .collect(),
        content_source: None,
    }
}

fn status(s: tonic::Status) -> Status {
    from_tonic(&s)
}

impl<T: Transport> CsiClient<T> {
    /// Clients on `channel`; give `origin` for transports without one (smol's).
    pub fn new(channel: T, origin: Option<http::Uri>) -> CsiClient<T> {
        match origin {
            None => CsiClient {
                identity: IdentityClient::new(channel.clone()),
                controller: ControllerClient::new(channel.clone()),
                node: NodeClient::new(channel),
            },
            Some(o) => CsiClient {
                identity: IdentityClient::with_origin(channel.clone(), o.clone()),
                controller: ControllerClient::with_origin(channel.clone(), o.clone()),
                node: NodeClient::with_origin(channel, o),
            },
        }
    }

    /// Sends `request` and returns the driver's answer as the machines see it.
    pub async fn call(&mut self, request: &Request) -> Result<Response, Status> {
        match request {
            Request::GetPluginInfo => {
                let r = self
                    .identity
                    .get_plugin_info(csi::GetPluginInfoRequest {})
                    .await
                    .map_err(status)?
                    .into_inner();
                Ok(Response::PluginInfo {
                    name: r.name,
                    vendor_version: r.vendor_version,
                    manifest: r.manifest.into_iter().collect(),
                })
            }
            Request::Probe => {
                let r = self
                    .identity
                    .probe(csi::ProbeRequest {})
                    .await
                    .map_err(status)?
                    .into_inner();
                Ok(Response::Probe {
                    ready: r.ready.unwrap_or(true),
                })
            }
            Request::CreateVolume(c) => {
                let r = self
                    .controller
                    .create_volume(csi::CreateVolumeRequest {
                        name: c.name.clone(),
                        capacity_range: Some(range(&c.capacity)),
                        volume_capabilities: c.capabilities.iter().map(wire_capability).collect(),
                        parameters: map(&c.parameters),
                        mutable_parameters: map(&c.mutable_parameters),
                        secrets: map(&c.secrets.0),
                        volume_content_source: None,
                        accessibility_requirements: c.accessibility.as_ref().map(|a| {
                            csi::TopologyRequirement {
                                requisite: a.requisite.iter().map(topology).collect(),
                                preferred: a.preferred.iter().map(topology).collect(),
                            }
                        }),
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                let v = r
                    .volume
                    .ok_or_else(|| Status::internal("CreateVolume answered without a volume"))?;
                Ok(Response::Volume(core_volume(v)))
            }
            Request::DeleteVolume(d) => {
                self.controller
                    .delete_volume(csi::DeleteVolumeRequest {
                        volume_id: d.volume_id.clone(),
                        secrets: map(&d.secrets.0),
                    })
                    .await
                    .map_err(status)?;
                Ok(Response::Empty)
            }
            Request::ControllerPublish(p) => {
                let r = self
                    .controller
                    .controller_publish_volume(csi::ControllerPublishVolumeRequest {
                        volume_id: p.volume_id.clone(),
                        node_id: p.node_id.clone(),
                        volume_capability: Some(wire_capability(&p.capability)),
                        readonly: p.readonly,
                        secrets: map(&p.secrets.0),
                        volume_context: map(&p.volume_context),
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                Ok(Response::Published {
                    publish_context: r.publish_context.into_iter().collect(),
                })
            }
            Request::ControllerUnpublish(u) => {
                self.controller
                    .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
                        volume_id: u.volume_id.clone(),
                        node_id: u.node_id.clone().unwrap_or_default(),
                        secrets: map(&u.secrets.0),
                    })
                    .await
                    .map_err(status)?;
                Ok(Response::Empty)
            }
            Request::ControllerExpand(e) => {
                let r = self
                    .controller
                    .controller_expand_volume(csi::ControllerExpandVolumeRequest {
                        volume_id: e.volume_id.clone(),
                        capacity_range: Some(range(&e.capacity)),
                        secrets: map(&e.secrets.0),
                        volume_capability: e.capability.as_ref().map(wire_capability),
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                Ok(Response::ControllerExpanded {
                    capacity_bytes: u64::try_from(r.capacity_bytes).unwrap_or(0),
                    node_expansion_required: r.node_expansion_required,
                })
            }
            Request::NodeStage(s) => {
                self.node
                    .node_stage_volume(csi::NodeStageVolumeRequest {
                        volume_id: s.volume_id.clone(),
                        publish_context: map(&s.publish_context),
                        staging_target_path: s.staging_target_path.clone(),
                        volume_capability: Some(wire_capability(&s.capability)),
                        secrets: map(&s.secrets.0),
                        volume_context: map(&s.volume_context),
                    })
                    .await
                    .map_err(status)?;
                Ok(Response::Empty)
            }
            Request::NodeUnstage(u) => {
                self.node
                    .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                        volume_id: u.volume_id.clone(),
                        staging_target_path: u.staging_target_path.clone(),
                    })
                    .await
                    .map_err(status)?;
                Ok(Response::Empty)
            }
            Request::NodePublish(p) => {
                self.node
                    .node_publish_volume(csi::NodePublishVolumeRequest {
                        volume_id: p.volume_id.clone(),
                        publish_context: map(&p.publish_context),
                        staging_target_path: p.staging_target_path.clone(),
                        target_path: p.target_path.clone(),
                        volume_capability: Some(wire_capability(&p.capability)),
                        readonly: p.readonly,
                        secrets: map(&p.secrets.0),
                        volume_context: map(&p.volume_context),
                    })
                    .await
                    .map_err(status)?;
                Ok(Response::Empty)
            }
            Request::NodeUnpublish(u) => {
                self.node
                    .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                        volume_id: u.volume_id.clone(),
                        target_path: u.target_path.clone(),
                    })
                    .await
                    .map_err(status)?;
                Ok(Response::Empty)
            }
            Request::NodeExpand(e) => {
                let r = self
                    .node
                    .node_expand_volume(csi::NodeExpandVolumeRequest {
                        volume_id: e.volume_id.clone(),
                        volume_path: e.volume_path.clone(),
                        capacity_range: Some(range(&e.capacity)),
                        staging_target_path: e.staging_target_path.clone(),
                        volume_capability: e.capability.as_ref().map(wire_capability),
                        secrets: map(&e.secrets.0),
                    })
                    .await
                    .map_err(status)?
                    .into_inner();
                Ok(Response::NodeExpanded {
                    capacity_bytes: u64::try_from(r.capacity_bytes).unwrap_or(0),
                })
            }
            Request::NodeGetInfo => {
                let r = self
                    .node
                    .node_get_info(csi::NodeGetInfoRequest {})
                    .await
                    .map_err(status)?
                    .into_inner();
                Ok(Response::NodeInfo {
                    node_id: r.node_id,
                    max_volumes_per_node: u64::try_from(r.max_volumes_per_node).unwrap_or(0),
                    accessible_topology: r
                        .accessible_topology
                        .map(|t| t.segments.into_iter().collect()),
                })
            }
            Request::ControllerGetCapabilities => {
                use core::ControllerCapability as C;
                use csi::controller_service_capability::{Type, rpc::Type as T};
                let r = self
                    .controller
                    .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
                    .await
                    .map_err(status)?
                    .into_inner();
                // Capabilities this side does not know are left out.
                let caps = r.capabilities.into_iter().filter_map(|c| {
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
                        _ => return None,
                    })
                });
                Ok(Response::ControllerCapabilities(caps.collect()))
            }
            Request::NodeGetCapabilities => {
                use core::NodeCapability as N;
                use csi::node_service_capability::{Type, rpc::Type as T};
                let r = self
                    .node
                    .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
                    .await
                    .map_err(status)?
                    .into_inner();
                let caps = r.capabilities.into_iter().filter_map(|c| {
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
            other => Err(Status::new(
                Code::Unimplemented,
                format!("the machines' client does not send {}", other.method()),
            )),
        }
    }
}
