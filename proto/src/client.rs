//! A CSI client for the machines: a core [`Request`] goes out as its wire
//! message over any transport (tokio's channel or smol's), and the answer
//! comes back as a core [`Response`]. This is how the control-plane machines
//! reach real drivers (the lab); the bench uses the same transport bound.

use volplane_core::Status;
use volplane_core::driver::{Request, Response};

use crate::convert::from_tonic;
use crate::convert::outgoing::{IntoResponse, ToWire, not_sent};
use crate::csi;
use crate::csi::controller_client::ControllerClient;
use crate::csi::group_controller_client::GroupControllerClient;
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

/// The four CSI clients on one connection.
#[derive(Debug, Clone)]
pub struct CsiClient<T> {
    /// The Identity service.
    pub identity: IdentityClient<T>,
    /// The Controller service.
    pub controller: ControllerClient<T>,
    /// The GroupController service.
    pub group: GroupControllerClient<T>,
    /// The Node service.
    pub node: NodeClient<T>,
}

/// What a call brought back: the driver's answer, or its refusal. The
/// answer is `Err` when the driver answered OK with a message the CSI
/// specification does not allow (a REQUIRED field missing).
pub type Exchange = Result<Result<Response, Status>, Status>;

fn answer<R: IntoResponse>(answer: Result<tonic::Response<R>, tonic::Status>) -> Exchange {
    Ok(answer
        .map_err(|s| from_tonic(&s))?
        .into_inner()
        .into_response())
}

impl<T: Transport> CsiClient<T> {
    /// Clients on `channel`; give `origin` for transports without one (smol's).
    pub fn new(channel: T, origin: Option<http::Uri>) -> CsiClient<T> {
        match origin {
            None => CsiClient {
                identity: IdentityClient::new(channel.clone()),
                controller: ControllerClient::new(channel.clone()),
                group: GroupControllerClient::new(channel.clone()),
                node: NodeClient::new(channel),
            },
            Some(o) => CsiClient {
                identity: IdentityClient::with_origin(channel.clone(), o.clone()),
                controller: ControllerClient::with_origin(channel.clone(), o.clone()),
                group: GroupControllerClient::with_origin(channel.clone(), o.clone()),
                node: NodeClient::with_origin(channel, o),
            },
        }
    }

    /// Sends `request` and returns the driver's answer as the machines see it.
    pub async fn call(&mut self, request: &Request) -> Result<Response, Status> {
        self.exchange(request).await.and_then(|answer| answer)
    }

    /// Sends `request`; tells a refusal from an answer that is malformed.
    pub async fn exchange(&mut self, request: &Request) -> Exchange {
        let (id, c, n) = (&mut self.identity, &mut self.controller, &mut self.node);
        let g = &mut self.group;
        match request {
            Request::GetPluginInfo => {
                answer(id.get_plugin_info(csi::GetPluginInfoRequest {}).await)
            }
            Request::GetPluginCapabilities => answer(
                id.get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
                    .await,
            ),
            Request::Probe => answer(id.probe(csi::ProbeRequest {}).await),
            Request::CreateVolume(r) => answer(c.create_volume(r.to_wire()).await),
            Request::DeleteVolume(r) => answer(c.delete_volume(r.to_wire()).await),
            Request::ControllerPublish(r) => answer(c.controller_publish_volume(r.to_wire()).await),
            Request::ControllerUnpublish(r) => {
                answer(c.controller_unpublish_volume(r.to_wire()).await)
            }
            Request::ControllerExpand(r) => answer(c.controller_expand_volume(r.to_wire()).await),
            Request::ControllerModify(r) => answer(c.controller_modify_volume(r.to_wire()).await),
            Request::GetCapacity(r) => answer(c.get_capacity(r.to_wire()).await),
            Request::CreateSnapshot(r) => answer(c.create_snapshot(r.to_wire()).await),
            Request::DeleteSnapshot(r) => answer(c.delete_snapshot(r.to_wire()).await),
            Request::ListSnapshots(r) => answer(c.list_snapshots(r.to_wire()).await),
            Request::CreateGroupSnapshot(r) => {
                answer(g.create_volume_group_snapshot(r.to_wire()).await)
            }
            Request::DeleteGroupSnapshot(r) => {
                answer(g.delete_volume_group_snapshot(r.to_wire()).await)
            }
            Request::GetGroupSnapshot {
                group_snapshot_id,
                snapshot_ids,
                secrets,
            } => {
                let wire = crate::convert::snapshot::get_group_wire(
                    group_snapshot_id,
                    snapshot_ids,
                    secrets,
                );
                answer(g.get_volume_group_snapshot(wire).await)
            }
            Request::ControllerGetCapabilities => answer(
                c.controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
                    .await,
            ),
            Request::NodeStage(r) => answer(n.node_stage_volume(r.to_wire()).await),
            Request::NodeUnstage(r) => answer(n.node_unstage_volume(r.to_wire()).await),
            Request::NodePublish(r) => answer(n.node_publish_volume(r.to_wire()).await),
            Request::NodeUnpublish(r) => answer(n.node_unpublish_volume(r.to_wire()).await),
            Request::NodeExpand(r) => answer(n.node_expand_volume(r.to_wire()).await),
            Request::NodeGetInfo => answer(n.node_get_info(csi::NodeGetInfoRequest {}).await),
            Request::NodeGetCapabilities => answer(
                n.node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
                    .await,
            ),
            Request::ValidateCapabilities(r) => {
                answer(c.validate_volume_capabilities(r.to_wire()).await)
            }
            Request::ListVolumes(r) => answer(c.list_volumes(r.to_wire()).await),
            Request::ControllerGetVolume { volume_id } => answer(
                c.controller_get_volume(csi::ControllerGetVolumeRequest {
                    volume_id: volume_id.clone(),
                })
                .await,
            ),
            Request::NodeVolumeStats(r) => answer(n.node_get_volume_stats(r.to_wire()).await),
            Request::GroupControllerGetCapabilities => answer(
                g.group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {})
                    .await,
            ),
            other => Err(not_sent(other.method())),
        }
    }
}
