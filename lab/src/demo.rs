//! `volplane lab demo`: the whole story, with the example manifests kept in
//! `examples/lab/`. Each step says what Kubernetes would do, then waits until
//! the cluster did it.

use std::time::Duration;

use crate::world::World;
use crate::{Lab, LabError};

/// The StorageClasses and claims the demo applies first.
pub const STORAGE: &str = include_str!("../../examples/lab/storage.yaml");
/// The web Deployment (an RWX claim, scaled up and down).
pub const WEB: &str = include_str!("../../examples/lab/web.yaml");
/// Two pods that want one ReadWriteOnce claim.
pub const SOLO: &str = include_str!("../../examples/lab/solo.yaml");
/// A VolumeSnapshot of the shared claim.
pub const SNAPSHOT: &str = include_str!("../../examples/lab/snapshot.yaml");
/// A claim restored from that snapshot, and a pod reading it.
pub const RESTORE: &str = include_str!("../../examples/lab/restore.yaml");

const WAIT: Duration = Duration::from_secs(90);

/// Filesystem size at `path`, in bytes.
pub fn fs_size(path: &str) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_blocks * s.f_frsize)
}

fn pv_of(w: &World, claim: &str) -> String {
    w.claim(claim)
        .map(|c| c.volume_name().to_string())
        .unwrap_or_default()
}

async fn step(lab: &Lab, title: &str) {
    lab.settle(Duration::from_millis(300), Duration::from_secs(5))
        .await;
    lab.shared.say(String::new());
    lab.shared.say(format!("==> {title}"));
}

async fn scale(lab: &Lab, replicas: u32) -> Result<(), LabError> {
    let said = lab.with(|w, t| w.scale(t, "web", replicas))?;
    lab.shared.say(said);
    Ok(())
}

async fn running(lab: &Lab, pod: &str) -> Result<(), LabError> {
    lab.wait_for(&format!("pod {pod} to run"), WAIT, |w| w.running(pod))
        .await
}

async fn gone(lab: &Lab, pod: &str) -> Result<(), LabError> {
    lab.wait_for(&format!("pod {pod} to go"), WAIT, |w| w.pod(pod).is_none())
        .await
}

/// Whether this process may grow a mounted ext4 filesystem
/// (CAP_SYS_RESOURCE, bit 24 of the effective set).
pub fn can_grow_mounted() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

async fn grown(lab: &Lab) -> Result<(), LabError> {
    lab.wait_for("the claim's capacity to reach 128Mi", WAIT, |w| {
        w.claim("shared")
            .and_then(|c| c.status_capacity())
            .is_some_and(|q| q.bytes() >= 128 << 20)
    })
    .await
}

fn say_growth(lab: &Lab, target: Option<&str>, before: Option<u64>, after: Option<u64>) {
    if let (Some(t), Some(b), Some(a)) = (target, before, after) {
        lab.shared.say(format!(
            "filesystem seen by web-0 at {t}: {} MiB -> {} MiB",
            b >> 20,
            a >> 20
        ));
    }
}

