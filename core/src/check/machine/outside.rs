//! Mounts outside the kubelet directory. A change there is the driver's
//! only when it involves the driver's own objects: a mount of what the
//! driver mounted at a staging or target path of the run, or of a loop
//! device attached since the run began (a mount appearing or going). Any
//! other change is the host's — on a shared machine other tenants mount
//! and unmount too — and is recorded for the report, not judged.

use std::collections::{BTreeMap, BTreeSet};

use super::Checker;
use crate::check::oracle::Breach;
use crate::check::rules::Rule;
use crate::check::world::{NodeSeen, device_id, is_device_id, loop_device};

/// The most host changes an outcome (and a check's report) keeps: the
/// report shows examples.
pub const MOST_FOREIGN: usize = 10;

/// The changes outside between two looks, by whose they are.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Mount points of the driver's objects that appeared (`new …`) or
    /// went (`gone …`).
    pub driver: Vec<String>,
    /// The same, of anything else.
    pub host: Vec<String>,
}

/// Sorts what changed outside between `before` (each mount point with
/// its source ids) and `seen` into the driver's and the host's; `mine`
/// holds the source ids of the driver's objects.
pub fn attribute(
    before: &BTreeMap<String, BTreeSet<String>>,
    seen: &NodeSeen,
    mine: &BTreeSet<String>,
) -> Changes {
    let none = BTreeSet::new();
    let ours = |ids: &BTreeSet<String>| !ids.is_disjoint(mine);
    let mut changes = Changes::default();
    for point in seen.outside.iter().filter(|p| !before.contains_key(*p)) {
        let ids = seen.sources.get(point).unwrap_or(&none);
        let to = if ours(ids) {
            &mut changes.driver
        } else {
            &mut changes.host
        };
        to.push(format!("new {point}"));
    }
    for (point, ids) in before.iter().filter(|(p, _)| !seen.outside.contains(*p)) {
        let to = if ours(ids) {
            &mut changes.driver
        } else {
            &mut changes.host
        };
        to.push(format!("gone {point}"));
    }
    changes
}

/// The mounts outside in `seen`, each with its source ids.
pub fn outside_of(seen: &NodeSeen) -> BTreeMap<String, BTreeSet<String>> {
    seen.outside
        .iter()
        .map(|p| (p.clone(), seen.sources.get(p).cloned().unwrap_or_default()))
        .collect()
}

/// The source ids of the driver's objects `seen` shows: the filesystems
/// (and directories of them) mounted at the run's staging and target
/// paths, and the loop devices attached since the run began (not in
/// `loops_before`). Not the devices under the mounts at the paths: a
/// directory volume lies on the host's own disk, which others mount too.
pub fn driver_sources(seen: &NodeSeen, loops_before: &BTreeSet<String>) -> BTreeSet<String> {
    let at_paths = seen
        .paths
        .keys()
        .filter_map(|path| seen.sources.get(path))
        .flatten()
        .filter(|id| !is_device_id(id))
        .cloned();
    let loops = seen
        .loops
        .difference(loops_before)
        .map(|entry| device_id(loop_device(entry)));
    at_paths.chain(loops).collect()
}

impl Checker {
    /// The driver's mounts outside the kubelet directory that changed
    /// since the last look; the host's changes are kept for the report.
    pub(super) fn outside_changed(&mut self, seen: &NodeSeen) -> Option<Breach> {
        if !self.config.watch_outside {
            return None;
        }
        self.mine.extend(driver_sources(seen, &self.loops));
        self.outcome.tally.checked(Rule::NothingOutside);
        let changes = attribute(&self.outside, seen, &self.mine);
        for change in changes.host {
            if self.outcome.foreign.len() < MOST_FOREIGN {
                self.outcome.foreign.insert(change);
            }
        }
        self.outside = outside_of(seen);
        if changes.driver.is_empty() {
            return None;
        }
        Some(Breach {
            rule: Rule::NothingOutside,
            detail: format!(
                "mounts of the driver's volumes outside the kubelet directory changed: {}",
                changes.driver.join(", ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::world::source_id;

    fn seen(outside: &[(&str, &[&str])], at_target: &[&str]) -> NodeSeen {
        let mut s = NodeSeen::default();
        for (point, ids) in outside {
            s.outside.insert(point.to_string());
            s.sources.insert(
                point.to_string(),
                ids.iter().map(|i| i.to_string()).collect(),
            );
        }
        s.sources.insert(
            "/k/target".into(),
            at_target.iter().map(|i| i.to_string()).collect(),
        );
        s
    }

    #[test]
    fn the_drivers_sources_are_what_its_paths_mount_and_the_loops_attached_in_the_run() {
        let mut s = seen(
            &[("/elsewhere", &["253:1 /x"])],
            &["253:1 /vol", "device /dev/vda1"],
        );
        s.paths.insert(
            "/k/target".into(),
            crate::check::world::PathSeen {
                exists: true,
                mounted: Some(false),
                block_device: false,
            },
        );
        s.loops = [
            "/dev/loop0 → /old".to_string(),
            "/dev/loop3 → /v.img".into(),
        ]
        .into();
        let before: BTreeSet<String> = ["/dev/loop0 → /old".to_string()].into();
        let mine = driver_sources(&s, &before);
        assert_eq!(
            mine,
            ["253:1 /vol".to_string(), "device /dev/loop3".into()].into(),
            "not the host disk under a directory volume, nor a mount outside, nor an older loop"
        );
    }

    #[test]
    fn a_mount_outside_is_the_drivers_only_when_it_shows_the_drivers_objects() {
        let volume = source_id(253, 1, "/var/lib/driver/volumes/vol-1");
        let loop_fs = source_id(7, 3, "/");
        let mine: BTreeSet<String> = [volume.clone(), device_id("/dev/loop3")].into();
        let before = outside_of(&seen(&[("/host/busy", &["0:40 /"])], &[]));
        let now = seen(
            &[
                ("/elsewhere/mnt", &[volume.as_str()]),
                ("/var/tmp/other", &["0:41 /"]),
                ("/mnt/on-loop", &[loop_fs.as_str(), "device /dev/loop3"]),
                ("/mnt/host-disk", &["253:1 /srv", "device /dev/vda1"]),
            ],
            &[volume.as_str()],
        );
        let changes = attribute(&before, &now, &mine);
        assert_eq!(
            changes.driver,
            vec!["new /elsewhere/mnt".to_string(), "new /mnt/on-loop".into()]
        );
        assert_eq!(
            changes.host,
            vec![
                "new /mnt/host-disk".to_string(),
                "new /var/tmp/other".into(),
                "gone /host/busy".into(),
            ]
        );
        // A mount of the driver's volume going away is the driver's.
        let gone = attribute(&outside_of(&now), &NodeSeen::default(), &mine);
        assert_eq!(gone.driver.len(), 2, "{gone:?}");
        assert_eq!(gone.host.len(), 2, "{gone:?}");
    }
}
