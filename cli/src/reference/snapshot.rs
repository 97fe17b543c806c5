//! Snapshots of the reference driver's volumes, and volumes restored or
//! cloned from them.
//!
//! A snapshot of a `block` volume is a sparse copy of its image (a reflink
//! where the filesystem shares blocks) at `<volumes-dir>/snapshots/<id>.img`;
//! of a `dir` volume, a copy of its directory tree at
//! `<volumes-dir>/snapshots/<id>/`. Beside each, `<id>.json` records its
//! source, size and creation time. It is written last, so a snapshot
//! without one was never completed, and cutting it again finishes it.
//!
//! Snapshot ids are `snap-` and 20 hex digits of SHA-256 of the
//! CreateSnapshot name. A group snapshot is its members, cut one after the
//! other (each crash-consistent on its own) and named after the group and
//! their volume; its id, `group-` and 20 hex digits, comes from its name,
//! so nothing more is kept for it. Copies of a block volume are crash-consistent:
//! every filesystem is flushed first, so what a filesystem mounted from
//! the image wrote reaches the image.

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use volplane_core::Status;
use volplane_core::driver::{
    GroupPlan, GroupSnapshot, Snapshot, SnapshotPlan, Source, Timestamp, Volume,
};
use volplane_service::{NodeHost, host_status};

use super::{Kind, Reference, context_kind};

/// The largest snapshot record read back.
pub(super) const MAX_RECORD: u64 = 4096;

/// What `<id>.json` records.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    pub(super) source_volume_id: String,
    pub(super) size_bytes: u64,
    pub(super) seconds: i64,
    pub(super) nanos: i32,
    kind: String,
}

fn snapshot_id(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    format!("snap-{}", &hex::encode(digest)[..20])
}

/// True for ids this driver makes: `snap-` and 20 lowercase hex digits.
pub(super) fn is_snapshot_id(id: &str) -> bool {
    super::is_id("snap-", id)
}

/// A snapshot record as read back from `path`.
pub(super) fn parse_record(path: &std::path::Path, bytes: &[u8]) -> volplane_host::Result<Record> {
    serde_json::from_slice(bytes).map_err(|e| {
        volplane_host::HostError::Refused(format!(
            "{} is not a snapshot record ({e}); remove it to cut the snapshot again",
            path.display()
        ))
    })
}

fn group_id(name: &str) -> String {
    let digest = Sha256::digest(format!("group:{name}").as_bytes());
    format!("group-{}", &hex::encode(digest)[..20])
}

/// The snapshot name of a group's member for `volume_id`.
fn member_name(group: &str, volume_id: &str) -> String {
    format!("group:{group}\0{volume_id}")
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Block => "block",
        Kind::Dir => "dir",
    }
}

impl Reference {
    pub(super) fn snapshots_dir(&self) -> PathBuf {
        self.volumes_dir.join("snapshots")
    }

    /// Where snapshot `id` of a volume of `kind` keeps its data.
    fn snapshot_data(&self, id: &str, kind: Kind) -> PathBuf {
        match kind {
            Kind::Block => self.snapshots_dir().join(format!("{id}.img")),
            Kind::Dir => self.snapshots_dir().join(id),
        }
    }

    pub(super) fn snapshot_record(&self, id: &str) -> PathBuf {
        self.snapshots_dir().join(format!("{id}.json"))
    }

    /// Where volume `id` of `kind` keeps its data; an id this driver did
    /// not make names no storage of it (NOT_FOUND).
    fn volume_data(&self, id: &str, kind: Kind) -> Result<PathBuf, Status> {
        if !super::is_volume_id(id) {
            return Err(Status::not_found(format!(
                "volume {id:?} was not made by this driver (its volume ids are \"vol-\" and 20 hex digits)"
            )));
        }
        Ok(match kind {
            Kind::Block => self.image(id),
            Kind::Dir => self.dir(id),
        })
    }

