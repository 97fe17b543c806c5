//! B2 and B3: the CreateVolume request for a claim, and the PV for a volume.

use super::*;
use crate::control::csi_map;
use crate::driver::{Capability, CapacityRange, Secrets};

/// The `csi.storage.k8s.io/` parameters external-provisioner knows (B2.6).
const KNOWN_PREFIXED: [&str; 17] = [
    "fstype",
    "secret-name",
    "secret-namespace",
    "provisioner-secret-name",
    "provisioner-secret-namespace",
    "controller-publish-secret-name",
    "controller-publish-secret-namespace",
    "node-stage-secret-name",
    "node-stage-secret-namespace",
    "node-publish-secret-name",
    "node-publish-secret-namespace",
    "controller-expand-secret-name",
    "controller-expand-secret-namespace",
    "node-expand-secret-name",
    "node-expand-secret-namespace",
    "controller-modify-secret-name",
    "controller-modify-secret-namespace",
];
const PREFIX: &str = "csi.storage.k8s.io/";

impl ProvisionerReconciler {
    pub(super) fn build_request(
        &self,
        cx: &Cx<Self>,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Result<driver::CreateVolume, String> {
        if claim.spec.selector.is_some() {
            return Err("claim Selector is not supported".into());
        }
        let mut parameters = driver::Attributes::new();
        let mut fs_type = String::new();
        for (k, v) in &class.parameters {
            if let Some(short) = k.strip_prefix(PREFIX) {
                if !KNOWN_PREFIXED.contains(&short) {
                    return Err(format!(
                        "invalid parameter: {k:?} is not a known {PREFIX} parameter"
                    ));
                }
                if short == "fstype" {
                    fs_type = v.to_owned();
                }
            } else {
                parameters.insert(k.to_owned(), v.to_owned());
            }
        }
        if let Some(legacy) = class.parameters.get("fstype") {
            if !fs_type.is_empty() {
                return Err(format!("fstype and {PREFIX}fstype cannot both be set"));
            }
            fs_type = legacy.to_owned();
        }
        if fs_type.is_empty() {
            fs_type = self.config.default_fs_type.clone();
        }
        let volume_name = self.config.volume_name(&claim.metadata.uid);
        if self.config.extra_create_metadata {
            parameters.insert(names::PARAM_PVC_NAME.into(), claim.metadata.name.clone());
            parameters.insert(
                names::PARAM_PVC_NAMESPACE.into(),
                claim.metadata.namespace.clone(),
            );
            parameters.insert(names::PARAM_PV_NAME.into(), volume_name.clone());
        }
        let modes = csi_map::access_modes(&claim.spec.access_modes, self.config.modes)
            .map_err(|e| e.to_string())?;
        if modes.is_empty() {
            return Err("the claim has no access modes".into());
        }
        let access_type =
            csi_map::access_type(&claim.volume_mode(), &fs_type, &class.mount_options);
        let capabilities = modes
            .into_iter()
            .map(|m| Capability {
                access_type: access_type.clone(),
                access_mode: m,
            })
            .collect();
        let content_source = match &claim.data_source() {
            None => None,
            Some(ds) if ds.kind == "PersistentVolumeClaim" => {
                Some(self.clone_source(cx, claim, class, &ds.name)?)
            }
            Some(ds) if ds.kind == "VolumeSnapshot" => {
                Some(self.snapshot_source(cx, claim, class, ds)?)
            }
            // B1.8: other kinds are left to a populator before this is built.
            Some(ds) => {
                return Err(format!(
                    "data source {} {:?} is not supported",
                    ds.kind, ds.name
                ));
            }
        };
        let mutable_parameters = self.mutable_parameters(cx, claim)?;
        Ok(driver::CreateVolume {
            name: volume_name,
            capacity: CapacityRange {
                required_bytes: claim.request().map_or(0, |q| q.bytes()),
                limit_bytes: 0,
            },
            capabilities,
            parameters,
            mutable_parameters,
            secrets: Secrets::default(),
            content_source,
            accessibility: None,
        })
    }

    /// The parameters of the VolumeAttributesClass the claim names (none
    /// when it names none), as upstream's prepareProvision checks it: the
    /// driver must have MODIFY_VOLUME, the class must exist and be this
    /// driver's.
    fn mutable_parameters(
        &self,
        cx: &Cx<Self>,
        claim: &PersistentVolumeClaim,
    ) -> Result<driver::Attributes, String> {
        let Some(name) = claim.volume_attributes_class() else {
            return Ok(driver::Attributes::new());
        };
        if !self.config.modify_volume {
            return Err("CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported".into());
        }
        let Some(Object::AttributesClass(vac)) =
            cx.cache().find(Kind::VolumeAttributesClass, "", name)
        else {
            return Err(format!(
                "volumeattributesclasses.storage.k8s.io {name:?} not found"
            ));
        };
        if vac.driver_name != self.config.driver {
            return Err(format!(
                "VAC {name} referenced in PVC is for driver {} which does not match driver name {}",
                vac.driver_name, self.config.driver
            ));
        }
        Ok(vac.parameters.clone().into_iter().collect())
    }

    /// The snapshot a claim restores from, as upstream's getSnapshotSource
    /// checks it: bound to a content of this class's driver that points
    /// back, ready, with a handle, and no bigger than the claim.
    pub(super) fn snapshot_source(
        &self,
        cx: &Cx<Self>,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        ds: &TypedLocalObjectReference,
    ) -> Result<driver::ContentSource, String> {
        let group = ds.api_group.as_deref().unwrap_or("");
        if group != "snapshot.storage.k8s.io" {
            return Err(format!(
                "the PVC source does not belong to the right APIGroup. Expected snapshot.storage.k8s.io, Got {group}"
            ));
        }
        if !self.config.snapshots {
            return Err(format!(
                "cannot restore from snapshot {}: this provisioner runs without the snapshot kinds (their CRDs are not installed)",
                ds.name
            ));
        }
        let name = &ds.name;
        let Some(Object::Snapshot(s)) =
            cx.cache()
                .find(Kind::VolumeSnapshot, &claim.metadata.namespace, name)
        else {
            return Err(format!(
                "error getting snapshot {name} from api server: volumesnapshots.snapshot.storage.k8s.io {name:?} not found"
            ));
        };
        // One being deleted still serves a restore that began before
        // (its finalizer says so), as upstream's.
        if s.metadata.deleting()
            && !s
                .metadata
                .has_finalizer(names::FINALIZER_PROVISIONER_SNAPSHOT_SOURCE)
        {
            return Err(format!("snapshot {name} is being deleted"));
        }
        let Some(content_name) = s.bound_content() else {
            return Err(format!("snapshot {name} not bound"));
        };
        let Some(Object::Content(c)) =
            cx.cache()
                .find(Kind::VolumeSnapshotContent, "", content_name)
        else {
            return Err(format!(
                "error getting snapshotcontent {content_name} for snapshot {name}"
            ));
        };
        let r = &c.spec.volume_snapshot_ref;
        if r.uid != s.metadata.uid
            || r.namespace != s.metadata.namespace
            || r.name != s.metadata.name
        {
            return Err(format!(
                "snapshotcontent {content_name} for snapshot {name} is bound to a different snapshot"
            ));
        }
        if let Some(source_mode) = &c.spec.source_volume_mode
            && self.config.prevent_volume_mode_conversion
            && *source_mode != claim.volume_mode().as_str()
            && c.metadata.annotation(names::ANN_ALLOW_VOLUME_MODE_CHANGE) != Some("true")
        {
            return Err(format!(
                "requested volume {}/{} modifies the mode of the source volume but does not have permission to do so. {} annotation is not present on snapshotcontent {content_name}",
                claim.metadata.namespace,
                claim.metadata.name,
                names::ANN_ALLOW_VOLUME_MODE_CHANGE
            ));
        }
        if c.spec.driver != class.provisioner {
            return Err(format!(
                "snapshotcontent {content_name} for snapshot {name} is not handled by CSI driver of StorageClass {}",
                class.metadata.name
            ));
        }
        if !s.ready() {
            return Err(format!("snapshot {name} is not Ready"));
        }
        let Some(handle) = c.status.as_ref().and_then(|st| st.snapshot_handle.clone()) else {
            return Err(format!("snapshot handle {name} is not available"));
        };
        if let Some(size) = s.status.as_ref().and_then(|st| st.restore_size.as_ref()) {
            let asked = claim.request().map_or(0, |q| q.bytes());
            if asked < size.bytes() {
                return Err(format!(
                    "requested volume size {asked} is less than the size {} for the source snapshot {name}",
                    size.bytes()
                ));
            }
        }
        Ok(driver::ContentSource::Snapshot(handle))
    }

    /// `request` with its accessibility requirements (see [`topology`]),
    /// or `None` when there are none to give now: the failure is told and
    /// retried, or — the selected node is gone — the node selection is
    /// dropped so the scheduler chooses again.
    pub(super) fn place(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        uid: &str,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        mut request: driver::CreateVolume,
    ) -> Option<driver::CreateVolume> {
        if !self.config.topology {
            return Some(request);
        }
        let placement = topology::Placement {
            driver: &self.config.driver,
            claim: &claim.metadata.name,
            allowed: if self
                .config
                .plant
                .is(crate::plant::Plant::IgnoreAllowedTopologies)
            {
                &[]
            } else {
                &class.allowed_topologies
            },
            selected_node: claim.metadata.annotation(names::ANN_SELECTED_NODE),
            strict: self.config.strict_topology,
            immediate: self.config.immediate_topology,
        };
        match topology::requirement(&placement, cx.cache()) {
            Ok(accessibility) => {
                request.accessibility = accessibility;
                Some(request)
            }
            Err(e @ topology::TopologyError::Reschedule(_)) => {
                self.event(
                    cx,
                    Event::warning(key.clone(), reason::PROVISIONING_FAILED, e.to_string()),
                );
                let mut c = claim.clone();
                c.metadata.annotations.remove(names::ANN_SELECTED_NODE);
                self.api(
                    cx,
                    Call::DropSelectedNode {
                        uid: uid.to_string(),
                    },
                    ApiCall::Update(Object::Pvc(c)),
                );
                None
            }
            Err(e) => {
                self.refuse(cx, key, uid.to_string(), e.to_string());
                None
            }
        }
    }

    /// B3.1 and B3.3: the PV for a created volume.
    pub(super) fn build_pv(
        &self,
        p: &Provisioning,
        claim: Option<&PersistentVolumeClaim>,
        v: &driver::Volume,
    ) -> PersistentVolume {
        let requested = p.request.capacity.required_bytes;
        let mut pv = PersistentVolume::new(&p.request.name);
        let capacity = if v.capacity_bytes == 0 {
            requested
        } else {
            v.capacity_bytes
        };
        pv.spec
            .capacity
            .insert("storage".into(), Quantity::from_bytes(capacity));
        let (modes, mode, namespace, name, class) = match claim {
            Some(c) => (
                c.spec.access_modes.clone(),
                c.spec.volume_mode.clone(),
                c.metadata.namespace.clone(),
                c.metadata.name.clone(),
                c.class().to_string(),
            ),
            None => {
                let (ns, n) = (p.claim.namespace.to_string(), p.claim.name.to_string());
                (
                    vec![AccessMode::ReadWriteOnce],
                    None,
                    ns,
                    n,
                    p.class.metadata.name.clone(),
                )
            }
        };
        pv.spec.access_modes = modes;
        pv.spec.volume_mode = mode;
        pv.spec.mount_options = p.class.mount_options.clone();
        pv.spec.persistent_volume_reclaim_policy = Some(p.class.reclaim_policy());
        pv.spec.storage_class_name = Some(class);
        pv.spec.volume_attributes_class_name = p.attributes_class.clone();
        let fs_type = match p.request.capabilities.first().map(|c| &c.access_type) {
            Some(driver::AccessType::Mount { fs_type, .. }) => fs_type.clone(),
            _ => String::new(),
        };
        let mut attributes = v.volume_context.clone();
        attributes.insert(
            names::ATTR_PROVISIONER_IDENTITY.into(),
            self.config.identity.clone(),
        );
        // As upstream: only a request of the one capability ReadOnlyMany.
        let read_only = self.config.controller_publish_readonly
            && matches!(
                &p.request.capabilities[..],
                [c] if c.access_mode == driver::AccessMode::MultiNodeReaderOnly
            );
        pv.spec.csi = Some(CsiSource {
            driver: self.config.driver.clone(),
            volume_handle: v.volume_id.clone(),
            read_only,
            fs_type,
            volume_attributes: attributes,
            ..Default::default()
        });
        if !v.accessible_topology.is_empty() && self.config.topology {
            pv.spec.node_affinity = Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: v
                        .accessible_topology
                        .iter()
                        .map(|t| NodeSelectorTerm {
                            match_expressions: t
                                .iter()
                                .map(|(k, v)| NodeSelectorRequirement {
                                    key: k.to_string(),
                                    operator: "In".into(),
                                    values: vec![v.to_string()],
                                })
                                .collect(),
                        })
                        .collect(),
                }),
            });
        }
        pv.spec.claim_ref = Some(ObjectReference {
            kind: "PersistentVolumeClaim".into(),
            api_version: "v1".into(),
            namespace,
            name,
            uid: p.uid.clone(),
            // The claim's version provisioned for, as upstream's
            // GetReference records it.
            resource_version: claim
                .map(|c| c.metadata.resource_version.clone())
                .unwrap_or_default(),
        });
        let ann = &mut pv.metadata.annotations;
        ann.insert(
            names::ANN_PROVISIONED_BY.into(),
            p.class.provisioner.clone(),
        );
        p.secrets.write_on(&mut pv);
        pv.metadata
            .finalizers
            .push(names::FINALIZER_EXTERNAL_PROVISIONER.into());
        pv
    }
}
