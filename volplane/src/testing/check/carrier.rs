//! Carrying out the checker's effects: calls as tasks (over the socket, or
//! to an in-process pump), the node's side (directories, mounts, data) at
//! once.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use volplane_core::check::machine::{Checker, Effect, Input, MOST_LISTED};
use volplane_core::check::{Answer, NodeSeen, PathSeen, device_id, source_id};
use volplane_core::driver::Request;
use volplane_core::machine::Carry;
use volplane_core::machine::EffectFailed;
use volplane_core::mountinfo;

use volplane_proto::client::CsiClient;

use super::{Client, Restarter};

/// Carries out the checker's effects: calls as tasks, the node's side at once.
pub(super) struct Carrier {
    pub(super) client: Caller,
    pub(super) restarter: Option<Arc<tokio::sync::Mutex<Restarter>>>,
    /// Calls and restarts in flight; a restart brings a new client.
    pub(super) tasks: JoinSet<(Input, Option<Client>)>,
    pub(super) kubelet_dir: PathBuf,
    pub(super) timeout: Duration,
}

/// How the checker reaches the driver: over its socket, or in this
/// process through its gRPC services (a fuzz target): the same messages,
/// the same validation at the wire, no transport.
#[derive(Debug, Clone)]
pub(super) enum Caller {
    /// A gRPC client on the driver's socket.
    Socket(Client),
    /// A gRPC client on the driver's services, in this process.
    InProcess(CsiClient<tonic::service::Routes>),
}

impl Caller {
    async fn call(&mut self, request: Request, timeout: Duration) -> Answer {
        let exchange = match self {
            Caller::Socket(client) => {
                tokio::time::timeout(timeout, client.exchange(&request)).await
            }
            Caller::InProcess(client) => {
                tokio::time::timeout(timeout, client.exchange(&request)).await
            }
        };
        match exchange {
            Err(_) => Answer::Lost(format!("no answer within {} s", timeout.as_secs())),
            Ok(Err(status)) => Answer::refused(&status),
            Ok(Ok(Err(malformed))) => Answer::Malformed(malformed.message),
            Ok(Ok(Ok(response))) => Answer::Reply(response),
        }
    }
}

impl Carry<Checker> for Carrier {
    fn carry(
        &mut self,
        _: &Checker,
        _: u64,
        effect: Effect,
        done: &mut std::collections::VecDeque<Input>,
    ) {
        match effect {
            Effect::Call { op, request } => {
                let mut client = self.client.clone();
                let timeout = self.timeout;
                self.tasks.spawn(async move {
                    let answer = client.call(request, timeout).await;
                    (Input::Answered { op, answer }, None)
                });
            }
            Effect::MakeDir { op, path } => {
                let result = std::fs::create_dir_all(&path)
                    .map_err(|e| EffectFailed(format!("{path}: {e}")));
                done.push_back(Input::Made { op, result });
            }
            Effect::Look {
                op,
                paths,
                under,
                outside,
                storage,
            } => {
                let mut seen = look(&self.kubelet_dir, &paths, &under, outside);
                seen.stored = stored(&storage);
                done.push_back(Input::Seen { op, seen });
            }
            Effect::Data {
                op,
                write,
                read,
                token,
            } => {
                let answer = data(Path::new(&write), Path::new(&read), &token);
                done.push_back(Input::Answered { op, answer });
            }
            Effect::Restart { op, after_micros } => {
                let Some(restarter) = self.restarter.clone() else {
                    let why = "this check has no command to restart the driver with (--restart)";
                    let answer = Answer::Lost(why.to_string());
                    done.push_back(Input::Answered { op, answer });
                    return;
                };
                // Kill while the group's calls are in flight, or just after
                // (the checker says when).
                let delay = Duration::from_micros(after_micros);
                self.tasks.spawn(async move {
                    match restarter.lock().await.restart(delay).await {
                        Ok(client) => (
                            Input::Answered {
                                op,
                                answer: Answer::Restarted,
                            },
                            Some(client),
                        ),
                        Err(e) => (
                            Input::Answered {
                                op,
                                answer: Answer::Lost(e.to_string()),
                            },
                            None,
                        ),
                    }
                });
            }
            Effect::Unmount { op, mounts } => {
                let result = unmount_beneath(&self.kubelet_dir, &mounts).map_err(EffectFailed);
                done.push_back(Input::Made { op, result });
            }
            Effect::Tidy { op, dirs } => {
                for d in dirs {
                    // Only empty directories: never anything the driver left.
                    let _ = std::fs::remove_dir(&d);
                }
                done.push_back(Input::Made { op, result: Ok(()) });
            }
        }
    }
}

