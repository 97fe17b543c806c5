//! The storage as the authority on what exists.
//!
//! The journal records intents — what is in flight and what was promised —
//! not the inventory. A request naming a volume or snapshot the journal
//! does not hold is put to the storage before any answer: a delete goes to
//! the backend's delete (the storage may hold it though this process never
//! made it: a controller rescheduled onto an empty state directory, a
//! second replica, a statically provisioned volume); with
//! [`Features::lookup`] every other request first asks the backend what it
//! holds under that id, adopts what it finds into the journal, and is then
//! decided as if this process had made it. NOT_FOUND is answered only when
//! the storage has nothing either. An id no backend could have made (see
//! [`unusable_id`]) is never put to the storage.

use std::collections::BTreeSet;

use super::controller::unexpected;
use super::state::{Publication, SnapshotRecord, VolumeRecord};
use super::*;

/// A volume known by its id alone: what a delete of a volume the journal
/// lacks hands the backend.
fn bare_volume(volume_id: &str) -> Volume {
    Volume {
        volume_id: volume_id.to_string(),
        capacity_bytes: 0,
        volume_context: Attributes::new(),
        accessible_topology: Vec::new(),
        content_source: None,
    }
}

/// A snapshot known by its id alone.
fn bare_snapshot(snapshot_id: &str) -> Snapshot {
    Snapshot {
        snapshot_id: snapshot_id.to_string(),
        source_volume_id: String::new(),
        size_bytes: 0,
        creation_time: Timestamp::default(),
        ready_to_use: false,
        group_snapshot_id: String::new(),
    }
}

/// The ids a request names that must exist for it to be decided: volumes,
/// then snapshots.
fn named_ids(request: &Request) -> (Vec<&str>, Vec<&str>) {
    let (mut volumes, mut snapshots) = (Vec::new(), Vec::new());
    match request {
        Request::ControllerPublish(r) => volumes.push(r.volume_id.as_str()),
        Request::ControllerUnpublish(r) => volumes.push(&r.volume_id),
        Request::ValidateCapabilities(r) => volumes.push(&r.volume_id),
        Request::ControllerExpand(r) => volumes.push(&r.volume_id),
        Request::ControllerGetVolume { volume_id } => volumes.push(volume_id),
        Request::ControllerModify(r) => volumes.push(&r.volume_id),
        Request::CreateSnapshot(r) => volumes.push(&r.source_volume_id),
        Request::CreateGroupSnapshot(r) => {
            volumes.extend(r.source_volume_ids.iter().map(|s| s.as_str()))
        }
        Request::CreateVolume(r) => match &r.content_source {
            Some(ContentSource::Volume(id)) => volumes.push(id),
            Some(ContentSource::Snapshot(id)) => snapshots.push(id.as_str()),
            None => {}
        },
        Request::GetSnapshot { snapshot_id } => snapshots.push(snapshot_id.as_str()),
        _ => {}
    }
    (volumes, snapshots)
}

/// The object a lookup asks the storage about.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(super) enum Asking {
    Volume(String),
    Snapshot(String),
}

impl Asking {
    /// The lookup's plan, carrying the request's credentials.
    pub(super) fn plan(&self, secrets: Secrets) -> Plan {
        match self {
            Asking::Volume(id) => Plan::LookupVolume {
                volume_id: id.clone(),
                secrets,
            },
            Asking::Snapshot(id) => Plan::LookupSnapshot {
                snapshot_id: id.clone(),
                secrets,
            },
        }
    }
}

/// The secrets a request carries (empty for one that carries none).
pub(super) fn request_secrets(request: &Request) -> Secrets {
    request
        .secrets()
        .map(|(_, s)| s.clone())
        .unwrap_or_default()
}

