//! The Controller service: volumes by name, publications to nodes, expansion.

use super::state::{Publication, VolumeRecord};
use super::*;
use crate::plant::Plant;

/// What [`Plant::ForgetInterruptedCreate`] appends to a create's name to
/// make each attempt's volume its own.
const ATTEMPT: &str = "~attempt";

impl Driver {
    pub(super) fn check_capability(&self, field: &str, cap: &Capability) -> Result<(), Status> {
        if !self.config.access_modes.contains(&cap.access_mode) {
            return Err(Status::invalid(format!(
                "{field}: access mode {} is not supported by driver {}",
                cap.access_mode.csi_name(),
                self.config.name
            )));
        }
        if cap.access_type.is_block() && !self.config.block {
            return Err(Status::invalid(format!(
                "{field}: raw block access is not supported by driver {}",
                self.config.name
            )));
        }
        Ok(())
    }

    pub(super) fn create_volume(&mut self, r: CreateVolume) -> Decision {
        for (i, cap) in r.capabilities.iter().enumerate() {
            if let Err(e) = self.check_capability(&format!("volume_capabilities[{i}]"), cap) {
                return reject(e);
            }
        }
        let range = r.capacity;
        if range.limit_bytes != 0 && range.limit_bytes < range.required_bytes {
            return reject(Status::invalid(format!(
                "capacity_range: limit_bytes {} is smaller than required_bytes {}",
                range.limit_bytes, range.required_bytes
            )));
        }
        if let Some(id) = self.state.volumes.named(&r.name) {
            let existing = self
                .state
                .volumes
                .unpacked(id)
                .expect("the name index holds recorded volumes");
            if self.state.busy(id) {
                return reject(Status::aborted_pending(id));
            }
            return match incompatibility(&existing, &r) {
                None => answer(Response::Volume(existing.volume.clone())),
                Some(_) if self.config.plant.is(Plant::AnswerIncompatibleRepeat) => {
                    answer(Response::Volume(existing.volume.clone()))
                }
                Some(why) => reject(Status::already_exists(format!(
                    "volume {:?} already exists with {why}",
                    r.name
                ))),
            };
        }
        let source = match self.volume_source(&r) {
            Ok(source) => source,
            Err(e) => return reject(e),
        };
        let mut name = r.name;
        if self.config.plant.is(Plant::CreateRepeatsInFlight)
            && self.state.busy(&format!("name:{name}"))
        {
            // Planted: the repeat makes a volume of its own.
            name = format!("{name}~again");
        }
        let key = format!("name:{name}");
        if self.config.plant.is(Plant::ForgetInterruptedCreate) {
            // Planted: each attempt's volume under an id of its own.
            name = format!("{name}{ATTEMPT}{}", self.state.next_op);
        }
        Decision::Execute {
            key,
            plan: Plan::CreateVolume(CreatePlan {
                name,
                capacity: range,
                suggested_bytes: default_size(range, self.config.default_volume_bytes)
                    .max(snapshot::source_size(source.as_ref())),
                capabilities: r.capabilities,
                parameters: r.parameters,
                mutable_parameters: r.mutable_parameters,
                content_source: r.content_source,
                source,
                accessibility: r.accessibility,
                secrets: r.secrets,
            }),
        }
    }

