//! The storage is the authority, not the state directory (issue 48): a
//! controller started on an empty state directory, against volumes an
//! earlier one made, serves and deletes them as the one that made them.

mod common;

use common::*;
use volplane_proto::csi;

both_runtimes!(
    a_controller_on_a_new_state_directory_serves_and_deletes_what_the_storage_holds,
    new_state_directory_on
);

async fn new_state_directory_on(rt: Runtime) {
    let root = tempfile::Builder::new()
        .prefix("volplane-volumes-")
        .tempdir()
        .unwrap();
    let volumes = root.path().join("volumes");
    let volumes_flag = volumes.display().to_string();
    let mut d = Driver::start_with(rt, &["--volumes-dir", &volumes_flag]);
    let mut csi = d.client().await;
    let cap = multi_writer();
    let made = create(&mut csi, "pvc-kept", &cap, "dir").await;
    let other = create(&mut csi, "pvc-other", &cap, "block").await;
    let snapshot = csi
        .controller
        .create_snapshot(csi::CreateSnapshotRequest {
            source_volume_id: made.clone(),
            name: "snap-kept".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap()
        .snapshot_id;

    // The controller pod is rescheduled: a new process, an empty state
    // directory, the same storage.
    d.kill();
    std::fs::remove_dir_all(d.state()).unwrap();
    d.spawn(None);
    let mut csi = d.client().await;

    // (b) get, expand, list, validate and snapshot lookups find it.
    let got = csi
        .controller
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: made.clone(),
        })
        .await
        .expect("a volume the storage holds is found")
        .into_inner();
    assert_eq!(got.volume.unwrap().volume_id, made);
    let listed: Vec<String> = csi
        .controller
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect();
    assert_eq!(listed, sorted([made.clone(), other.clone()]));
    let expanded = csi
        .controller
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: made.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 4 << 20,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .expect("a volume the storage holds expands")
        .into_inner();
    assert_eq!(expanded.capacity_bytes, 4 << 20);
    let validated = csi
        .controller
        .validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest {
            volume_id: made.clone(),
            volume_capabilities: vec![cap.clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(validated.confirmed.is_some(), "{}", validated.message);
    let snapshots: Vec<String> = csi
        .controller
        .list_snapshots(csi::ListSnapshotsRequest {
            source_volume_id: made.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries
        .into_iter()
        .map(|e| e.snapshot.unwrap().snapshot_id)
        .collect();
    assert_eq!(snapshots, vec![snapshot.clone()]);
    // The CO asks again for the volume it made: the same one, not a conflict.
    assert_eq!(create(&mut csi, "pvc-kept", &cap, "dir").await, made);
    // A block volume's size is its image's.
    let image = csi
        .controller
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: other.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(image.volume.unwrap().capacity_bytes, 1 << 20);
    // A volume the storage never had is not found, and nothing is made.
    let missing = csi
        .controller
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: "vol-00000000000000000000".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");

    // (a) the deletes reach the storage: nothing is left of either volume.
    csi.controller
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: snapshot,
            ..Default::default()
        })
        .await
        .unwrap();
    d.kill();
    std::fs::remove_dir_all(d.state()).unwrap();
    d.spawn(None);
    let mut csi = d.client().await;
    // Ids the driver never made name none of its storage: a delete of one
    // touches nothing, inside another volume or beside the volumes.
    std::fs::write(volumes.join(&made).join("data"), b"kept").unwrap();
    std::fs::write(volumes.join("keep.img"), b"kept").unwrap();
    for hostile in [format!("{made}/data"), "keep".to_string()] {
        csi.controller
            .delete_volume(csi::DeleteVolumeRequest {
                volume_id: hostile.clone(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("delete {hostile:?}: {e}"));
    }
    let escape = csi
        .controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: "../state".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(escape.code(), tonic::Code::InvalidArgument, "{escape:?}");
    assert!(volumes.join(&made).join("data").exists());
    assert!(volumes.join("keep.img").exists());
    assert!(d.state().exists());
    std::fs::remove_file(volumes.join("keep.img")).unwrap();
    for id in [&made, &other] {
        csi.controller
            .delete_volume(csi::DeleteVolumeRequest {
                volume_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let left: Vec<String> = std::fs::read_dir(&volumes)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "snapshots")
        .collect();
    assert_eq!(left, Vec::<String>::new(), "the storage holds nothing");
    let snapshots_left = std::fs::read_dir(volumes.join("snapshots"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(snapshots_left, 0);
    let listed = csi
        .controller
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert!(listed.is_empty(), "{listed:?}");
}

fn sorted<const N: usize>(mut ids: [String; N]) -> Vec<String> {
    ids.sort();
    ids.into()
}

async fn create(csi: &mut Csi, name: &str, cap: &csi::VolumeCapability, kind: &str) -> String {
    csi.controller
        .create_volume(csi::CreateVolumeRequest {
            name: name.into(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![cap.clone()],
            parameters: params(kind),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id
}