impl Driver {
    /// What the storage must be asked before `request` can be decided, if
    /// anything: a delete of something the journal lacks goes to the
    /// backend's delete; with lookups, the first id the request names that
    /// the journal lacks (and that was not `asked` already) is looked up;
    /// with listings, ListVolumes and ListSnapshots list the storage.
    pub(super) fn ask_storage(
        &self,
        request: &Request,
        asked: &BTreeSet<String>,
    ) -> Option<Decision> {
        match request {
            Request::DeleteVolume(r) if !self.state.volumes.contains_key(&r.volume_id) => {
                return Some(self.delete_unknown_volume(r));
            }
            Request::DeleteSnapshot(r) if !self.state.snapshots.contains_key(&r.snapshot_id) => {
                return Some(self.delete_unknown_snapshot(r));
            }
            Request::ListVolumes(r) if self.config.storage_lists => {
                return Some(Decision::Execute {
                    key: String::new(),
                    plan: Plan::ListVolumes {
                        starting_token: r.starting_token.clone(),
                        max_entries: r.max_entries,
                    },
                });
            }
            Request::ListSnapshots(r) if self.config.storage_lists => {
                return Some(Decision::Execute {
                    key: String::new(),
                    plan: Plan::ListSnapshots {
                        starting_token: r.starting_token.clone(),
                        max_entries: r.max_entries,
                        source_volume_id: r.source_volume_id.clone(),
                        snapshot_id: r.snapshot_id.clone(),
                        secrets: r.secrets.clone(),
                    },
                });
            }
            _ => {}
        }
        if !self.config.lookup {
            return None;
        }
        let unknown = |id: &&str| !asked.contains(*id) && unusable_id(id).is_none();
        let (volumes, snapshots) = named_ids(request);
        let asking = if let Some(id) = volumes
            .into_iter()
            .filter(|id| !self.state.volumes.contains_key(id))
            .find(unknown)
        {
            Asking::Volume(id.to_string())
        } else if let Some(id) = snapshots
            .into_iter()
            .filter(|id| !self.state.snapshots.contains_key(*id))
            .find(unknown)
        {
            Asking::Snapshot(id.to_string())
        } else {
            return None;
        };
        Some(Decision::Ask {
            asking,
            request: Box::new(request.clone()),
        })
    }

    /// DeleteVolume of a volume the journal lacks: the storage's delete
    /// (OK when it holds nothing either); an id no backend could have made
    /// is OK at once.
    fn delete_unknown_volume(&self, r: &DeleteVolume) -> Decision {
        if unusable_id(&r.volume_id).is_some() {
            return answer(Response::Empty);
        }
        Decision::Execute {
            key: r.volume_id.clone(),
            plan: Plan::DeleteVolume {
                volume: bare_volume(&r.volume_id),
                secrets: r.secrets.clone(),
            },
        }
    }

    /// DeleteSnapshot of a snapshot the journal lacks: as for volumes.
    fn delete_unknown_snapshot(&self, r: &DeleteSnapshot) -> Decision {
        if unusable_id(&r.snapshot_id).is_some() {
            return answer(Response::Empty);
        }
        Decision::Execute {
            key: snapshot::id_key(&r.snapshot_id),
            plan: Plan::DeleteSnapshot {
                snapshot: bare_snapshot(&r.snapshot_id),
                secrets: r.secrets.clone(),
            },
        }
    }

    /// The lookup of `asking` for `request` completed: adopt what the
    /// storage holds, then decide `request` again (answering it with the
    /// lookup's failure if the storage could not be asked).
    pub(super) fn looked_up(
        &mut self,
        rpc: RpcId,
        asking: Asking,
        request: Request,
        mut asked: BTreeSet<String>,
        result: Result<Outcome, Status>,
    ) {
        let adopted = result.and_then(|outcome| match (asking, outcome) {
            // The id may have become known while the storage was asked (a
            // create answered it meanwhile): the journal's record is newer
            // than the storage's answer, which is let go.
            (Asking::Volume(id), Outcome::VolumeFound(found)) => {
                let stored = found.filter(|_| !self.state.volumes.contains_key(&id));
                asked.insert(id.clone());
                stored.map_or(Ok(()), |stored| self.adopt_volume(&id, stored))
            }
            (Asking::Snapshot(id), Outcome::SnapshotFound(found)) => {
                let stored = found.filter(|_| !self.state.snapshots.contains_key(&id));
                asked.insert(id.clone());
                stored.map_or(Ok(()), |stored| self.adopt_snapshot(&id, stored))
            }
            (_, other) => Err(unexpected("a lookup", &other)),
        });
        if let Err(status) = adopted {
            self.queue.push_back(Effect::Reply {
                rpc,
                result: Err(status),
            });
            return;
        }
        let decision = self.decide(request, &asked);
        self.settle(rpc, decision, asked);
    }