/// Snapshots pvc/shared, writes more to it, restores a new claim from the
/// snapshot on the other node and shows it holds what was there when cut;
/// then deletes the restore, the claim and the snapshot.
async fn snapshot_and_restore(lab: &Lab) -> Result<(), LabError> {
    step(
        lab,
        "kubectl apply -f examples/lab/snapshot.yaml: the snapshot controller makes a content, csi-snapshotter cuts it",
    )
    .await;
    for line in lab.with(|w, t| w.apply(t, SNAPSHOT))? {
        lab.shared.say(line);
    }
    lab.wait_for("volumesnapshot/shared-snap to be ready", WAIT, |w| {
        w.volume_snapshot("shared-snap").is_some_and(|s| s.ready())
    })
    .await?;
    let row = lab.with(|w, _| {
        w.status()
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("shared-snap "))
            .map(str::to_string)
    });
    if let Some(row) = row {
        lab.shared.say(format!("kubectl get volumesnapshot: {row}"));
    }

    step(lab, "web-0 writes after the snapshot was cut").await;
    let Some(target) = lab.with(|w, _| w.targets("web-0").into_iter().next()) else {
        return Err(LabError::Setup("web-0 has no volume to write to".into()));
    };
    let later = std::path::Path::new(&target).join("later.txt");
    std::fs::write(&later, "written by pod web-0 after the snapshot\n")
        .map_err(|e| LabError::Setup(format!("write {}: {e}", later.display())))?;
    lab.shared
        .say(format!("node-a   pod web-0 wrote {}", later.display()));

    step(
        lab,
        "kubectl apply -f examples/lab/restore.yaml: pvc/restored comes from the snapshot; pod reader on node-b reads it",
    )
    .await;
    for line in lab.with(|w, t| w.apply(t, RESTORE))? {
        lab.shared.say(line);
    }
    running(lab, "reader").await?;
    let Some(restored) = lab.with(|w, _| w.targets("reader").into_iter().next()) else {
        return Err(LabError::Setup("pod reader has no volume".into()));
    };
    let restored = std::path::Path::new(&restored);
    if restored.join("later.txt").exists() || !restored.join("web-0.txt").exists() {
        return Err(LabError::Setup(format!(
            "the restored volume at {} does not hold what pvc/shared held when the snapshot was cut",
            restored.display()
        )));
    }
    lab.shared.say(format!(
        "node-b   pod reader: web-0.txt is there and later.txt is not: {} holds pvc/shared as it was when cut",
        restored.display()
    ));

    step(
        lab,
        "delete pod/reader, pvc/restored and volumesnapshot/shared-snap: the driver deletes the snapshot",
    )
    .await;
    let pv = lab.with(|w, _| pv_of(w, "restored"));
    lab.shared.say(lab.with(|w, t| w.delete(t, "pod/reader"))?);
    gone(lab, "reader").await?;
    lab.shared
        .say(lab.with(|w, t| w.delete(t, "pvc/restored"))?);
    lab.wait_for("pvc/restored and its volume to go", WAIT, |w| {
        w.claim("restored").is_none() && w.pv(&pv).is_none()
    })
    .await?;
    lab.shared
        .say(lab.with(|w, t| w.delete(t, "volumesnapshot/shared-snap"))?);
    lab.wait_for("the snapshot and its content to go", WAIT, |w| {
        w.volume_snapshot("shared-snap").is_none() && w.snapshot_contents() == 0
    })
    .await
}

/// Plays the story on a lab of at least two nodes.
pub async fn play(lab: &Lab) -> Result<(), LabError> {
    claims_bind(lab).await?;
    web_scales_up(lab).await?;
    let single = rwo_refused(lab).await?;
    let shared = web_scales_down(lab).await?;
    resize(lab, &shared).await?;
    snapshot_and_restore(lab).await?;
    protected_then_deleted(lab, &shared).await?;
    retained(lab, &single).await
}

/// The claims are provisioned and bound.
async fn claims_bind(lab: &Lab) -> Result<(), LabError> {
    step(
        lab,
        "kubectl apply -f examples/lab/storage.yaml: claims are provisioned and bound",
    )
    .await;
    for line in lab.with(|w, t| w.apply(t, STORAGE))? {
        lab.shared.say(line);
    }
    for claim in ["shared", "single"] {
        lab.wait_for(&format!("claim {claim} to bind"), WAIT, |w| {
            w.claim(claim)
                .is_some_and(|c| c.phase() == volplane_core::model::PvcPhase::Bound)
        })
        .await?;
    }

    Ok(())
}

/// web scales to 3 pods over two nodes.
async fn web_scales_up(lab: &Lab) -> Result<(), LabError> {
    step(
        lab,
        "deployment/web, 1 replica: node-a attaches, stages once and publishes",
    )
    .await;
    for line in lab.with(|w, t| w.apply(t, WEB))? {
        lab.shared.say(line);
    }
    running(lab, "web-0").await?;

    step(
        lab,
        "scale to 2: the second pod on node-a only publishes, and reads the first pod's note",
    )
    .await;
    scale(lab, 2).await?;
    running(lab, "web-1").await?;

    step(
        lab,
        "scale to 3: web-2 lands on node-b, which attaches, stages and publishes (RWX)",
    )
    .await;
    scale(lab, 3).await?;
    running(lab, "web-2").await?;

    Ok(())
}

/// The ReadWriteOnce claim refused on a second node; its volume's name.
async fn rwo_refused(lab: &Lab) -> Result<String, LabError> {
    step(
        lab,
        "two pods on two nodes want the ReadWriteOnce claim: the second is refused",
    )
    .await;
    for line in lab.with(|w, t| w.apply(t, SOLO))? {
        lab.shared.say(line);
    }
    running(lab, "solo-a").await?;
    let single = lab.with(|w, _| pv_of(w, "single"));
    lab.wait_for("the Multi-Attach event", WAIT, |w| {
        w.has_event("FailedAttachVolume", "Multi-Attach error")
    })
    .await?;
    for pod in ["solo-b", "solo-a"] {
        lab.shared
            .say(lab.with(|w, t| w.delete(t, &format!("pod/{pod}")))?);
        gone(lab, pod).await?;
    }
    lab.wait_for("the RWO volume to detach", WAIT, |w| {
        w.attached_to(&single).is_empty()
    })
    .await?;

    Ok(single)
}

