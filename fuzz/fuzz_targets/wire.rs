//! Arbitrary bytes as every CSI request message: decoding and validation
//! never panic, and a request that validates has its required fields.
#![no_main]
use libfuzzer_sys::fuzz_target;
use prost::Message;
use volplane_proto::convert::IntoRequest;
use volplane_proto::csi;

fn check<M: Message + Default + IntoRequest>(data: &[u8]) {
    if let Ok(m) = M::decode(data)
        && let Ok(req) = m.into_request()
        && let Some(v) = req.volume()
    {
        assert!(!v.is_empty(), "{} validated with an empty volume", req.method());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 16 {
        0 => check::<csi::CreateVolumeRequest>(rest),
        1 => check::<csi::DeleteVolumeRequest>(rest),
        2 => check::<csi::ControllerPublishVolumeRequest>(rest),
        3 => check::<csi::ControllerUnpublishVolumeRequest>(rest),
        4 => check::<csi::ValidateVolumeCapabilitiesRequest>(rest),
        5 => check::<csi::ListVolumesRequest>(rest),
        6 => check::<csi::GetCapacityRequest>(rest),
        7 => check::<csi::ControllerExpandVolumeRequest>(rest),
        8 => check::<csi::ControllerModifyVolumeRequest>(rest),
        9 => check::<csi::NodeStageVolumeRequest>(rest),
        10 => check::<csi::NodeUnstageVolumeRequest>(rest),
        11 => check::<csi::NodePublishVolumeRequest>(rest),
        12 => check::<csi::NodeUnpublishVolumeRequest>(rest),
        13 => check::<csi::NodeGetVolumeStatsRequest>(rest),
        14 => check::<csi::NodeExpandVolumeRequest>(rest),
        _ => check::<csi::ControllerGetVolumeRequest>(rest),
    }
});
