//! The bench's phases, generic over the client transport (tokio's or smol's).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use volplane_proto::csi;

use super::measure::{Csi, Figures, Transport, create_delete, measure, mount_capability};
use super::{BenchArgs, BenchError, Spawner};

fn rpc_err(rpc: &'static str) -> impl Fn(tonic::Status) -> BenchError {
    move |s| BenchError::Rpc {
        rpc,
        code: s.code(),
        message: s.message().to_string(),
    }
}

/// What the bench learned about the driver.
struct Driver<T> {
    csi: Csi<T>,
    name: String,
    node_id: String,
    stages: bool,
    publishes: bool,
}

async fn discover<T: Transport>(csi: Csi<T>) -> Result<Driver<T>, BenchError> {
    use csi::controller_service_capability::rpc::Type as C;
    use csi::node_service_capability::rpc::Type as N;
    let (mut identity, mut controller, mut node) = (
        csi.identity.clone(),
        csi.controller.clone(),
        csi.node.clone(),
    );
    let info = identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .map_err(rpc_err("GetPluginInfo"))?
        .into_inner();
    let node_id = node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .map_err(rpc_err("NodeGetInfo"))?
        .into_inner()
        .node_id;
    let stages = node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .map_err(rpc_err("NodeGetCapabilities"))?
        .into_inner()
        .capabilities
        .iter()
        .any(|c| matches!(&c.r#type, Some(csi::node_service_capability::Type::Rpc(r)) if r.r#type == N::StageUnstageVolume as i32));
    let publishes = controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .map_err(rpc_err("ControllerGetCapabilities"))?
        .into_inner()
        .capabilities
        .iter()
        .any(|c| matches!(&c.r#type, Some(csi::controller_service_capability::Type::Rpc(r)) if r.r#type == C::PublishUnpublishVolume as i32));
    println!(
        "driver {} {} on node {node_id}",
        info.name, info.vendor_version
    );
    Ok(Driver {
        csi,
        name: info.name,
        node_id,
        stages,
        publishes,
    })
}

/// A bench volume: created, published to this node, staged.
struct BenchVolume {
    volume_id: String,
    volume_context: std::collections::HashMap<String, String>,
    publish_context: std::collections::HashMap<String, String>,
    staging: String,
    target: String,
}

impl BenchVolume {
    fn publish_request(&self) -> csi::NodePublishVolumeRequest {
        csi::NodePublishVolumeRequest {
            volume_id: self.volume_id.clone(),
            publish_context: self.publish_context.clone(),
            staging_target_path: self.staging.clone(),
            target_path: self.target.clone(),
            volume_capability: Some(mount_capability()),
            volume_context: self.volume_context.clone(),
            ..Default::default()
        }
    }
}

/// Creates, publishes and stages a volume as kubelet would, with kubelet's paths.
async fn prepare(
    d: &Driver<impl Transport>,
    args: &BenchArgs,
    parameters: &std::collections::HashMap<String, String>,
    name: &str,
) -> Result<BenchVolume, BenchError> {
    let (mut controller, mut node) = (d.csi.controller.clone(), d.csi.node.clone());
    let volume = controller
        .create_volume(csi::CreateVolumeRequest {
            name: name.to_string(),
            volume_capabilities: vec![mount_capability()],
            parameters: parameters.clone(),
            ..Default::default()
        })
        .await
        .map_err(rpc_err("CreateVolume"))?
        .into_inner()
        .volume
        .ok_or_else(|| BenchError::Usage("CreateVolume returned no volume".into()))?;
    let mut publish_context = Default::default();
    if d.publishes {
        publish_context = controller
            .controller_publish_volume(csi::ControllerPublishVolumeRequest {
                volume_id: volume.volume_id.clone(),
                node_id: d.node_id.clone(),
                volume_capability: Some(mount_capability()),
                volume_context: volume.volume_context.clone(),
                ..Default::default()
            })
            .await
            .map_err(rpc_err("ControllerPublishVolume"))?
            .into_inner()
            .publish_context;
    }
    let mut staging = String::new();
    if d.stages {
        let p = args
            .kubelet_dir
            .join("plugins/kubernetes.io/csi")
            .join(&d.name)
            .join(hex::encode(Sha256::digest(volume.volume_id.as_bytes())))
            .join("globalmount");
        let _ = std::fs::create_dir_all(&p);
        staging = p.display().to_string();
        node.node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: volume.volume_id.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: staging.clone(),
            volume_capability: Some(mount_capability()),
            volume_context: volume.volume_context.clone(),
            ..Default::default()
        })
        .await
        .map_err(rpc_err("NodeStageVolume"))?;
    }
    let pod = args
        .kubelet_dir
        .join("pods")
        .join(name.rsplit_once('-').map_or(name, |(t, _)| t))
        .join(name);
    let dir = pod.join(format!("volumes/kubernetes.io~csi/{name}"));
    let _ = std::fs::create_dir_all(&dir);
    Ok(BenchVolume {
        volume_id: volume.volume_id,
        volume_context: volume.volume_context,
        publish_context,
        staging,
        target: dir.join("mount").display().to_string(),
    })
}

/// Undoes [`prepare`]: unpublish (in case a cycle failed half-way), unstage,
/// controller-unpublish, delete.
async fn release(d: &Driver<impl Transport>, v: &BenchVolume) -> Result<(), BenchError> {
    let (mut controller, mut node) = (d.csi.controller.clone(), d.csi.node.clone());
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        target_path: v.target.clone(),
    })
    .await
    .map_err(rpc_err("NodeUnpublishVolume"))?;
    if d.stages {
        node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: v.volume_id.clone(),
            staging_target_path: v.staging.clone(),
        })
        .await
        .map_err(rpc_err("NodeUnstageVolume"))?;
        if let Some(dir) = std::path::Path::new(&v.staging).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    if d.publishes {
        controller
            .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
                volume_id: v.volume_id.clone(),
                node_id: d.node_id.clone(),
                ..Default::default()
            })
            .await
            .map_err(rpc_err("ControllerUnpublishVolume"))?;
    }
    controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            ..Default::default()
        })
        .await
        .map_err(rpc_err("DeleteVolume"))?;
    Ok(())
}

