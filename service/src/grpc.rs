//! The gRPC services (Identity, Controller, GroupController, Node) as thin glue: validate the
//! wire request, hand it to the pump, convert the answer, log one line.

use std::sync::Arc;
use std::time::Instant;

use crate::metrics::Metrics;

use volplane_core::Status;

use crate::PumpHandle;
use volplane_proto::convert::{FromResponse, IntoRequest, to_tonic};
use volplane_proto::csi;
use volplane_proto::csi::controller_server::Controller;
use volplane_proto::csi::group_controller_server::GroupController;
use volplane_proto::csi::identity_server::Identity;
use volplane_proto::csi::node_server::Node;

/// The CSI services over a [`PumpHandle`]; clone it into each tonic server.
#[derive(Debug, Clone)]
pub struct CsiService {
    pump: PumpHandle,
    /// Where served calls are counted, under the driver's name.
    metrics: Option<(Arc<Metrics>, String)>,
}

impl CsiService {
    /// The services over `pump`.
    pub fn new(pump: PumpHandle) -> CsiService {
        CsiService {
            pump,
            metrics: None,
        }
    }

    /// Counts every served call in `metrics` (with the driver's name).
    pub fn counted(mut self, metrics: Option<(Arc<Metrics>, String)>) -> CsiService {
        self.metrics = metrics;
        self
    }

    async fn call<Req, Resp>(
        &self,
        method: &'static str,
        request: tonic::Request<Req>,
    ) -> Result<tonic::Response<Resp>, tonic::Status>
    where
        Req: IntoRequest,
        Resp: FromResponse,
    {
        let start = Instant::now();
        let (volume, path, result) = match request.into_inner().into_request() {
            Err(e) => (String::new(), String::new(), Err(e)),
            Ok(req) => {
                let volume = req.subject().unwrap_or_default().to_string();
                let path = req.path().unwrap_or_default().to_string();
                let result = self.pump.call(req).await.and_then(Resp::from_response);
                (volume, path, result)
            }
        };
        log(method, &volume, &path, start, &result);
        if let Some((metrics, driver)) = &self.metrics {
            let code = result
                .as_ref()
                .map_or_else(|e| e.code, |_| volplane_core::Code::Ok);
            metrics.csi_call(driver, method, code, start.elapsed());
        }
        result.map(tonic::Response::new).map_err(to_tonic)
    }
}

/// One structured line per RPC: method, volume, path, duration, code.
fn log<T>(method: &str, volume: &str, path: &str, start: Instant, result: &Result<T, Status>) {
    let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(_) => tracing::info!(
            target: "volplane::rpc",
            method,
            volume,
            path,
            duration_ms = format_args!("{duration_ms:.2}"),
            code = "OK",
        ),
        Err(e) => tracing::warn!(
            target: "volplane::rpc",
            method,
            volume,
            path,
            duration_ms = format_args!("{duration_ms:.2}"),
            code = e.code.name(),
            message = %e.message,
        ),
    }
}

macro_rules! service {
    ($service:ident { $($name:ident($req:ty) -> $resp:ty = $method:literal;)* }) => {
        #[tonic::async_trait]
        impl $service for CsiService {
            $(
                async fn $name(
                    &self,
                    request: tonic::Request<$req>,
                ) -> Result<tonic::Response<$resp>, tonic::Status> {
                    self.call($method, request).await
                }
            )*
        }
    };
}

service! {
    Identity {
        get_plugin_info(csi::GetPluginInfoRequest) -> csi::GetPluginInfoResponse = "GetPluginInfo";
        get_plugin_capabilities(csi::GetPluginCapabilitiesRequest) -> csi::GetPluginCapabilitiesResponse = "GetPluginCapabilities";
        probe(csi::ProbeRequest) -> csi::ProbeResponse = "Probe";
    }
}

