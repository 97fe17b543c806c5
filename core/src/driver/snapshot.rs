//! Snapshots: cut by name from a volume, listed and looked up from memory,
//! deleted by id; and the sources a new volume is restored or cloned from.

use super::controller::unexpected;
use super::state::SnapshotRecord;
use super::*;

/// The lock a CreateSnapshot takes: its name (the id is not known yet).
pub(super) fn name_key(name: &str) -> String {
    format!("snapshot-name:{name}")
}

/// The lock a DeleteSnapshot takes.
pub(super) fn id_key(id: &str) -> String {
    format!("snapshot:{id}")
}

impl Driver {
    pub(super) fn create_snapshot(&mut self, r: CreateSnapshot) -> Decision {
        if let Some(id) = self.state.snapshot_names.get(&r.name) {
            let existing = &self.state.snapshots[id];
            if existing.snapshot.source_volume_id != r.source_volume_id {
                return reject(Status::already_exists(format!(
                    "snapshot {:?} already exists, of volume {}, not of {}",
                    r.name, existing.snapshot.source_volume_id, r.source_volume_id
                )));
            }
            if existing.parameters != r.parameters {
                return reject(Status::already_exists(format!(
                    "snapshot {:?} already exists with different parameters",
                    r.name
                )));
            }
            if existing.snapshot.ready_to_use {
                return answer(Response::Snapshot(existing.snapshot.clone()));
            }
            if self.state.busy(&id_key(id)) {
                return reject(Status::aborted_pending_snapshot(id));
            }
            // Not ready yet: ask the backend again how far it has got.
        }
        let Some(source) = self.state.volumes.unpacked(&r.source_volume_id) else {
            return reject(Status::not_found(format!(
                "source volume {} does not exist",
                r.source_volume_id
            )));
        };
        if self.state.busy(&r.source_volume_id) {
            return reject(Status::aborted_pending(&r.source_volume_id));
        }
        Decision::Execute {
            key: name_key(&r.name),
            plan: Plan::CreateSnapshot(SnapshotPlan {
                name: r.name,
                source: source.volume.clone(),
                parameters: r.parameters,
                secrets: r.secrets,
            }),
        }
    }

    pub(super) fn snapshot_created(
        &mut self,
        p: SnapshotPlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let mut snapshot = match result? {
            Outcome::SnapshotCreated(s) => s,
            other => return Err(unexpected("CreateSnapshot", &other)),
        };
        if let Some(why) = unusable_id(&snapshot.snapshot_id) {
            return Err(Status::internal(format!(
                "the backend cut snapshot {:?} with snapshot id {:?}, which {why}: a CO could \
                 never name the snapshot again",
                p.name, snapshot.snapshot_id
            )));
        }
        if snapshot.source_volume_id.is_empty() {
            snapshot.source_volume_id = p.source.volume_id.clone();
        }
        if snapshot.source_volume_id != p.source.volume_id {
            return Err(Status::internal(format!(
                "the backend cut snapshot {:?} of volume {}, but volume {} was asked for",
                p.name, snapshot.source_volume_id, p.source.volume_id
            )));
        }
        if let Some(other) = self.state.snapshots.get(&snapshot.snapshot_id)
            && other.name != p.name
        {
            return Err(Status::internal(format!(
                "the backend returned snapshot id {} for {:?}, but that id belongs to {:?}",
                snapshot.snapshot_id, p.name, other.name
            )));
        }
        if let Some(old) = self.state.snapshot_names.get(&p.name)
            && *old != snapshot.snapshot_id
        {
            return Err(Status::internal(format!(
                "the backend returned snapshot id {} for {:?}, which was cut as {old}",
                snapshot.snapshot_id, p.name
            )));
        }
        self.state
            .snapshot_names
            .insert(p.name.clone(), snapshot.snapshot_id.clone());
        self.state.snapshots.insert(
            snapshot.snapshot_id.clone(),
            SnapshotRecord {
                name: p.name,
                snapshot: snapshot.clone(),
                parameters: p.parameters,
            },
        );
        Ok(Response::Snapshot(snapshot))
    }

