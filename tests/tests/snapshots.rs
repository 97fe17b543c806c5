//! Snapshots, restores, clones and group snapshots on the reference driver,
//! with real loop devices and filesystems: a restored volume holds what its
//! volume held when the snapshot was cut, a clone what it holds now, and
//! nothing is left behind once everything is deleted.

mod common;

use std::collections::HashMap;

use common::*;
use volplane_proto::csi;
use volplane_proto::csi::volume_capability::access_mode::Mode;

fn from_snapshot(id: &str) -> csi::VolumeContentSource {
    use csi::volume_content_source::{SnapshotSource, Type};
    csi::VolumeContentSource {
        r#type: Some(Type::Snapshot(SnapshotSource {
            snapshot_id: id.into(),
        })),
    }
}

fn from_volume(id: &str) -> csi::VolumeContentSource {
    use csi::volume_content_source::{Type, VolumeSource};
    csi::VolumeContentSource {
        r#type: Some(Type::Volume(VolumeSource {
            volume_id: id.into(),
        })),
    }
}

/// A volume made from `source`, of `bytes` (0: the driver's choice),
/// attached to [`NODE`].
async fn made_from(
    csi: &mut Csi,
    name: &str,
    kind: &str,
    source: csi::VolumeContentSource,
    bytes: i64,
) -> Attached {
    let cap = capability(Mode::SingleNodeWriter, false);
    let v = csi
        .controller
        .create_volume(csi::CreateVolumeRequest {
            name: name.into(),
            capacity_range: (bytes > 0).then_some(csi::CapacityRange {
                required_bytes: bytes,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![cap.clone()],
            parameters: params(kind),
            volume_content_source: Some(source.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        v.content_source,
        Some(source),
        "the answer names its source"
    );
    if bytes > 0 {
        assert_eq!(v.capacity_bytes, bytes, "{name}: the size asked for");
    }
    let p = csi
        .controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: NODE.into(),
            volume_capability: Some(cap),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    Attached {
        id: v.volume_id,
        context: v.volume_context,
        publish_context: p.publish_context,
    }
}

/// Stages `a` at its kubelet path; returns the path.
async fn stage(d: &Driver, csi: &mut Csi, a: &Attached) -> String {
    let staging = d.staging(&a.id);
    csi.node
        .node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: a.id.clone(),
            publish_context: a.publish_context.clone(),
            staging_target_path: staging.clone(),
            volume_capability: Some(capability(Mode::SingleNodeWriter, false)),
            volume_context: a.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    staging
}

async fn unstage_and_delete(csi: &mut Csi, a: &Attached, staging: &str) {
    csi.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: a.id.clone(),
            staging_target_path: staging.into(),
        })
        .await
        .unwrap();
    csi.controller
        .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
            volume_id: a.id.clone(),
            node_id: NODE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    csi.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: a.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    std::fs::remove_dir_all(std::path::Path::new(staging).parent().unwrap()).unwrap();
}

async fn snapshot(csi: &mut Csi, name: &str, source: &str) -> csi::Snapshot {
    let s = csi
        .controller
        .create_snapshot(csi::CreateSnapshotRequest {
            source_volume_id: source.into(),
            name: name.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert!(s.ready_to_use);
    assert_eq!(s.source_volume_id, source);
    assert!(s.creation_time.is_some_and(|t| t.seconds > 0));
    s
}

both_runtimes!(
    a_restore_holds_what_the_snapshot_cut_and_a_clone_what_is_there_now,
    restores_and_clones_on
);

async fn restores_and_clones_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let cap = capability(Mode::SingleNodeWriter, false);
    for kind in ["block", "dir"] {
        let src = create_and_attach(
            &mut csi,
            &format!("pvc-{kind}"),
            kind,
            cap.clone(),
            32 << 20,
        )
        .await;
        let at = stage(&d, &mut csi, &src).await;
        std::fs::write(format!("{at}/data"), "cut").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", format!("{at}/escape")).unwrap();
        let s = snapshot(&mut csi, &format!("snap-{kind}"), &src.id).await;
        std::fs::write(format!("{at}/data"), "later").unwrap();

        let restored = made_from(
            &mut csi,
            &format!("restored-{kind}"),
            kind,
            from_snapshot(&s.snapshot_id),
            0,
        )
        .await;
        let r_at = stage(&d, &mut csi, &restored).await;
        assert_eq!(
            std::fs::read_to_string(format!("{r_at}/data")).unwrap(),
            "cut",
            "{kind}"
        );
        assert_eq!(
            std::fs::read_link(format!("{r_at}/escape")).unwrap(),
            std::path::Path::new("/etc/shadow"),
            "{kind}: a link is restored as a link"
        );
        let clone = made_from(
            &mut csi,
            &format!("clone-{kind}"),
            kind,
            from_volume(&src.id),
            0,
        )
        .await;
        let c_at = stage(&d, &mut csi, &clone).await;
        assert_eq!(
            std::fs::read_to_string(format!("{c_at}/data")).unwrap(),
            "later",
            "{kind}"
        );

        // A snapshot of one kind does not become a volume of another.
        let other = if kind == "block" { "dir" } else { "block" };
        let e = csi
            .controller
            .create_volume(csi::CreateVolumeRequest {
                name: format!("wrong-{kind}"),
                volume_capabilities: vec![cap.clone()],
                parameters: params(other),
                volume_content_source: Some(from_snapshot(&s.snapshot_id)),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

        for (a, p) in [(&src, &at), (&restored, &r_at), (&clone, &c_at)] {
            unstage_and_delete(&mut csi, a, p).await;
        }
        csi.controller
            .delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: s.snapshot_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

both_runtimes!(
    a_group_snapshot_cuts_every_volume_and_each_member_restores,
    group_snapshots_on
);

/// The smallest volume Kubernetes' group-snapshot e2e suite claims, and
/// restores each member into: 1Mi, whatever the driver's own sizes.
const SMALLEST: i64 = 1 << 20;

async fn group_snapshots_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let ch = volplane_tokio::connect(&d.endpoint).await.unwrap();
    let mut groups = csi::group_controller_client::GroupControllerClient::new(ch);
    let cap = capability(Mode::SingleNodeWriter, false);
    let mut volumes = Vec::new();
    for kind in ["block", "dir"] {
        let a = create_and_attach(
            &mut csi,
            &format!("pvc-{kind}"),
            kind,
            cap.clone(),
            SMALLEST,
        )
        .await;
        let at = stage(&d, &mut csi, &a).await;
        std::fs::write(format!("{at}/data"), kind).unwrap();
        volumes.push((kind, a, at));
    }
    let ids: Vec<String> = volumes.iter().map(|(_, a, _)| a.id.clone()).collect();
    let g = groups
        .create_volume_group_snapshot(csi::CreateVolumeGroupSnapshotRequest {
            name: "group-1".into(),
            source_volume_ids: ids.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert!(g.ready_to_use);
    assert_eq!(g.snapshots.len(), 2);
    assert!(
        g.snapshots.iter().all(|s| s.size_bytes == SMALLEST),
        "a member restores into a claim of its volume's size: {:?}",
        g.snapshots
    );
    // The machines' client (the snapshotter's) reaches the GroupController.
    let ch = volplane_tokio::connect(&d.endpoint).await.unwrap();
    let mut machines = volplane_proto::client::CsiClient::new(ch, None);
    let got = machines
        .call(&volplane_core::driver::Request::GetGroupSnapshot {
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids: Vec::new(),
            secrets: Default::default(),
        })
        .await
        .expect("GetVolumeGroupSnapshot through the machines' client");
    assert!(
        matches!(&got, volplane_core::driver::Response::GroupSnapshot(x)
            if x.ready_to_use && x.snapshots.len() == 2),
        "{got:?}"
    );
    let by_source: HashMap<String, String> = g
        .snapshots
        .iter()
        .map(|s| (s.source_volume_id.clone(), s.snapshot_id.clone()))
        .collect();
    for (kind, a, at) in &volumes {
        std::fs::write(format!("{at}/data"), "later").unwrap();
        let member = &by_source[&a.id];
        let r = made_from(
            &mut csi,
            &format!("restored-{kind}"),
            kind,
            from_snapshot(member),
            SMALLEST,
        )
        .await;
        let r_at = stage(&d, &mut csi, &r).await;
        assert_eq!(
            std::fs::read_to_string(format!("{r_at}/data")).unwrap(),
            *kind
        );
        unstage_and_delete(&mut csi, &r, &r_at).await;
        let e = csi
            .controller
            .delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: member.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::InvalidArgument,
            "a member goes with its group"
        );
    }
    let got = groups
        .get_volume_group_snapshot(csi::GetVolumeGroupSnapshotRequest {
            group_snapshot_id: g.group_snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert_eq!(got, g);
    groups
        .delete_volume_group_snapshot(csi::DeleteVolumeGroupSnapshotRequest {
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids: g.snapshots.iter().map(|s| s.snapshot_id.clone()).collect(),
            ..Default::default()
        })
        .await
        .unwrap();
    for (_, a, at) in &volumes {
        unstage_and_delete(&mut csi, a, at).await;
    }
    assert_eq!(d.leftovers(), Vec::<String>::new());
}
