//! The GroupController service: snapshots of several volumes cut at one
//! point in time, by name, every member or none; deleted and looked up as
//! one. Members are snapshots like any other (listed, restored from) that
//! only their group deletes.

use std::collections::BTreeSet;

use super::controller::unexpected;
use super::state::{GroupRecord, SnapshotRecord};
use super::*;

/// The lock a CreateVolumeGroupSnapshot takes: its name.
pub(super) fn name_key(name: &str) -> String {
    format!("group-name:{name}")
}

/// The lock a DeleteVolumeGroupSnapshot takes.
pub(super) fn id_key(id: &str) -> String {
    format!("group:{id}")
}

impl Driver {
    pub(super) fn create_group(&mut self, r: CreateGroupSnapshot) -> Decision {
        let wanted: BTreeSet<&String> = r.source_volume_ids.iter().collect();
        if wanted.len() != r.source_volume_ids.len() {
            return reject(Status::invalid(
                "source_volume_ids: a volume is named twice; name each volume once",
            ));
        }
        if let Some(id) = self.state.group_names.get(&r.name) {
            let existing = &self.state.groups[id];
            let have: BTreeSet<&String> = existing
                .group
                .snapshots
                .iter()
                .map(|s| &s.source_volume_id)
                .collect();
            if have != wanted || existing.parameters != r.parameters {
                return reject(Status::already_exists(format!(
                    "group snapshot {:?} already exists, of other volumes or with other parameters",
                    r.name
                )));
            }
            if existing.group.ready_to_use {
                return answer(Response::GroupSnapshot(existing.group.clone()));
            }
            if self.state.busy(&id_key(id)) {
                return reject(Status::aborted_pending_snapshot(id));
            }
        }
        let mut sources = Vec::with_capacity(r.source_volume_ids.len());
        for id in &r.source_volume_ids {
            let Some(v) = self.state.volumes.unpacked(id) else {
                return reject(Status::not_found(format!(
                    "source volume {id} does not exist"
                )));
            };
            if self.state.busy(id) {
                return reject(Status::aborted_pending(id));
            }
            sources.push(v.volume.clone());
        }
        Decision::Execute {
            key: name_key(&r.name),
            plan: Plan::CreateGroupSnapshot(GroupPlan {
                name: r.name,
                sources,
                parameters: r.parameters,
                secrets: r.secrets,
            }),
        }
    }

    pub(super) fn group_created(
        &mut self,
        p: GroupPlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let group = match result? {
            Outcome::GroupCreated(g) => g,
            other => return Err(unexpected("CreateVolumeGroupSnapshot", &other)),
        };
        let group = self.checked_group(&p, group)?;
        for s in &group.snapshots {
            self.state.snapshots.insert(
                s.snapshot_id.clone(),
                SnapshotRecord {
                    name: String::new(),
                    snapshot: s.clone(),
                    parameters: p.parameters.clone(),
                },
            );
        }
        self.state
            .group_names
            .insert(p.name.clone(), group.group_snapshot_id.clone());
        self.state.groups.insert(
            group.group_snapshot_id.clone(),
            GroupRecord {
                name: p.name,
                group: group.clone(),
                parameters: p.parameters,
            },
        );
        Ok(Response::GroupSnapshot(group))
    }

    /// What the backend reported, checked against what was asked: an id,
    /// one member per source, no id another snapshot or group already has.
    fn checked_group(&self, p: &GroupPlan, mut g: GroupSnapshot) -> Result<GroupSnapshot, Status> {
        let bad = |why: String| {
            Err(Status::internal(format!(
                "the backend cut group snapshot {:?} {why}",
                p.name
            )))
        };
        if g.group_snapshot_id.is_empty() {
            return bad("without a group snapshot id".into());
        }
        if let Some(other) = self.state.groups.get(&g.group_snapshot_id)
            && other.name != p.name
        {
            return bad(format!(
                "as {}, the id of group {:?}",
                g.group_snapshot_id, other.name
            ));
        }
        let asked: BTreeSet<&str> = p.sources.iter().map(|v| v.volume_id.as_str()).collect();
        let cut: BTreeSet<&str> = g
            .snapshots
            .iter()
            .map(|s| s.source_volume_id.as_str())
            .collect();
        if cut != asked || g.snapshots.len() != asked.len() {
            return bad(format!("of volumes {cut:?}, but {asked:?} were asked for"));
        }
        for s in &mut g.snapshots {
            if s.snapshot_id.is_empty() {
                return bad(format!(
                    "with a member of {} without an id",
                    s.source_volume_id
                ));
            }
            if let Some(other) = self.state.snapshots.get(&s.snapshot_id)
                && other.snapshot.group_snapshot_id != g.group_snapshot_id
            {
                return bad(format!(
                    "with member {}, the id of another snapshot",
                    s.snapshot_id
                ));
            }
            s.group_snapshot_id = g.group_snapshot_id.clone();
        }
        g.ready_to_use = g.snapshots.iter().all(|s| s.ready_to_use);
        Ok(g)
    }

    pub(super) fn delete_group(&mut self, r: DeleteGroupSnapshot) -> Decision {
        let Some(record) = self.state.groups.get(&r.group_snapshot_id) else {
            return answer(Response::Empty);
        };
        if let Err(e) = check_members(&record.group, &r.snapshot_ids) {
            return reject(e);
        }
        let reading = record
            .group
            .snapshots
            .iter()
            .any(|s| self.state.reading(&s.snapshot_id));
        if reading || self.state.busy(&name_key(&record.name)) {
            return reject(Status::aborted_pending_snapshot(&r.group_snapshot_id));
        }
        Decision::Execute {
            key: id_key(&r.group_snapshot_id),
            plan: Plan::DeleteGroupSnapshot {
                group: record.group.clone(),
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn group_deleted(
        &mut self,
        id: &str,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        result?;
        if let Some(r) = self.state.groups.remove(id) {
            self.state.group_names.remove(&r.name);
            for s in &r.group.snapshots {
                self.state.snapshots.remove(&s.snapshot_id);
            }
        }
        Ok(Response::Empty)
    }

    pub(super) fn get_group(&self, id: &str, snapshot_ids: &[String]) -> Decision {
        let Some(record) = self.state.groups.get(id) else {
            return reject(Status::not_found(format!(
                "group snapshot {id} does not exist"
            )));
        };
        match check_members(&record.group, snapshot_ids) {
            Ok(()) => answer(Response::GroupSnapshot(record.group.clone())),
            Err(e) => reject(e),
        }
    }

    /// The group a snapshot belongs to, if any: only the group deletes it.
    pub(super) fn group_of(&self, snapshot_id: &str) -> Option<&str> {
        self.state
            .snapshots
            .get(snapshot_id)
            .map(|s| s.snapshot.group_snapshot_id.as_str())
            .filter(|g| !g.is_empty())
    }
}

/// The members a CO names must be the group's (when it names any).
fn check_members(group: &GroupSnapshot, snapshot_ids: &[String]) -> Result<(), Status> {
    if snapshot_ids.is_empty() {
        return Ok(());
    }
    let named: BTreeSet<&str> = snapshot_ids.iter().map(String::as_str).collect();
    let members: BTreeSet<&str> = group
        .snapshots
        .iter()
        .map(|s| s.snapshot_id.as_str())
        .collect();
    if named == members {
        return Ok(());
    }
    Err(Status::invalid(format!(
        "snapshot_ids {named:?} are not the members of group snapshot {} ({members:?})",
        group.group_snapshot_id
    )))
}