    pub(super) fn delete_snapshot(&mut self, r: DeleteSnapshot) -> Decision {
        let Some(record) = self.state.snapshots.get(&r.snapshot_id) else {
            return answer(Response::Empty);
        };
        if let Some(group) = self.group_of(&r.snapshot_id) {
            return reject(Status::invalid(format!(
                "snapshot {} belongs to group snapshot {group}; DeleteVolumeGroupSnapshot deletes it with its group",
                r.snapshot_id
            )));
        }
        if self.state.busy(&name_key(&record.name)) || self.state.reading(&r.snapshot_id) {
            return reject(Status::aborted_pending_snapshot(&r.snapshot_id));
        }
        Decision::Execute {
            key: id_key(&r.snapshot_id),
            plan: Plan::DeleteSnapshot {
                snapshot: record.snapshot.clone(),
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn snapshot_deleted(
        &mut self,
        id: &str,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        result?;
        if let Some(r) = self.state.snapshots.remove(id) {
            self.state.snapshot_names.remove(&r.name);
        }
        Ok(Response::Empty)
    }

    pub(super) fn list_snapshots(&self, r: ListSnapshots) -> Decision {
        if !r.starting_token.is_empty() && !self.state.snapshots.contains_key(&r.starting_token) {
            return reject(Status::new(
                crate::Code::Aborted,
                format!(
                    "starting_token {:?} does not name a snapshot any more; list again from the start",
                    r.starting_token
                ),
            ));
        }
        let wanted = |s: &Snapshot| {
            (r.snapshot_id.is_empty() || s.snapshot_id == r.snapshot_id)
                && (r.source_volume_id.is_empty() || s.source_volume_id == r.source_volume_id)
        };
        let mut matching = self
            .state
            .snapshots
            .range::<String, _>(r.starting_token.clone()..)
            .map(|(_, s)| &s.snapshot)
            .filter(|s| wanted(s));
        let limit = if r.max_entries == 0 {
            usize::MAX
        } else {
            r.max_entries as usize
        };
        let entries: Vec<Snapshot> = matching.by_ref().take(limit).cloned().collect();
        let next_token = matching
            .next()
            .map(|s| s.snapshot_id.clone())
            .unwrap_or_default();
        answer(Response::Snapshots {
            entries,
            next_token,
        })
    }

    pub(super) fn get_snapshot(&self, id: &str) -> Decision {
        match self.state.snapshots.get(id) {
            Some(r) => answer(Response::Snapshot(r.snapshot.clone())),
            None => reject(Status::not_found(format!("snapshot {id} does not exist"))),
        }
    }

    /// The record a CreateVolume's content source names, checked: it exists,
    /// nothing is changing it, it is ready, and the new volume can hold it.
    pub(super) fn volume_source(&self, r: &CreateVolume) -> Result<Option<Source>, Status> {
        let (source, size) = match &r.content_source {
            None => return Ok(None),
            Some(ContentSource::Snapshot(id)) => {
                if !self.config.has(ControllerCapability::CreateDeleteSnapshot) {
                    return Err(self.no_sources("snapshots"));
                }
                let Some(s) = self.state.snapshots.get(id) else {
                    return Err(Status::not_found(format!(
                        "source snapshot {id} does not exist"
                    )));
                };
                if self.state.busy(&id_key(id)) {
                    return Err(Status::aborted_pending_snapshot(id));
                }
                if !s.snapshot.ready_to_use {
                    return Err(Status::failed_precondition(format!(
                        "source snapshot {id} is not ready to use yet; retry once CreateSnapshot reports it ready"
                    )));
                }
                (Source::Snapshot(s.snapshot.clone()), s.snapshot.size_bytes)
            }
            Some(ContentSource::Volume(id)) => {
                if !self.config.has(ControllerCapability::CloneVolume) {
                    return Err(self.no_sources("other volumes"));
                }
                let Some(v) = self.state.volumes.unpacked(id) else {
                    return Err(Status::not_found(format!(
                        "source volume {id} does not exist"
                    )));
                };
                if self.state.busy(id) {
                    return Err(Status::aborted_pending(id));
                }
                (Source::Volume(v.volume.clone()), v.volume.capacity_bytes)
            }
        };
        let range = r.capacity;
        let too_small = |bytes: u64| bytes != 0 && bytes < size;
        if too_small(range.required_bytes) || too_small(range.limit_bytes) {
            return Err(Status::new(
                crate::Code::OutOfRange,
                format!(
                    "capacity_range {}..{} cannot hold its source's {size} bytes; volumes restored or cloned are at least as big as their source",
                    range.required_bytes, range.limit_bytes
                ),
            ));
        }
        Ok(Some(source))
    }

    fn no_sources(&self, what: &str) -> Status {
        Status::invalid(format!(
            "volume_content_source: driver {} cannot create volumes from {what}",
            self.config.name
        ))
    }
}

/// The size to suggest for a volume filled from `source`: at least the source's.
pub(super) fn source_size(source: Option<&Source>) -> u64 {
    match source {
        None => 0,
        Some(Source::Snapshot(s)) => s.size_bytes,
        Some(Source::Volume(v)) => v.capacity_bytes,
    }
}