    /// Cuts (or finds) the snapshot `plan.name` of `plan.source`.
    pub(super) async fn cut(
        &self,
        host: &NodeHost,
        plan: &SnapshotPlan,
    ) -> Result<Snapshot, Status> {
        let id = snapshot_id(&plan.name);
        let source = &plan.source;
        let kind = context_kind(&source.volume_context);
        let from = self.volume_data(&source.volume_id, kind)?;
        let (data, record) = (self.snapshot_data(&id, kind), self.snapshot_record(&id));
        let fresh = Record {
            source_volume_id: source.volume_id.clone(),
            size_bytes: source.capacity_bytes,
            seconds: 0,
            nanos: 0,
            kind: kind_name(kind).into(),
        };
        let what = format!("snapshot {:?} of volume {}", plan.name, source.volume_id);
        let record = host
            .run(move |h| -> volplane_host::Result<Record> {
                if h.read_small(&record, MAX_RECORD)?.is_none() {
                    match kind {
                        Kind::Block => h.copy_image(&from, &data).map(|_| ()),
                        Kind::Dir => h.copy_tree(&from, &data).map(|_| ()),
                    }?;
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default();
                    let done = Record {
                        seconds: i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
                        nanos: now.subsec_nanos() as i32,
                        ..fresh
                    };
                    // Another cut of the same name may write it first: it is kept.
                    let bytes = serde_json::to_vec(&done).expect("a record serialises");
                    h.write_new(&record, &bytes)?;
                }
                let bytes = h.read_small(&record, MAX_RECORD)?.unwrap_or_default();
                parse_record(&record, &bytes)
            })
            .await
            .map_err(|e| host_status(&what, e))?;
        if record.source_volume_id != source.volume_id {
            return Err(Status::internal(format!(
                "{what}: snapshot {id} on disk is of volume {}",
                record.source_volume_id
            )));
        }
        Ok(Snapshot {
            snapshot_id: id,
            source_volume_id: record.source_volume_id,
            size_bytes: record.size_bytes,
            creation_time: Timestamp {
                seconds: record.seconds,
                nanos: record.nanos,
            },
            ready_to_use: true,
            group_snapshot_id: String::new(),
        })
    }

    /// Cuts (or finds) every member of group `plan.name`; when one fails,
    /// removes those cut and fails.
    pub(super) async fn cut_group(
        &self,
        host: &NodeHost,
        plan: &GroupPlan,
    ) -> Result<GroupSnapshot, Status> {
        let group = group_id(&plan.name);
        let mut members: Vec<Snapshot> = Vec::with_capacity(plan.sources.len());
        for volume in &plan.sources {
            let member = SnapshotPlan {
                name: member_name(&plan.name, &volume.volume_id),
                source: volume.clone(),
                parameters: plan.parameters.clone(),
                secrets: Default::default(),
            };
            match self.cut(host, &member).await {
                Ok(mut s) => {
                    s.group_snapshot_id = group.clone();
                    members.push(s);
                }
                Err(e) => {
                    for m in &members {
                        if let Err(left) = self.drop_snapshot(host, &m.snapshot_id).await {
                            tracing::warn!(snapshot = %m.snapshot_id, error = %left, "could not remove a member of a failed group snapshot");
                        }
                    }
                    return Err(e);
                }
            }
        }
        let creation_time = members
            .iter()
            .map(|s| s.creation_time)
            .min()
            .unwrap_or_default();
        Ok(GroupSnapshot {
            group_snapshot_id: group,
            snapshots: members,
            creation_time,
            ready_to_use: true,
        })
    }

    /// Deletes every member of `group`.
    pub(super) async fn drop_group(
        &self,
        host: &NodeHost,
        group: &GroupSnapshot,
    ) -> Result<(), Status> {
        for s in &group.snapshots {
            self.drop_snapshot(host, &s.snapshot_id).await?;
        }
        Ok(())
    }

    /// Deletes snapshot `id`'s data, then its record; one already gone is fine.
    pub(super) async fn drop_snapshot(&self, host: &NodeHost, id: &str) -> Result<(), Status> {
        if !is_snapshot_id(id) {
            // Not one of ours, so there is nothing of it to delete.
            return Ok(());
        }
        let (image, dir, record) = (
            self.snapshot_data(id, Kind::Block),
            self.snapshot_data(id, Kind::Dir),
            self.snapshot_record(id),
        );
        host.run(move |h| {
            h.remove(&image)?;
            h.remove_tree(&dir)?;
            h.remove(&record)
        })
        .await
        .map_err(|e| host_status(&format!("delete snapshot {id}"), e))
    }