    /// Records a volume the storage holds as if this process had made it.
    /// Its publications are uncertain (the storage says the volume is
    /// attached there; an unpublish must still be carried out, and a
    /// publish is carried out again).
    fn adopt_volume(&mut self, id: &str, stored: StoredVolume) -> Result<(), Status> {
        if stored.volume.volume_id != id {
            return Err(Status::internal(format!(
                "Backend::lookup_volume was asked for volume {id} and answered with volume {:?}",
                stored.volume.volume_id
            )));
        }
        if self.state.volumes.contains_key(id) {
            return Ok(());
        }
        let name = match stored.name {
            n if self.state.volumes.named(&n).is_none() => n,
            _ => String::new(),
        };
        let several = stored.published_node_ids.len() > 1;
        let capability = stored
            .capabilities
            .iter()
            .find(|c| !several || c.access_mode.multi_node())
            .cloned()
            .unwrap_or_else(|| {
                Capability::mount(if several {
                    AccessMode::MultiNodeMultiWriter
                } else {
                    AccessMode::SingleNodeWriter
                })
            });
        let published = stored
            .published_node_ids
            .into_iter()
            .map(|node| {
                let p = Publication {
                    capability: capability.clone(),
                    readonly: false,
                    publish_context: Attributes::new(),
                    certain: false,
                };
                (node, p)
            })
            .collect();
        self.state.volumes.insert(&VolumeRecord {
            name,
            capacity: CapacityRange::default(),
            volume: stored.volume,
            capabilities: stored.capabilities,
            parameters: stored.parameters,
            mutable_parameters: stored.mutable_parameters,
            accessibility: None,
            node_expansion_required: false,
            published,
        });
        self.dirty = true;
        Ok(())
    }

    /// Records a snapshot the storage holds (under no name: CreateSnapshot
    /// with its name is answered by the backend, which finds it by name).
    fn adopt_snapshot(&mut self, id: &str, snapshot: Snapshot) -> Result<(), Status> {
        if snapshot.snapshot_id != id {
            return Err(Status::internal(format!(
                "Backend::lookup_snapshot was asked for snapshot {id} and answered with snapshot {:?}",
                snapshot.snapshot_id
            )));
        }
        if self.state.snapshots.contains_key(id) {
            return Ok(());
        }
        self.state.snapshots.insert(
            id.to_string(),
            SnapshotRecord {
                name: String::new(),
                snapshot,
                parameters: Attributes::new(),
            },
        );
        self.dirty = true;
        Ok(())
    }

    /// ListVolumes' answer from a page of the storage's: the nodes a
    /// volume is published to are the storage's and the journal's.
    pub(super) fn listed_from_storage(&self, page: VolumePage) -> Result<Response, Status> {
        let mut entries = Vec::with_capacity(page.entries.len());
        for stored in page.entries {
            if let Some(why) = unusable_id(&stored.volume.volume_id) {
                return Err(Status::internal(format!(
                    "Backend::list_volumes listed volume id {:?}, which {why}",
                    stored.volume.volume_id
                )));
            }
            let mut nodes: BTreeSet<String> = stored.published_node_ids.into_iter().collect();
            let mut volume = stored.volume;
            if let Some(record) = self.state.volumes.unpacked(&volume.volume_id) {
                // The storage says it exists; the journal says what was
                // promised for it (its size, its context).
                nodes.extend(record.published.keys().cloned());
                volume = record.volume.clone();
            }
            entries.push(ListedVolume {
                volume,
                published_node_ids: nodes.into_iter().collect(),
                condition: Some(VolumeCondition::default()),
            });
        }
        if self.config.plant.is(crate::plant::Plant::ListSkipsOne) && !page.next_token.is_empty() {
            // Planted: the page's last volume is in no page.
            entries.pop();
        }
        Ok(Response::Volumes {
            entries,
            next_token: page.next_token,
        })
    }

    /// ListSnapshots' answer from a page of the storage's.
    pub(super) fn snapshots_from_storage(&self, page: SnapshotPage) -> Result<Response, Status> {
        if let Some((s, why)) = page
            .entries
            .iter()
            .find_map(|s| unusable_id(&s.snapshot_id).map(|why| (s, why)))
        {
            return Err(Status::internal(format!(
                "Backend::list_snapshots listed snapshot id {:?}, which {why}",
                s.snapshot_id
            )));
        }
        Ok(Response::Snapshots {
            entries: page.entries,
            next_token: page.next_token,
        })
    }
}