/// Unmounts each of `mounts` (mount points the kernel listed, deepest
/// first) through the host's own unmount: resolved beneath `kubelet_dir`
/// by file descriptor, through no symbolic link at any component, so a
/// path a driver swapped for a link leads nowhere outside. `Err` names
/// those that would not go (the run's trace says what was left).
fn unmount_beneath(kubelet_dir: &Path, mounts: &[String]) -> Result<(), String> {
    let host = volplane_host::Host::new([kubelet_dir])
        .map_err(|e| format!("cannot work beneath {}: {e}", kubelet_dir.display()))?;
    let stuck: Vec<String> = mounts
        .iter()
        .filter_map(|m| host.unmount(m, None).err().map(|e| format!("{m}: {e}")))
        .collect();
    if stuck.is_empty() {
        Ok(())
    } else {
        Err(format!("could not unmount {}", stuck.join(", ")))
    }
}

/// The entries of the storage directories `dirs`, each as `dir/name`,
/// one past the most the checker judges at most (a directory that cannot
/// be read now holds nothing: the check made sure it could at the start).
fn stored(dirs: &[String]) -> std::collections::BTreeSet<String> {
    let mut entries = std::collections::BTreeSet::new();
    for dir in dirs {
        let Ok(read) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in read.flatten() {
            if entries.len() > MOST_LISTED {
                return entries;
            }
            let name = entry.file_name();
            entries.insert(format!("{dir}/{}", name.to_string_lossy()));
        }
    }
    entries
}

/// Reads the mounts and the paths asked about.
fn look(kubelet_dir: &Path, paths: &[String], under: &[String], outside: bool) -> NodeSeen {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounts = mountinfo::parse(&text).unwrap_or_default();
    let mut seen = NodeSeen::default();
    for p in paths {
        let meta = std::fs::symlink_metadata(p);
        let mount = mountinfo::find_mount(&mounts, p);
        seen.paths.insert(
            p.clone(),
            PathSeen {
                exists: meta.is_ok(),
                mounted: mount.map(|m| m.read_only()),
                block_device: meta.is_ok_and(|m| m.file_type().is_block_device()),
            },
        );
        if let Some(m) = mount {
            seen.sources.insert(p.clone(), source_ids(m));
        }
    }
    let kubelet = format!("{}/", kubelet_dir.display());
    for m in &mounts {
        let point = &m.mount_point;
        if outside && !point.starts_with(&kubelet) && *point != kubelet.trim_end_matches('/') {
            seen.outside.insert(point.clone());
            seen.sources.insert(point.clone(), source_ids(m));
        }
        if under.iter().any(|u| point.starts_with(u.as_str())) {
            seen.under.insert(point.clone());
        }
    }
    seen.left = entries_starting(under);
    if outside {
        seen.loops = loop_devices();
    }
    seen
}

/// What `m` mounts: its filesystem and the directory of it, and the
/// block device it is on or is the node of (a raw block target binds a
/// device node from devtmpfs).
fn source_ids(m: &mountinfo::MountEntry) -> std::collections::BTreeSet<String> {
    let mut ids = std::collections::BTreeSet::from([source_id(m.major, m.minor, &m.root)]);
    if m.fs_type == "devtmpfs" && m.root != "/" {
        ids.insert(device_id(&format!("/dev{}", m.root)));
    } else if m.major != 0
        && let Ok(device) = std::fs::read_link(format!("/sys/dev/block/{}:{}", m.major, m.minor))
        && let Some(name) = device.file_name()
    {
        ids.insert(device_id(&format!("/dev/{}", name.to_string_lossy())));
    }
    ids
}

/// `Ok` when `path` is a directory itself, not a link to one.
fn real_dir(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_dir() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{} is not a directory (a link, a file or a device): the check writes only into a real directory",
            path.display()
        )))
    }
}

