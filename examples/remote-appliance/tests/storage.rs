//! The appliance is the truth: a controller on a new state directory
//! serves and deletes what the appliance holds; a kill -9 during a
//! credentialed CreateVolume or DeleteVolume sends nothing to the
//! appliance without its token and the CO's retry finishes it; a killed
//! process's create that lands after its successor's delete is fenced
//! (no orphan); a multi-node mode is refused before the appliance is
//! asked; an appliance answering a short expand is INTERNAL naming the
//! backend method.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Appliance, TOKEN};
use remote_appliance::api::Faults;
use volplane::testing::csi::volume_capability::access_mode::Mode;
use volplane::testing::csi::volume_capability::{AccessMode, AccessType, MountVolume};
use volplane::testing::{Code, Csi, DriverProcess, Error, csi, may_mount};

fn secrets() -> HashMap<String, String> {
    HashMap::from([("token".to_string(), TOKEN.to_string())])
}

fn capability(mode: Mode) -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode { mode: mode as i32 }),
    }
}

fn create(name: &str) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 32 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![capability(Mode::SingleNodeWriter)],
        secrets: secrets(),
        ..Default::default()
    }
}

fn expand(id: &str, bytes: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: id.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        secrets: secrets(),
        ..Default::default()
    }
}

fn delete(id: &str) -> csi::DeleteVolumeRequest {
    csi::DeleteVolumeRequest {
        volume_id: id.into(),
        secrets: secrets(),
    }
}

/// Sends `call` while the appliance holds the next change `hold_ms`, kills
/// the driver (SIGKILL) `after_ms` into it and starts it again; whether the
/// call was answered OK before the kill, and a connection to the new one.
async fn killed_during<F, Fut>(
    appliance: &Appliance,
    d: &mut DriverProcess,
    (hold_ms, after_ms): (u64, u64),
    call: F,
) -> (bool, Csi)
where
    F: FnOnce(Csi) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let endpoint = d.layout().endpoint.clone();
    let csi = Csi::connect(&endpoint).await.unwrap();
    appliance.slow_next(1, hold_ms);
    let call = tokio::spawn(call(csi));
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    d.kill();
    let answered = call.await.unwrap_or(false);
    d.resume().unwrap();
    (answered, Csi::connect(&endpoint).await.unwrap())
}