service! {
    Controller {
        create_volume(csi::CreateVolumeRequest) -> csi::CreateVolumeResponse = "CreateVolume";
        delete_volume(csi::DeleteVolumeRequest) -> csi::DeleteVolumeResponse = "DeleteVolume";
        controller_publish_volume(csi::ControllerPublishVolumeRequest) -> csi::ControllerPublishVolumeResponse = "ControllerPublishVolume";
        controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest) -> csi::ControllerUnpublishVolumeResponse = "ControllerUnpublishVolume";
        validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest) -> csi::ValidateVolumeCapabilitiesResponse = "ValidateVolumeCapabilities";
        list_volumes(csi::ListVolumesRequest) -> csi::ListVolumesResponse = "ListVolumes";
        get_capacity(csi::GetCapacityRequest) -> csi::GetCapacityResponse = "GetCapacity";
        controller_get_capabilities(csi::ControllerGetCapabilitiesRequest) -> csi::ControllerGetCapabilitiesResponse = "ControllerGetCapabilities";
        controller_expand_volume(csi::ControllerExpandVolumeRequest) -> csi::ControllerExpandVolumeResponse = "ControllerExpandVolume";
        controller_get_volume(csi::ControllerGetVolumeRequest) -> csi::ControllerGetVolumeResponse = "ControllerGetVolume";
        controller_modify_volume(csi::ControllerModifyVolumeRequest) -> csi::ControllerModifyVolumeResponse = "ControllerModifyVolume";
        create_snapshot(csi::CreateSnapshotRequest) -> csi::CreateSnapshotResponse = "CreateSnapshot";
        delete_snapshot(csi::DeleteSnapshotRequest) -> csi::DeleteSnapshotResponse = "DeleteSnapshot";
        list_snapshots(csi::ListSnapshotsRequest) -> csi::ListSnapshotsResponse = "ListSnapshots";
        get_snapshot(csi::GetSnapshotRequest) -> csi::GetSnapshotResponse = "GetSnapshot";
    }
}

service! {
    GroupController {
        group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest) -> csi::GroupControllerGetCapabilitiesResponse = "GroupControllerGetCapabilities";
        create_volume_group_snapshot(csi::CreateVolumeGroupSnapshotRequest) -> csi::CreateVolumeGroupSnapshotResponse = "CreateVolumeGroupSnapshot";
        delete_volume_group_snapshot(csi::DeleteVolumeGroupSnapshotRequest) -> csi::DeleteVolumeGroupSnapshotResponse = "DeleteVolumeGroupSnapshot";
        get_volume_group_snapshot(csi::GetVolumeGroupSnapshotRequest) -> csi::GetVolumeGroupSnapshotResponse = "GetVolumeGroupSnapshot";
    }
}

service! {
    Node {
        node_stage_volume(csi::NodeStageVolumeRequest) -> csi::NodeStageVolumeResponse = "NodeStageVolume";
        node_unstage_volume(csi::NodeUnstageVolumeRequest) -> csi::NodeUnstageVolumeResponse = "NodeUnstageVolume";
        node_publish_volume(csi::NodePublishVolumeRequest) -> csi::NodePublishVolumeResponse = "NodePublishVolume";
        node_unpublish_volume(csi::NodeUnpublishVolumeRequest) -> csi::NodeUnpublishVolumeResponse = "NodeUnpublishVolume";
        node_get_volume_stats(csi::NodeGetVolumeStatsRequest) -> csi::NodeGetVolumeStatsResponse = "NodeGetVolumeStats";
        node_expand_volume(csi::NodeExpandVolumeRequest) -> csi::NodeExpandVolumeResponse = "NodeExpandVolume";
        node_get_capabilities(csi::NodeGetCapabilitiesRequest) -> csi::NodeGetCapabilitiesResponse = "NodeGetCapabilities";
        node_get_info(csi::NodeGetInfoRequest) -> csi::NodeGetInfoResponse = "NodeGetInfo";
    }
}