/// web scales back to 1; the shared volume's name.
async fn web_scales_down(lab: &Lab) -> Result<String, LabError> {
    step(
        lab,
        "scale to 1: node-b's last pod unstages and detaches; web-1 only unpublishes",
    )
    .await;
    scale(lab, 1).await?;
    gone(lab, "web-2").await?;
    gone(lab, "web-1").await?;
    let shared = lab.with(|w, _| pv_of(w, "shared"));
    lab.wait_for("node-b to detach", WAIT, |w| {
        !w.attached_to(&shared).contains(&"node-b".to_string())
    })
    .await?;

    Ok(shared)
}

/// The shared claim grows to 128Mi, online where this machine can.
async fn resize(lab: &Lab, shared: &str) -> Result<(), LabError> {
    if can_grow_mounted() {
        step(
            lab,
            "resize pvc/shared to 128Mi: controller, then node expansion; the filesystem grows",
        )
        .await;
        let target = lab.with(|w, _| w.targets("web-0").into_iter().next());
        let before = target.as_deref().and_then(fs_size);
        lab.shared
            .say(lab.with(|w, t| w.resize(t, "shared", "128Mi"))?);
        grown(lab).await?;
        let after = target.as_deref().and_then(fs_size);
        say_growth(lab, target.as_deref(), before, after);
    } else {
        step(lab, "resize pvc/shared to 128Mi, offline: this machine lacks CAP_SYS_RESOURCE, so ext4 cannot grow while mounted").await;
        let target = lab.with(|w, _| w.targets("web-0").into_iter().next());
        let before = target.as_deref().and_then(fs_size);
        scale(lab, 0).await?;
        gone(lab, "web-0").await?;
        lab.wait_for("the shared volume to detach", WAIT, |w| {
            w.attached_to(shared).is_empty()
        })
        .await?;
        lab.shared
            .say(lab.with(|w, t| w.resize(t, "shared", "128Mi"))?);
        lab.wait_for("ControllerExpandVolume to grow the PV", WAIT, |w| {
            w.pv(shared)
                .and_then(|pv| pv.capacity())
                .is_some_and(|q| q.bytes() >= 128 << 20)
        })
        .await?;
        step(lab, "scale to 1: NodeStageVolume grows the filesystem, NodeExpandVolume completes the resize").await;
        scale(lab, 1).await?;
        running(lab, "web-0").await?;
        grown(lab).await?;
        let target = lab.with(|w, _| w.targets("web-0").into_iter().next());
        let after = target.as_deref().and_then(fs_size);
        say_growth(lab, target.as_deref(), before, after);
    }

    Ok(())
}

/// The claim in use is held Terminating, then goes with its volume.
async fn protected_then_deleted(lab: &Lab, shared: &str) -> Result<(), LabError> {
    step(
        lab,
        "delete pvc/shared while web-0 still uses it: pvc-protection keeps it Terminating",
    )
    .await;
    lab.shared.say(lab.with(|w, t| w.delete(t, "pvc/shared"))?);
    lab.wait_for("the claim to be Terminating", WAIT, |w| {
        w.claim("shared").is_some_and(|c| c.metadata.deleting())
    })
    .await?;
    let row = lab.with(|w, _| {
        w.status()
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("shared ") && l.contains("Terminating"))
            .map(str::to_string)
    });
    if let Some(row) = row {
        lab.shared.say(format!("kubectl get pvc: {row}"));
    }

    step(
        lab,
        "scale to 0: node-a unpublishes, unstages and detaches; the claim goes, and Delete removes its volume",
    )
    .await;
    scale(lab, 0).await?;
    gone(lab, "web-0").await?;
    lab.wait_for("the shared volume to detach", WAIT, |w| {
        w.attached_to(shared).is_empty()
    })
    .await?;
    lab.wait_for("the claim to go", WAIT, |w| w.claim("shared").is_none())
        .await?;
    lab.wait_for("the Delete volume to go", WAIT, |w| w.pv(shared).is_none())
        .await?;

    Ok(())
}

/// Retain leaves the other volume Released.
async fn retained(lab: &Lab, single: &str) -> Result<(), LabError> {
    step(lab, "delete pvc/single: Retain leaves its volume Released").await;
    lab.shared.say(lab.with(|w, t| w.delete(t, "pvc/single"))?);
    lab.wait_for("the Retain volume to be Released", WAIT, |w| {
        w.pv(single)
            .is_some_and(|pv| pv.phase() == volplane_core::model::PvPhase::Released)
    })
    .await?;
    step(lab, "volplane lab status").await;
    let status = lab.with(|w, _| w.status());
    for line in status.lines() {
        lab.shared.say(line.to_string());
    }
    Ok(())
}
