//! Concurrent requests on one volume: the loser is told ABORTED, the state
//! never corrupts, and what was answered OK really happened.

mod common;

use common::*;
use volplane_proto::csi;

both_runtimes!(
    concurrent_requests_on_one_volume_abort_the_losers_and_keep_state_whole,
    concurrent_requests_on_one_volume_abort_the_losers_and_keep_state_whole_on
);

async fn concurrent_requests_on_one_volume_abort_the_losers_and_keep_state_whole_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let csi = d.client().await;
    let mut c = csi.controller.clone();
    let vol = c
        .create_volume(csi::CreateVolumeRequest {
            name: "pvc-race".into(),
            volume_capabilities: vec![multi_writer()],
            parameters: params("dir"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let staging = d.staging(&vol.volume_id);
    let stage = csi::NodeStageVolumeRequest {
        volume_id: vol.volume_id.clone(),
        staging_target_path: staging.clone(),
        volume_capability: Some(multi_writer()),
        volume_context: vol.volume_context.clone(),
        ..Default::default()
    };

    // Eight identical stages at once: some win, the rest are ABORTED or OK.
    let results = futures::future::join_all((0..8).map(|_| {
        let mut n = csi.node.clone();
        let req = stage.clone();
        async move { n.node_stage_volume(req).await }
    }))
    .await;
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e.code(), tonic::Code::Aborted, "{e:?}");
            assert!(
                e.message().contains("operation pending for volume"),
                "{e:?}"
            );
        }
    }
    assert!(results.iter().any(|r| r.is_ok()));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert_eq!(
        mounts.matches(&format!(" {staging} ")).count(),
        1,
        "staged exactly once"
    );

    // Sixteen publishes to different targets at once.
    let targets: Vec<String> = (0..16)
        .map(|i| d.target(&format!("pod-{i}"), "pvc-race"))
        .collect();
    let results = futures::future::join_all(targets.iter().map(|t| {
        let mut n = csi.node.clone();
        let req = csi::NodePublishVolumeRequest {
            volume_id: vol.volume_id.clone(),
            staging_target_path: staging.clone(),
            target_path: t.clone(),
            volume_capability: Some(multi_writer()),
            volume_context: vol.volume_context.clone(),
            ..Default::default()
        };
        async move { n.node_publish_volume(req).await }
    }))
    .await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut aborted = 0;
    for (t, r) in targets.iter().zip(&results) {
        match r {
            Ok(_) => assert!(
                mounts.contains(&format!(" {t} ")),
                "answered OK but {t} is not mounted"
            ),
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::Aborted, "{e:?}");
                assert!(
                    !mounts.contains(&format!(" {t} ")),
                    "answered ABORTED but {t} was mounted"
                );
                aborted += 1;
            }
        }
    }
    eprintln!(
        "{} of 16 concurrent publishes won, {aborted} were ABORTED",
        16 - aborted
    );

    // Clean up through the driver: every target, then the stage.
    for t in &targets {
        let mut n = csi.node.clone();
        retry(|| {
            let req = csi::NodeUnpublishVolumeRequest {
                volume_id: vol.volume_id.clone(),
                target_path: t.clone(),
            };
            let mut n = n.clone();
            async move { n.node_unpublish_volume(req).await }
        })
        .await
        .unwrap();
        n.node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
            .await
            .unwrap();
    }
    csi.node
        .clone()
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: vol.volume_id.clone(),
            staging_target_path: staging.clone(),
        })
        .await
        .unwrap();
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: vol.volume_id.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    std::fs::remove_dir_all(std::path::Path::new(&staging).parent().unwrap()).unwrap();
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

/// The driver's thread count, from /proc.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

both_runtimes!(
    after_a_burst_the_blocking_threads_end,
    after_a_burst_the_blocking_threads_end_on
);

/// Issue 29: 400 CreateVolume calls at once put host work on the blocking
/// pool; it grows to at most its bound and shrinks back once idle.
async fn after_a_burst_the_blocking_threads_end_on(rt: Runtime) {
    let d = Driver::start(rt);
    let csi = d.client().await;
    let pid = d.pid();
    let before = threads(pid);
    let mut calls = Vec::new();
    for i in 0..400 {
        let mut c = csi.controller.clone();
        calls.push(tokio::spawn(async move {
            c.create_volume(csi::CreateVolumeRequest {
                name: format!("pvc-burst-{i}"),
                volume_capabilities: vec![multi_writer()],
                parameters: params("dir"),
                ..Default::default()
            })
            .await
        }));
    }
    let mut busiest = before;
    for call in calls {
        busiest = busiest.max(threads(pid));
        call.await.unwrap().expect("CreateVolume");
    }
    let idle = volplane_service::BLOCKING_IDLE;
    let start = std::time::Instant::now();
    while threads(pid) > before + 1 && start.elapsed() < idle * 3 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let after = threads(pid);
    eprintln!(
        "{}: {before} threads before a burst of 400 CreateVolume, {busiest} at most during, \
         {after} after {:.1} s",
        rt.flag(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        busiest <= before + volplane_service::BLOCKING_THREADS,
        "{busiest} threads"
    );
    assert!(
        after <= before + 1,
        "{after} threads remain (from {before})"
    );
}