    pub(super) fn created(
        &mut self,
        mut p: CreatePlan,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        if self.config.plant.is(Plant::ForgetInterruptedCreate)
            && let Some((name, _)) = p.name.split_once(ATTEMPT)
        {
            // Planted: the record is made under the name asked for.
            p.name = name.to_string();
        }
        let mut volume = match result? {
            Outcome::Created(v) => v,
            other => return Err(unexpected("CreateVolume", &other)),
        };
        if let Some(why) = unusable_id(&volume.volume_id) {
            return Err(Status::internal(format!(
                "the backend created volume {:?} with volume id {:?}, which {why}: a CO could \
                 never name the volume again",
                p.name, volume.volume_id
            )));
        }
        if let Some(other) = self.state.volumes.unpacked(&volume.volume_id)
            && other.name != p.name
            && !other.name.is_empty()
        {
            return Err(Status::internal(format!(
                "the backend returned volume id {} for {:?}, but that id belongs to {:?}",
                volume.volume_id, p.name, other.name
            )));
        }
        if volume.capacity_bytes != 0 && !p.capacity.admits(volume.capacity_bytes) {
            return Err(Status::internal(format!(
                "Backend::create_volume made volume {} with {} bytes, but the request asked for {}: a bug in the backend",
                volume.volume_id, volume.capacity_bytes, p.capacity
            )));
        }
        if !volume.accessible_topology.is_empty()
            && !accessible_from(&volume.accessible_topology, p.accessibility.as_ref())
        {
            return Err(Status::internal(format!(
                "Backend::create_volume made volume {} accessible from {:?}, which none of the request's requisite topology segments allows: a bug in the backend",
                volume.volume_id, volume.accessible_topology
            )));
        }
        if self.config.plant.is(Plant::IgnoreTopologyRequirement) {
            for segment in &mut volume.accessible_topology {
                let mut elsewhere = Topology::new();
                for (k, v) in segment.iter() {
                    elsewhere.insert(k.to_string(), format!("{v}-elsewhere"));
                }
                *segment = elsewhere;
            }
        }
        if volume.content_source.is_none() {
            volume.content_source = p.content_source.clone();
        }
        // A volume adopted from the storage keeps the publications it
        // was adopted with.
        let published = self
            .state
            .volumes
            .unpacked(&volume.volume_id)
            .map(|adopted| adopted.published)
            .unwrap_or_default();
        self.state.volumes.insert(&VolumeRecord {
            name: p.name,
            volume: volume.clone(),
            capabilities: p.capabilities,
            parameters: p.parameters,
            mutable_parameters: p.mutable_parameters,
            accessibility: p.accessibility,
            capacity: p.capacity,
            node_expansion_required: false,
            published,
        });
        Ok(Response::Volume(volume))
    }