/// What exists under each `dir/name-prefix` of `under`: the entries of
/// `dir` whose names start with the prefix.
fn entries_starting(under: &[String]) -> std::collections::BTreeSet<String> {
    let mut left = std::collections::BTreeSet::new();
    for u in under {
        let Some((dir, prefix)) = u.rsplit_once('/') else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                left.insert(e.path().display().to_string());
            }
        }
    }
    left
}

/// The loop devices attached, as `/dev/loopN → backing file`.
fn loop_devices() -> std::collections::BTreeSet<String> {
    let mut loops = std::collections::BTreeSet::new();
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return loops;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        if let Ok(file) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
            loops.insert(format!("/dev/{name} → {}", file.trim()));
        }
    }
    loops
}

/// Writes `token` into a file of that name through `write`, reads it
/// through `read`, and removes it. The targets are the driver's work: a
/// target that is a symbolic link (to anywhere on the host) is not written
/// through nor read, and the file is opened without following links.
fn data(write: &Path, read: &Path, token: &str) -> Answer {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let wrote = (|| {
        real_dir(write)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nofollow)
            .open(write.join(token))?;
        f.write_all(token.as_bytes())?;
        f.sync_all()
    })()
    .map_err(|e| EffectFailed(e.to_string()));
    let read_back = (|| {
        real_dir(read)?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nofollow)
            .open(read.join(token))?;
        let mut s = String::new();
        f.take(4096).read_to_string(&mut s)?;
        Ok::<_, std::io::Error>(s)
    })();
    let read_back = match read_back {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EffectFailed(e.to_string())),
    };
    if wrote.is_ok() {
        let _ = std::fs::remove_file(write.join(token));
    }
    Answer::Data {
        wrote,
        read: read_back,
        token: token.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that leaves a target as a link to somewhere else on the
    /// host gets nothing written there.
    #[test]
    fn a_target_that_is_a_link_is_neither_written_nor_read_through() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        let target = root.path().join("target");
        let other = root.path().join("other");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
        let Answer::Data { wrote, read, .. } = data(&target, &other, "token") else {
            panic!("a data answer");
        };
        assert!(wrote.is_err(), "{wrote:?}");
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
        assert_eq!(read, Ok(None));
        // Read through a link: refused too.
        let Answer::Data { wrote, read, .. } = data(&other, &target, "token") else {
            panic!("a data answer");
        };
        assert!(wrote.is_ok());
        assert!(read.is_err(), "{read:?}");
        // Between two real directories: written and read back.
        let Answer::Data { wrote, read, .. } = data(&other, &other, "token") else {
            panic!("a data answer");
        };
        assert_eq!((wrote, read), (Ok(()), Ok(Some("token".to_string()))));
    }

    /// The sweep after a run unmounts only beneath the kubelet directory:
    /// a mount point reached through a link a driver left there, or named
    /// outside, stays mounted.
    #[test]
    fn the_sweep_unmounts_nothing_through_a_link_or_outside() {
        if !crate::testing::process::may_mount(
            "the_sweep_unmounts_nothing_through_a_link_or_outside",
        ) {
            return;
        }
        use rustix::mount::{MountFlags, UnmountFlags, mount, unmount};
        let root = tempfile::tempdir().unwrap();
        let kubelet = root.path().join("kubelet");
        let outside = root.path().join("outside");
        let inside = kubelet.join("staging");
        for d in [&kubelet, &outside, &inside] {
            std::fs::create_dir_all(d).unwrap();
        }
        for d in [&outside, &inside] {
            mount("tmpfs", d.as_path(), "tmpfs", MountFlags::empty(), None).unwrap();
        }
        std::os::unix::fs::symlink(root.path(), kubelet.join("link")).unwrap();
        let mounted = |p: &Path| {
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .any(|l| l.split(' ').nth(4) == Some(&*p.display().to_string()))
        };
        let named = |p: &Path| p.display().to_string();
        let through_link = named(&kubelet.join("link/outside"));
        let result = unmount_beneath(&kubelet, &[through_link, named(&outside)]);
        assert!(result.is_err(), "{result:?}");
        assert!(
            mounted(&outside),
            "a mount outside the kubelet directory went"
        );
        // Its own: unmounted.
        assert_eq!(unmount_beneath(&kubelet, &[named(&inside)]), Ok(()));
        assert!(!mounted(&inside));
        unmount(outside.as_path(), UnmountFlags::DETACH).unwrap();
    }
}