/// The figures of one endpoint: (phase, figures at each client count).
pub type Report = Vec<(&'static str, Vec<Figures>)>;

/// Measures one endpoint.
async fn bench_one<T: Transport>(
    args: &BenchArgs,
    endpoint: &str,
    csi: Csi<T>,
    spawn: &Spawner,
    parameters: &HashMap<String, String>,
) -> Result<Report, BenchError> {
    let d = discover(csi).await?;
    let tag = format!("volplane-bench-{}", std::process::id());
    let mut report: Report = Vec::new();

    let mut probe = Vec::new();
    for &c in &args.clients {
        let identity = d.csi.identity.clone();
        let f = measure(spawn, c, args.seconds, move |_, _| {
            let mut identity = identity.clone();
            async move { identity.probe(csi::ProbeRequest {}).await.map(|_| ()) }
        })
        .await;
        println!("  Probe                      {f}");
        probe.push(f);
    }
    report.push(("Probe", probe));

    // A volume per client (CSI lets a driver refuse concurrent operations on
    // one volume), each staged once and published to its client's target.
    let max = args.clients.iter().copied().max().unwrap_or(1);
    let mut volumes = Vec::new();
    for i in 0..max {
        volumes.push(prepare(&d, args, parameters, &format!("{tag}-{i}")).await?);
    }
    let volumes = Arc::new(volumes);
    let mut cycles = Vec::new();
    for &c in &args.clients {
        let (node, volumes) = (d.csi.node.clone(), volumes.clone());
        let f = measure(spawn, c, args.seconds, move |client, _| {
            let mut node = node.clone();
            let v = &volumes[client];
            let publish = v.publish_request();
            let unpublish = csi::NodeUnpublishVolumeRequest {
                volume_id: v.volume_id.clone(),
                target_path: v.target.clone(),
            };
            async move {
                node.node_publish_volume(publish).await?;
                node.node_unpublish_volume(unpublish).await.map(|_| ())
            }
        })
        .await;
        println!("  NodePublish+NodeUnpublish  {f}");
        cycles.push(f);
    }
    // The same cycle's syscalls in a plain loop, for the ratio; and with a
    // synced write per call, on the state's disk when it is known.
    let driver = cycles.first().map_or(Duration::ZERO, |f| f.median);
    let durable_dir = args.state_dir.as_deref().unwrap_or(&args.kubelet_dir);
    for (what, durable) in [
        (
            "syscall floor (mkdir, bind mount, umount, rmdir in a loop)",
            None,
        ),
        (
            "durable floor (the same, with a 4 KiB write + fdatasync per call)",
            Some(durable_dir),
        ),
    ] {
        match super::floor::publish_floor(&args.kubelet_dir, durable, args.seconds.min(2.0)) {
            Ok(floor) => println!(
                "  {what}: median {:.3} ms; the driver's cycle at one client is {:.1}× it",
                floor.as_secs_f64() * 1e3,
                driver.as_secs_f64() / floor.as_secs_f64().max(1e-9)
            ),
            Err(why) => println!("  {what}: not measured ({why})"),
        }
    }
    report.push(("NodePublish+NodeUnpublish", cycles));
    for v in volumes.iter() {
        release(&d, v).await?;
    }
    let _ = std::fs::remove_dir_all(args.kubelet_dir.join("pods").join(&tag));

    let mut creates = Vec::new();
    for &c in &args.clients {
        let f = create_delete(spawn, &d.csi, c, args.seconds, parameters, &tag).await;
        println!("  CreateVolume+DeleteVolume  {f}");
        creates.push(f);
    }
    let driver = creates.first().map_or(Duration::ZERO, |f| f.median);
    let what = "durable floor (mkdir + rmdir, each with a 4 KiB write + fdatasync)";
    match super::floor::create_floor(&args.kubelet_dir, durable_dir, args.seconds.min(2.0)) {
        Ok(floor) => println!(
            "  {what}: median {:.3} ms; the driver's cycle at one client is {:.1}× it",
            floor.as_secs_f64() * 1e3,
            driver.as_secs_f64() / floor.as_secs_f64().max(1e-9)
        ),
        Err(why) => println!("  {what}: not measured ({why})"),
    }
    report.push(("CreateVolume+DeleteVolume", creates));
    if !args.volumes.is_empty() {
        println!("  scale (one client):");
        super::scale::run(args, endpoint, &d.csi, spawn, parameters, &tag).await?;
    }
    Ok(report)
}

/// Measures every endpoint in turn, then prints them side by side.
pub async fn bench_all<T: Transport>(
    args: &BenchArgs,
    targets: Vec<(String, Csi<T>)>,
    spawn: Spawner,
) -> Result<(), BenchError> {
    let parameters: HashMap<String, String> = args
        .parameters
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| BenchError::Usage(format!("--parameter {p:?} is not key=value")))
        })
        .collect::<Result<_, _>>()?;
    let mut reports = Vec::new();
    for (endpoint, csi) in targets {
        println!("volplane bench: {endpoint}");
        let report = bench_one(args, &endpoint, csi, &spawn, &parameters).await?;
        reports.push((endpoint, report));
    }
    if reports.len() > 1 {
        println!("\nside by side (ops/s; median / p99 ms):");
        let (_, first) = &reports[0];
        for (phase_index, (phase, figures)) in first.iter().enumerate() {
            for (client_index, f) in figures.iter().enumerate() {
                let mut line = format!("  {phase:<26} {:>3} client(s)", f.clients);
                for (_, r) in &reports {
                    let g = &r[phase_index].1[client_index];
                    line.push_str(&format!(
                        "  | {:>9.0}/s {:>7.3} / {:>7.3}",
                        g.per_second,
                        g.median.as_secs_f64() * 1e3,
                        g.p99.as_secs_f64() * 1e3
                    ));
                }
                println!("{line}");
            }
        }
        let names: Vec<&str> = reports.iter().map(|(e, _)| e.as_str()).collect();
        println!("  columns: {}", names.join("  |  "));
        println!("\nthe first column's ops/s over each other's:");
        for (phase_index, (phase, figures)) in first.iter().enumerate() {
            for (client_index, f) in figures.iter().enumerate() {
                let mut line = format!("  {phase:<26} {:>3} client(s)", f.clients);
                for (_, r) in &reports[1..] {
                    let g = &r[phase_index].1[client_index];
                    line.push_str(&format!(
                        "  | {:>6.2}×",
                        f.per_second / g.per_second.max(1e-9)
                    ));
                }
                println!("{line}");
            }
        }
    }
    Ok(())
}