    /// Fills new volume `id` of `kind` with a copy of `source`; returns the
    /// size of what was copied (an image) or 0 (a directory).
    pub(super) async fn fill(
        &self,
        host: &NodeHost,
        id: &str,
        kind: Kind,
        source: &Source,
    ) -> Result<u64, Status> {
        let (from, from_kind, what) = match source {
            Source::Snapshot(s) => {
                if !is_snapshot_id(&s.snapshot_id) {
                    return Err(Status::not_found(format!(
                        "snapshot {:?} was not made by this driver",
                        s.snapshot_id
                    )));
                }
                let k = self.snapshot_kind(host, s).await?;
                let what = format!("snapshot {}", s.snapshot_id);
                (self.snapshot_data(&s.snapshot_id, k), k, what)
            }
            Source::Volume(v) => self.volume_source(v)?,
        };
        if from_kind != kind {
            return Err(Status::invalid(format!(
                "{what} holds a {} volume; a volume made from it must be of kind {:?} too",
                kind_name(from_kind),
                kind_name(from_kind)
            )));
        }
        let to = self.volume_data(id, kind)?;
        host.run(move |h| match kind {
            Kind::Block => h.copy_image(&from, &to),
            Kind::Dir => h.copy_tree(&from, &to).map(|_| 0),
        })
        .await
        .map_err(|e| host_status(&format!("fill volume {id} from {what}"), e))
    }

    /// The kind of volume snapshot `s` was cut from, from its record.
    async fn snapshot_kind(&self, host: &NodeHost, s: &Snapshot) -> Result<Kind, Status> {
        let record = self.snapshot_record(&s.snapshot_id);
        let bytes = host
            .run(move |h| h.read_small(&record, MAX_RECORD))
            .await
            .map_err(|e| host_status(&format!("snapshot {}", s.snapshot_id), e))?
            .ok_or_else(|| {
                Status::not_found(format!("snapshot {} no longer exists", s.snapshot_id))
            })?;
        let record = parse_record(&self.snapshot_record(&s.snapshot_id), &bytes)
            .map_err(|e| host_status(&format!("snapshot {}", s.snapshot_id), e))?;
        Ok(if record.kind == "dir" {
            Kind::Dir
        } else {
            Kind::Block
        })
    }

    fn volume_source(&self, v: &Volume) -> Result<(PathBuf, Kind, String), Status> {
        let kind = context_kind(&v.volume_context);
        Ok((
            self.volume_data(&v.volume_id, kind)?,
            kind,
            format!("volume {}", v.volume_id),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_id_this_driver_did_not_make_names_no_storage() {
        let r = Reference::new("/var/lib/volplane/volumes", "z");
        for hostile in ["../../etc", "vol-../../etc/passwd!!", "/etc/shadow", ""] {
            let e = r.volume_data(hostile, Kind::Dir).unwrap_err();
            assert_eq!(e.code, volplane_core::Code::NotFound, "{hostile:?}");
        }
        let id = super::super::volume_id("pvc-1");
        assert_eq!(
            r.volume_data(&id, Kind::Block).unwrap(),
            PathBuf::from(format!("/var/lib/volplane/volumes/{id}.img"))
        );
        let e = parse_record(std::path::Path::new("/x.json"), b"{garbled").unwrap_err();
        assert!(
            e.to_string()
                .contains("remove it to cut the snapshot again"),
            "{e}"
        );
    }

    #[test]
    fn snapshot_ids_are_stable_path_safe_and_distinct_from_volume_ids() {
        assert_eq!(snapshot_id("s"), snapshot_id("s"));
        assert_ne!(snapshot_id("s"), snapshot_id("t"));
        assert!(is_snapshot_id(&snapshot_id("../../etc")));
        assert!(!is_snapshot_id("snap-../../etc/passwd!!"));
        assert!(!super::super::is_volume_id(&snapshot_id("x")));
        assert_ne!(group_id("g"), group_id("h"));
        assert_ne!(
            snapshot_id(&member_name("g", "vol-1")),
            snapshot_id(&member_name("g", "vol-2"))
        );
    }
}