    pub(super) fn delete_volume(&mut self, r: DeleteVolume) -> Decision {
        let Some(record) = self.state.volumes.unpacked(&r.volume_id) else {
            return answer(Response::Empty);
        };
        if !record.published.is_empty() {
            return reject(Status::failed_precondition(format!(
                "volume {} is still published to node(s) {}; ControllerUnpublishVolume it first",
                r.volume_id,
                record
                    .published
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if self.state.reading(&r.volume_id) {
            return reject(Status::aborted_pending(&r.volume_id));
        }
        if let Some(v) = self.state.node.get(&r.volume_id) {
            return reject(Status::failed_precondition(format!(
                "volume {} is still in use on node {} ({} target(s){})",
                r.volume_id,
                self.config.node_id,
                v.targets.len(),
                if v.stage.is_some() { ", staged" } else { "" }
            )));
        }
        // Planted: the volume is forgotten, and its storage keeps it.
        if self.config.plant.is(Plant::DeleteKeepsStorage) {
            self.state.volumes.remove(&r.volume_id);
            self.dirty = true;
            return answer(Response::Empty);
        }
        // Planted: the delete holds nothing a publish would wait for.
        let key = if self.config.plant.is(Plant::DeleteRacesPublish) {
            format!("delete:{}", r.volume_id)
        } else {
            r.volume_id
        };
        Decision::Execute {
            key,
            plan: Plan::DeleteVolume {
                volume: record.volume.clone(),
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn deleted(
        &mut self,
        id: &str,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        result?;
        self.state.volumes.remove(id);
        Ok(Response::Empty)
    }

    pub(super) fn controller_publish(&mut self, r: ControllerPublish) -> Decision {
        if let Err(e) = self.check_capability("volume_capability", &r.capability) {
            return reject(e);
        }
        if r.readonly && !self.config.has(ControllerCapability::PublishReadonly) {
            return reject(Status::invalid(
                "readonly: this driver does not support PUBLISH_READONLY; readonly must be false",
            ));
        }
        let Some(record) = self.state.volumes.unpacked(&r.volume_id) else {
            return reject(Status::not_found(format!(
                "volume {} does not exist",
                r.volume_id
            )));
        };
        if !self.config.known_nodes.is_empty() && !self.config.known_nodes.contains(&r.node_id) {
            return reject(Status::not_found(format!(
                "node {:?} is not known to driver {}",
                r.node_id, self.config.name
            )));
        }
        if let Some(p) = record.published.get(&r.node_id) {
            // An uncertain publication (failed, or adopted from the
            // storage) is carried out again, as asked now.
            if p.certain && (p.capability != r.capability || p.readonly != r.readonly) {
                return reject(Status::already_exists(format!(
                    "volume {} is already published to node {} with capability {} readonly={}, incompatible with {} readonly={}",
                    r.volume_id, r.node_id, p.capability, p.readonly, r.capability, r.readonly
                )));
            }
            if p.certain {
                return answer(Response::Published {
                    publish_context: p.publish_context.clone(),
                });
            }
        } else {
            let single = !r.capability.access_mode.multi_node()
                || record
                    .published
                    .values()
                    .any(|p| !p.capability.access_mode.multi_node());
            if single && let Some(other) = record.published.keys().next() {
                return reject(Status::failed_precondition(format!(
                    "volume {} is published to node {other} and its access mode does not allow a second node",
                    r.volume_id
                )));
            }
            let max = self.config.max_volumes_per_node;
            if max > 0 {
                let on_node = self.state.volumes.published_to(&r.node_id) as u64;
                if on_node >= max {
                    return reject(Status::new(
                        crate::Code::ResourceExhausted,
                        format!(
                            "node {} already has {on_node} volume(s) published, the maximum for driver {}",
                            r.node_id, self.config.name
                        ),
                    ));
                }
            }
        }
        let publication = Publication {
            capability: r.capability.clone(),
            readonly: r.readonly,
            publish_context: Attributes::new(),
            certain: false,
        };
        self.state.volumes.update(&r.volume_id, |v| {
            v.published.insert(r.node_id.clone(), publication);
        });
        Decision::Execute {
            key: r.volume_id,
            plan: Plan::ControllerPublish {
                volume: record.volume.clone(),
                node_id: r.node_id,
                capability: r.capability,
                readonly: r.readonly,
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn controller_published(
        &mut self,
        id: &str,
        node_id: &str,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let publish_context = match result? {
            Outcome::Published { publish_context } => publish_context,
            Outcome::Done => Attributes::new(),
            other => return Err(unexpected("ControllerPublishVolume", &other)),
        };
        let recorded = self.state.volumes.update(id, |v| {
            let p = v.published.get_mut(node_id)?;
            p.publish_context = publish_context.clone();
            p.certain = true;
            Some(())
        });
        match recorded.flatten() {
            None if self.config.plant.is(Plant::DeleteRacesPublish) => {}
            None => {
                return Err(Status::internal(format!(
                    "publication of {id} to {node_id} vanished"
                )));
            }
            Some(()) => {}
        }
        Ok(Response::Published { publish_context })
    }

    pub(super) fn controller_unpublish(&mut self, r: ControllerUnpublish) -> Decision {
        let Some(record) = self.state.volumes.unpacked(&r.volume_id) else {
            return answer(Response::Empty);
        };
        let nodes: Vec<String> = match r.node_id {
            Some(n) if record.published.contains_key(&n) => vec![n],
            Some(_) => return answer(Response::Empty),
            None => record.published.keys().cloned().collect(),
        };
        if nodes.is_empty() {
            return answer(Response::Empty);
        }
        if nodes.contains(&self.config.node_id) && self.state.node.contains_key(&r.volume_id) {
            return reject(Status::failed_precondition(format!(
                "volume {} is still staged or published on node {}; NodeUnpublishVolume and NodeUnstageVolume it first",
                r.volume_id, self.config.node_id
            )));
        }
        Decision::Execute {
            key: r.volume_id,
            plan: Plan::ControllerUnpublish {
                volume: record.volume.clone(),
                still_published: record
                    .published
                    .keys()
                    .filter(|n| !nodes.contains(n))
                    .cloned()
                    .collect(),
                node_ids: nodes,
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn controller_unpublished(
        &mut self,
        id: &str,
        node_ids: &[String],
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        self.state.volumes.update(id, |record| {
            for node in node_ids {
                match &result {
                    Ok(_) => {
                        record.published.remove(node);
                    }
                    Err(_) => {
                        if let Some(p) = record.published.get_mut(node) {
                            p.certain = false;
                        }
                    }
                }
            }
        });
        result.map(|_| Response::Empty)
    }

    pub(super) fn validate_capabilities(&mut self, r: ValidateCapabilities) -> Decision {
        let Some(record) = self.state.volumes.unpacked(&r.volume_id) else {
            return reject(Status::not_found(format!(
                "volume {} does not exist",
                r.volume_id
            )));
        };
        let mut problems = Vec::new();
        for cap in &r.capabilities {
            if let Err(e) = self.check_capability("volume_capabilities", cap) {
                problems.push(e.message);
            } else if !record.capabilities.is_empty()
                && !record
                    .capabilities
                    .iter()
                    .any(|c| c.access_type.is_block() == cap.access_type.is_block())
            {
                problems.push(format!(
                    "volume {} was not created for {cap} access",
                    r.volume_id
                ));
            }
        }
        // A volume adopted from a storage that keeps no capabilities keeps
        // no parameters either: nothing to compare.
        let known = !record.capabilities.is_empty();
        if known && !r.parameters.is_empty() && r.parameters != record.parameters {
            problems.push("parameters differ from the ones the volume was created with".into());
        }
        if problems.is_empty() {
            answer(Response::Validated {
                confirmed: Some(r.capabilities),
                volume_context: r.volume_context,
                parameters: r.parameters,
                mutable_parameters: r.mutable_parameters,
                message: String::new(),
            })
        } else {
            answer(Response::Validated {
                confirmed: None,
                volume_context: Attributes::new(),
                parameters: Attributes::new(),
                mutable_parameters: Attributes::new(),
                message: problems.join("; "),
            })
        }
    }

    pub(super) fn list_volumes(&mut self, r: ListVolumes) -> Decision {
        let start = if r.starting_token.is_empty() {
            None
        } else if self.state.volumes.contains_key(&r.starting_token) {
            Some(r.starting_token.clone())
        } else {
            return reject(Status::new(
                crate::Code::Aborted,
                format!(
                    "starting_token {:?} does not name a volume any more; list again from the start",
                    r.starting_token
                ),
            ));
        };
        let mut iter = self.state.volumes.records_from(start.as_deref());
        let limit = if r.max_entries == 0 {
            usize::MAX
        } else {
            r.max_entries as usize
        };
        let entries: Vec<ListedVolume> =
            iter.by_ref().take(limit).map(|(_, v)| listed(&v)).collect();
        if self.config.plant.is(Plant::ListSkipsOne) {
            iter.next();
        }
        let next_token = iter
            .next()
            .map(|(id, _)| id.to_string())
            .unwrap_or_default();
        answer(Response::Volumes {
            entries,
            next_token,
        })
    }

    pub(super) fn get_capacity(&mut self, r: GetCapacity) -> Decision {
        for cap in &r.capabilities {
            if let Err(e) = self.check_capability("volume_capabilities", cap) {
                // An unsupported capability has no capacity (CSI: report 0).
                let _ = e;
                return answer(Response::Capacity {
                    available_bytes: 0,
                    maximum_volume_size: None,
                    minimum_volume_size: None,
                });
            }
        }
        Decision::Execute {
            key: String::new(),
            plan: Plan::GetCapacity {
                capabilities: r.capabilities,
                parameters: r.parameters,
                accessible_topology: r.accessible_topology,
            },
        }
    }

    pub(super) fn controller_expand(&mut self, r: ControllerExpand) -> Decision {
        if let Some(cap) = &r.capability
            && let Err(e) = self.check_capability("volume_capability", cap)
        {
            return reject(e);
        }
        let Some(record) = self.state.volumes.unpacked(&r.volume_id) else {
            return reject(Status::not_found(format!(
                "volume {} does not exist",
                r.volume_id
            )));
        };
        if self.state.reading(&r.volume_id) {
            return reject(Status::aborted_pending(&r.volume_id));
        }
        let range = r.capacity;
        if range.limit_bytes != 0 && range.limit_bytes < range.required_bytes {
            return reject(Status::invalid(format!(
                "capacity_range: limit_bytes {} is smaller than required_bytes {}",
                range.limit_bytes, range.required_bytes
            )));
        }
        let current = record.volume.capacity_bytes;
        if range.limit_bytes != 0 && current > range.limit_bytes {
            return reject(Status::new(
                crate::Code::OutOfRange,
                format!(
                    "volume {} already has {current} bytes, more than limit_bytes {}; volumes cannot shrink",
                    r.volume_id, range.limit_bytes
                ),
            ));
        }
        if current >= range.required_bytes {
            return answer(Response::ControllerExpanded {
                capacity_bytes: current,
                node_expansion_required: record.node_expansion_required,
            });
        }
        if !record.published.is_empty()
            && !self
                .config
                .plugin_capabilities
                .contains(&PluginCapability::OnlineExpansion)
        {
            return reject(Status::failed_precondition(format!(
                "volume {} is published and driver {} cannot expand volumes online",
                r.volume_id, self.config.name
            )));
        }
        Decision::Execute {
            key: r.volume_id,
            plan: Plan::ControllerExpand {
                volume: record.volume.clone(),
                capacity: range,
                capability: r.capability,
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn controller_expanded(
        &mut self,
        id: &str,
        range: CapacityRange,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let (capacity_bytes, node_expansion_required) = match result? {
            Outcome::ControllerExpanded {
                capacity_bytes,
                node_expansion_required,
            } => (capacity_bytes, node_expansion_required),
            other => return Err(unexpected("ControllerExpandVolume", &other)),
        };
        if !range.admits(capacity_bytes) {
            return Err(Status::internal(format!(
                "Backend::controller_expand answered {capacity_bytes} bytes for volume {id}, but the request asked for {range}: a bug in the backend"
            )));
        }
        self.state.volumes.update(id, |v| {
            v.volume.capacity_bytes = v.volume.capacity_bytes.max(capacity_bytes);
            v.node_expansion_required = node_expansion_required;
        });
        Ok(Response::ControllerExpanded {
            capacity_bytes,
            node_expansion_required,
        })
    }

    /// The volume as recorded; its mutable parameters as they are now (set
    /// at creation or by ControllerModifyVolume) are reported in its
    /// `volume_context`, beside (never over) the backend's own keys.
    pub(super) fn controller_get_volume(&mut self, id: &str) -> Decision {
        let Some(v) = self.state.volumes.unpacked(id) else {
            return reject(Status::not_found(format!("volume {id} does not exist")));
        };
        let mut entry = listed(&v);
        for (k, value) in &v.mutable_parameters {
            let context = &mut entry.volume.volume_context;
            if !context.contains_key(k) {
                context.insert(k.to_string(), value.to_string());
            }
        }
        answer(Response::ControllerVolume(entry))
    }

    pub(super) fn controller_modify(&mut self, r: ControllerModify) -> Decision {
        let Some(record) = self.state.volumes.unpacked(&r.volume_id) else {
            return reject(Status::not_found(format!(
                "volume {} does not exist",
                r.volume_id
            )));
        };
        if r.mutable_parameters
            .iter()
            .all(|(k, v)| record.mutable_parameters.get(k) == Some(v))
        {
            return answer(Response::Empty);
        }
        Decision::Execute {
            key: r.volume_id,
            plan: Plan::ControllerModify {
                volume: record.volume.clone(),
                mutable_parameters: r.mutable_parameters,
                secrets: r.secrets,
            },
        }
    }

    pub(super) fn controller_modified(
        &mut self,
        id: &str,
        params: Attributes,
        result: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        result?;
        self.state
            .volumes
            .update(id, |v| v.mutable_parameters.extend(params));
        Ok(Response::Empty)
    }
}

fn listed(v: &VolumeRecord) -> ListedVolume {
    ListedVolume {
        volume: v.volume.clone(),
        published_node_ids: v.published.keys().cloned().collect(),
        condition: Some(VolumeCondition::default()),
    }
}

/// The size to suggest to the backend: `required_bytes`, else the driver
/// default lowered to `limit_bytes`.
fn default_size(range: CapacityRange, default: u64) -> u64 {
    if range.required_bytes > 0 {
        return range.required_bytes;
    }
    if range.limit_bytes != 0 {
        default.min(range.limit_bytes)
    } else {
        default
    }
}

/// Why an existing volume cannot answer a CreateVolume with the same name.
fn incompatibility(v: &VolumeRecord, r: &CreateVolume) -> Option<String> {
    if v.volume.capacity_bytes != 0 && !r.capacity.admits(v.volume.capacity_bytes) {
        return Some(format!(
            "{} bytes, and this request asks for {}",
            v.volume.capacity_bytes, r.capacity
        ));
    }
    let mut have = v.capabilities.clone();
    let mut want = r.capabilities.clone();
    have.sort();
    have.dedup();
    want.sort();
    want.dedup();
    // Empty: adopted from a storage that does not say (see StoredVolume).
    if !have.is_empty() && have != want {
        return Some("different volume_capabilities".into());
    }
    if v.parameters != r.parameters {
        return Some("different parameters".into());
    }
    if v.mutable_parameters != r.mutable_parameters {
        return Some("different mutable_parameters".into());
    }
    if !accessible_from(&v.volume.accessible_topology, r.accessibility.as_ref()) {
        return Some(format!(
            "accessible topology {:?}, which none of this request's requisite segments allows",
            v.volume.accessible_topology
        ));
    }
    if v.volume.content_source != r.content_source {
        return Some("a different volume_content_source".into());
    }
    None
}

/// The CSI spec's test for a volume asked for again (or made): see
/// [`TopologyRequirement::admits`]. (Comparing the requirements themselves
/// would refuse a retry made after the cluster's topology changed, for
/// ever, although the volume is where it may be.)
fn accessible_from(at: &[Topology], wanted: Option<&TopologyRequirement>) -> bool {
    wanted.is_none_or(|w| w.admits(at))
}

pub(super) fn unexpected(method: &str, outcome: &Outcome) -> Status {
    Status::internal(format!(
        "the backend answered {method} with an unexpected outcome {outcome:?}"
    ))
}