/// Waits until `check` holds (the appliance acting on a slow request).
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_on_a_new_state_directory_serves_and_deletes_what_the_appliance_holds() {
    if !may_mount("a volume staged by a new controller") {
        return;
    }
    let appliance = Appliance::start(&[]);
    let first = DriverProcess::start(appliance.driver()).unwrap();
    let csi = Csi::connect(&first.layout().endpoint).await.unwrap();
    let mut c = csi.controller.clone();
    let v = c
        .create_volume(create("pvc-made-by-the-first"))
        .await
        .unwrap()
        .into_inner();
    let id = v.volume.unwrap().volume_id;
    drop(first); // its state directory goes with it
    let second = DriverProcess::start(appliance.driver()).unwrap();
    let l = second.layout().clone();
    let csi = Csi::connect(&l.endpoint).await.unwrap();
    let (mut c, mut n) = (csi.controller.clone(), csi.node.clone());
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<_> = listed
        .entries
        .iter()
        .filter_map(|e| e.volume.as_ref())
        .map(|v| v.volume_id.clone())
        .collect();
    assert_eq!(ids, vec![id.clone()], "ListVolumes of the new controller");
    let validated = c
        .validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest {
            volume_id: id.clone(),
            volume_capabilities: vec![capability(Mode::SingleNodeWriter)],
            secrets: secrets(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(validated.confirmed.is_some(), "{validated:?}");
    let expanded = c
        .controller_expand_volume(expand(&id, 64 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(expanded.capacity_bytes, 64 << 20);
    let staging = l.kubelet_dir.join("plugins/stage").join(&id);
    std::fs::create_dir_all(&staging).unwrap();
    let stage = csi::NodeStageVolumeRequest {
        volume_id: id.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(capability(Mode::SingleNodeWriter)),
        ..Default::default()
    };
    n.node_stage_volume(stage).await.unwrap();
    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: id.clone(),
        staging_target_path: staging.display().to_string(),
    };
    n.node_unstage_volume(unstage).await.unwrap();
    c.delete_volume(delete(&id)).await.unwrap();
    assert_eq!(
        appliance.volumes(),
        vec![],
        "the delete of a volume this controller never made"
    );
    assert_eq!(appliance.stats().unauthorized, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_credentialed_create_or_delete_waits_for_the_retry() {
    let appliance = Appliance::start(&[]);
    let mut d = DriverProcess::start(appliance.driver()).unwrap();
    // CreateVolume reaches the appliance, which takes 3 s; the driver is
    // killed meanwhile.
    let (answered, csi) = killed_during(&appliance, &mut d, (3000, 500), |csi| async move {
        let mut c = csi.controller.clone();
        c.create_volume(create("pvc-in-doubt")).await.is_ok()
    })
    .await;
    assert!(!answered, "the create was answered before the kill");
    let asked = appliance.stats().requests;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        appliance.stats().requests,
        asked,
        "the restarted driver asked the appliance before the retry came"
    );
    // The CO's retry carries the token: the create is finished with it.
    let v = csi
        .controller
        .clone()
        .create_volume(create("pvc-in-doubt"))
        .await
        .unwrap()
        .into_inner();
    let id = v.volume.unwrap().volume_id;
    until("the slow create is done", || appliance.volumes().len() == 1).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let held: Vec<_> = appliance.volumes().into_iter().map(|v| v.id).collect();
    assert_eq!(held, vec![id.clone()], "exactly one volume for the name");
    // The same for DeleteVolume.
    let gone = id.clone();
    let (answered, csi) = killed_during(&appliance, &mut d, (3000, 500), |csi| async move {
        let mut c = csi.controller.clone();
        c.delete_volume(delete(&gone)).await.is_ok()
    })
    .await;
    assert!(!answered, "the delete was answered before the kill");
    csi.controller
        .clone()
        .delete_volume(delete(&id))
        .await
        .unwrap();
    until("the slow delete is done", || appliance.volumes().is_empty()).await;
    let stats = appliance.stats();
    eprintln!("appliance: {stats:?}");
    assert_eq!(
        stats.unauthorized, 0,
        "a call reached the appliance without its token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_processs_late_create_is_fenced_and_leaves_no_orphan() {
    let appliance = Appliance::start(&[]);
    let mut d = DriverProcess::start(appliance.driver()).unwrap();
    // The create reaches the appliance and waits there 4 s: long enough
    // for the next process to create, and the CO to delete, first.
    let (_, csi) = killed_during(&appliance, &mut d, (4000, 300), |csi| async move {
        let mut c = csi.controller.clone();
        c.create_volume(create("pvc-late")).await.is_ok()
    })
    .await;
    let mut c = csi.controller.clone();
    let v = c
        .create_volume(create("pvc-late"))
        .await
        .unwrap()
        .into_inner();
    let id = v.volume.unwrap().volume_id;
    c.delete_volume(delete(&id)).await.unwrap();
    assert_eq!(appliance.volumes(), vec![]);
    until("the killed process's create is refused", || {
        appliance.stats().fenced == 1
    })
    .await;
    assert_eq!(
        appliance.volumes(),
        vec![],
        "the late create left an orphan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_node_mode_is_refused_before_the_appliance_is_asked() {
    let appliance = Appliance::start(&[]);
    let d = DriverProcess::start(appliance.driver()).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let asked = appliance.stats().requests;
    let mut req = create("pvc-shared");
    req.volume_capabilities = vec![capability(Mode::MultiNodeMultiWriter)];
    let e = csi.controller.clone().create_volume(req).await.unwrap_err();
    let e = Error::call("CreateVolume", &e);
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    assert_eq!(appliance.stats().requests, asked, "the appliance was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appliance_answering_a_short_expand_is_internal_naming_the_backend() {
    let appliance = Appliance::start(&[]);
    let d = DriverProcess::start(appliance.driver()).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let mut c = csi.controller.clone();
    let v = c
        .create_volume(create("pvc-grows"))
        .await
        .unwrap()
        .into_inner();
    let id = v.volume.unwrap().volume_id;
    appliance.faults(Faults {
        short_expand: true,
        ..Faults::default()
    });
    let e = c
        .controller_expand_volume(expand(&id, 64 << 20))
        .await
        .unwrap_err();
    let e = Error::call("ControllerExpandVolume", &e);
    assert_eq!(e.code(), Some(Code::Internal), "{e}");
    assert!(e.to_string().contains("Backend::controller_expand"), "{e}");
    appliance.faults(Faults::default());
    c.delete_volume(delete(&id)).await.unwrap();
    assert_eq!(appliance.volumes(), vec![]);
}
