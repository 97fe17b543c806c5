//! Starting on a dirty root and `lab down`: stop what runs, unmount what is
//! mounted under the root (deepest first), detach loop devices backed by the
//! root's images, remove the root. Works from the files alone, so it also
//! cleans up after a lab that was killed. Every path it touches lies under
//! the root (volplane-host confines it).

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use volplane_host::Host;

use crate::processes::signal;
use crate::{LabError, Layout};

/// The pid file of the process running the lab.
pub fn lab_pid_file(layout: &Layout) -> std::path::PathBuf {
    layout.root.join("lab.pid")
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| !r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
}

fn pids(layout: &Layout) -> Vec<(u32, String)> {
    std::fs::read_to_string(layout.pids_file())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pid, role) = l.split_once(' ')?;
            Some((pid.parse().ok()?, role.to_string()))
        })
        .collect()
}

fn daemon_pid(layout: &Layout) -> Option<u32> {
    std::fs::read_to_string(lab_pid_file(layout))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Before `lab up`: refuses a root where a lab still runs; cleans up what a
/// dead one left; creates the root. Returns what it did.
pub fn prepare(layout: &Layout) -> Result<Vec<String>, LabError> {
    let root = &layout.root;
    if let Some(pid) = daemon_pid(layout).filter(|p| alive(*p)) {
        return Err(LabError::Setup(format!(
            "a lab is already running at {} (pid {pid}); use it, or stop it with `volplane lab \
             down --root {}`",
            root.display(),
            root.display()
        )));
    }
    let mut said = Vec::new();
    let dirty = std::fs::read_dir(root).is_ok_and(|mut d| d.next().is_some());
    if dirty {
        said.push(format!(
            "{} holds what an earlier lab left behind; cleaning it up first",
            root.display()
        ));
        said.extend(down(layout));
    }
    for d in [
        root.clone(),
        layout.volumes_dir(),
        layout.root.join("nodes"),
    ] {
        std::fs::create_dir_all(&d)
            .map_err(|e| LabError::Setup(format!("cannot create {}: {e}", d.display())))?;
    }
    Ok(said)
}

/// Stops, unmounts, detaches and removes everything of the lab at
/// `layout.root`. Returns what it did, one line per thing.
pub fn down(layout: &Layout) -> Vec<String> {
    let root = &layout.root;
    let mut said = Vec::new();
    if !root.exists() {
        said.push(format!("nothing at {}", root.display()));
        return said;
    }
    if let Some(pid) = daemon_pid(layout).filter(|p| alive(*p) && *p != std::process::id()) {
        said.push(format!("stopping the lab (pid {pid})"));
        signal(pid, Signal::TERM);
        wait_gone(&[pid], Duration::from_secs(30));
    }
    let procs: Vec<(u32, String)> = pids(layout)
        .into_iter()
        .filter(|(p, _)| alive(*p))
        .collect();
    for (pid, role) in &procs {
        said.push(format!("stopping the {role} driver (pid {pid})"));
        signal(*pid, Signal::TERM);
    }
    let live: Vec<u32> = procs.iter().map(|(p, _)| *p).collect();
    if !wait_gone(&live, Duration::from_secs(10)) {
        for p in &live {
            signal(*p, Signal::KILL);
        }
        wait_gone(&live, Duration::from_secs(5));
    }
    let host = match Host::new([root]) {
        Ok(h) => h,
        Err(e) => {
            said.push(format!("cannot use {}: {e}", root.display()));
            return said;
        }
    };
    let canonical = host.roots()[0].to_path_buf();
    // Unmount deepest first, until nothing under the root is mounted.
    for _ in 0..8 {
        let mut mounts: Vec<String> = host
            .mountinfo()
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.mount_point)
            .filter(|p| Path::new(p).starts_with(&canonical) && Path::new(p) != canonical)
            .collect();
        if mounts.is_empty() {
            break;
        }
        mounts.sort_by_key(|p| std::cmp::Reverse(p.len()));
        mounts.dedup();
        for m in mounts {
            match host.unmount(&m, None) {
                Ok(()) => said.push(format!("unmounted {m}")),
                Err(e) => said.push(format!("cannot unmount {m}: {e}")),
            }
        }
    }
    if let Ok(images) = std::fs::read_dir(canonical.join("volumes")) {
        for f in images.filter_map(Result::ok).map(|e| e.path()) {
            while let Some(dev) = volplane_host::loopdev::find(&f) {
                match host.loop_detach(&f) {
                    Ok(()) => said.push(format!("detached {} ({})", dev.display(), f.display())),
                    Err(e) => {
                        said.push(format!("cannot detach {}: {e}", dev.display()));
                        break;
                    }
                }
            }
        }
    }
    let still_mounted = host
        .mountinfo()
        .unwrap_or_default()
        .into_iter()
        .any(|m| Path::new(&m.mount_point).starts_with(&canonical));
    if still_mounted {
        said.push(format!(
            "{} still has mounts under it; left in place so nothing is removed through them",
            root.display()
        ));
        return said;
    }
    match std::fs::remove_dir_all(&canonical) {
        Ok(()) => said.push(format!("removed {}", root.display())),
        Err(e) => said.push(format!("cannot remove {}: {e}", root.display())),
    }
    said
}

fn wait_gone(pids: &[u32], timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while pids.iter().any(|p| alive(*p)) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
