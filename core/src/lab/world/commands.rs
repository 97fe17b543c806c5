//! The user's commands on the world (`lab apply`, `scale`, `resize`,
//! `delete`) and the queries the demo and the tests read it with.

use std::collections::BTreeMap;

use crate::Tick;
use crate::control::{ApiCall, ApiResult};
use crate::model::deployment::{DEPLOYMENT_LABEL, place};
use crate::model::*;

use serde::{Deserialize, Serialize};

use super::{CommandError, World};

/// A user's command, as `volplane lab` sends it to a running lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Command {
    /// Apply manifests (YAML or JSON).
    Apply {
        /// The manifests.
        text: String,
    },
    /// Delete an object.
    Delete {
        /// `kind/name`.
        what: String,
    },
    /// Scale a deployment.
    Scale {
        /// The deployment.
        name: String,
        /// How many pods.
        replicas: u32,
    },
    /// Ask for a claim to grow.
    Resize {
        /// The claim.
        claim: String,
        /// Its new size (`128Mi`).
        size: String,
    },
    /// Say what the lab holds.
    Status,
}

impl Command {
    /// Whether the command changes the cluster (and so is worth waiting for).
    pub fn writes(&self) -> bool {
        !matches!(self, Command::Status)
    }
}

impl World {
    /// Carries out `command`; returns what to tell the user.
    pub fn command(&mut self, now: Tick, command: Command) -> Result<String, CommandError> {
        match command {
            Command::Apply { text } => self.apply(now, &text).map(|done| done.join("\n")),
            Command::Delete { what } => self.delete(now, &what),
            Command::Scale { name, replicas } => self.scale(now, &name, replicas),
            Command::Resize { claim, size } => self.resize(now, &claim, &size),
            Command::Status => Ok(self.status()),
        }
    }

    /// `lab apply`: creates each object, or updates it when it exists.
    /// Deployments become pods.
    pub fn apply(&mut self, now: Tick, text: &str) -> Result<Vec<String>, CommandError> {
        let (objects, unknown) = parse_manifests(text)?;
        let mut deployments = Vec::new();
        for u in &unknown {
            if u.kind != "Deployment" {
                return Err(CommandError::Refused(format!(
                    "kind {:?} is not supported by the lab (StorageClass, PersistentVolumeClaim, \
                     PersistentVolume, Pod, Deployment, VolumeSnapshotClass, VolumeSnapshot, \
                     VolumeSnapshotContent)",
                    u.kind
                )));
            }
            deployments.push(
                Deployment::from_unknown(u).map_err(|e| CommandError::Refused(e.to_string()))?,
            );
        }
        let mut done = Vec::new();
        for mut o in objects {
            let namespaced = matches!(o, Object::Pvc(_) | Object::Pod(_) | Object::Snapshot(_));
            if namespaced && o.meta().namespace.is_empty() {
                o.meta_mut().namespace = "default".into();
            }
            if let Object::Pod(p) = &mut o
                && p.node().is_none()
            {
                let node = place(self.scheduled, &self.nodes)
                    .unwrap_or_default()
                    .to_string();
                self.scheduled += 1;
                p.spec.node_name = Some(node);
            }
            let key = o.key();
            let call = match self.store.get(&key) {
                Some(existing) => {
                    o.meta_mut().resource_version = existing.meta().resource_version.clone();
                    o.meta_mut().uid = existing.meta().uid.clone();
                    ApiCall::Update(o)
                }
                None => ApiCall::Create(o),
            };
            let verb = if matches!(call, ApiCall::Create(_)) {
                "created"
            } else {
                "configured"
            };
            match self.write(now, call) {
                ApiResult::Ok(_) => done.push(format!("{key} {verb}")),
                other => {
                    return Err(CommandError::Refused(format!("{key}: {other:?}")));
                }
            }
        }
        for d in deployments {
            let name = d.metadata.name.clone();
            let replicas = d.replicas();
            let verb = if self.deployments.contains_key(&name) {
                "configured"
            } else {
                "created"
            };
            self.deployments.insert(name.clone(), d);
            self.scale(now, &name, replicas)?;
            done.push(format!("deployment/{name} {verb}"));
        }
        Ok(done)
    }

    /// `lab scale deployment/NAME --replicas N`: creates replicas
    /// `0..N` that are missing and deletes those at `N` and above, highest
    /// first.
    pub fn scale(&mut self, now: Tick, name: &str, replicas: u32) -> Result<String, CommandError> {
        let Some(d) = self.deployments.get_mut(name) else {
            return Err(CommandError::Refused(format!(
                "deployments.apps \"{name}\" not found"
            )));
        };
        d.spec.replicas = Some(replicas);
        let d = d.clone();
        let existing: BTreeMap<u32, ObjectKey> = self
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pod(p)
                    if p.metadata.labels.get(DEPLOYMENT_LABEL) == Some(&d.metadata.name) =>
                {
                    let index = p.metadata.name.rsplit('-').next()?.parse().ok()?;
                    Some((index, o.key()))
                }
                _ => None,
            })
            .collect();
        for (index, key) in existing.iter().rev() {
            if *index >= replicas {
                self.write(now, ApiCall::Delete(key.clone()));
            }
        }
        for index in 0..replicas {
            if !existing.contains_key(&index) {
                let Some(node) = place(index, &self.nodes).map(str::to_string) else {
                    return Err(CommandError::Refused("the lab has no nodes".into()));
                };
                self.write(now, ApiCall::Create(Object::Pod(d.pod(index, &node))));
            }
        }
        Ok(format!("deployment.apps/{name} scaled to {replicas}"))
    }

    /// `lab resize pvc/NAME SIZE`.
    pub fn resize(&mut self, now: Tick, claim: &str, size: &str) -> Result<String, CommandError> {
        let q = Quantity::parse(size)
            .map_err(|e| CommandError::Refused(format!("size {size:?}: {e}")))?;
        let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", claim);
        let Some(Object::Pvc(mut c)) = self.store.get(&key).cloned() else {
            return Err(CommandError::Refused(format!(
                "persistentvolumeclaims \"{claim}\" not found"
            )));
        };
        c.spec.resources.requests.insert("storage".into(), q);
        match self.write(now, ApiCall::Update(Object::Pvc(c))) {
            ApiResult::Ok(_) => Ok(format!("persistentvolumeclaim/{claim} resized to {size}")),
            other => Err(CommandError::Refused(format!("{key}: {other:?}"))),
        }
    }

    /// `lab delete KIND/NAME`.
    pub fn delete(&mut self, now: Tick, what: &str) -> Result<String, CommandError> {
        let (kind, name) = what.split_once('/').ok_or_else(|| {
            CommandError::Refused(format!("{what:?}: expected KIND/NAME, as pvc/data"))
        })?;
        let (kind, ns) = match kind.to_ascii_lowercase().as_str() {
            "pvc" | "persistentvolumeclaim" | "persistentvolumeclaims" => {
                (Kind::PersistentVolumeClaim, "default")
            }
            "pv" | "persistentvolume" | "persistentvolumes" => (Kind::PersistentVolume, ""),
            "pod" | "pods" => (Kind::Pod, "default"),
            "sc" | "storageclass" | "storageclasses" => (Kind::StorageClass, ""),
            "volumesnapshot" | "volumesnapshots" | "vs" => (Kind::VolumeSnapshot, "default"),
            "volumesnapshotcontent" | "volumesnapshotcontents" | "vsc" => {
                (Kind::VolumeSnapshotContent, "")
            }
            "volumesnapshotclass" | "volumesnapshotclasses" | "vsclass" => {
                (Kind::VolumeSnapshotClass, "")
            }
            "deployment" | "deployments" | "deploy" => {
                self.scale(now, name, 0)?;
                self.deployments.remove(name);
                return Ok(format!("deployment.apps \"{name}\" deleted"));
            }
            other => {
                return Err(CommandError::Refused(format!(
                    "the lab cannot delete kind {other:?} (pvc, pv, pod, sc, volumesnapshot, volumesnapshotcontent, volumesnapshotclass, deployment)"
                )));
            }
        };
        let key = ObjectKey::new(kind, ns, name);
        match self.write(now, ApiCall::Delete(key.clone())) {
            ApiResult::Ok(_) => Ok(format!("{key} deleted")),
            ApiResult::NotFound => Err(CommandError::Refused(format!("{key} not found"))),
            other => Err(CommandError::Refused(format!("{key}: {other:?}"))),
        }
    }
}

/// Queries the demo and the tests read the world with.
impl World {
    /// The VolumeSnapshot `name` in the default namespace.
    pub fn volume_snapshot(&self, name: &str) -> Option<&VolumeSnapshot> {
        let key = ObjectKey::new(Kind::VolumeSnapshot, "default", name);
        match self.store.get(&key) {
            Some(Object::Snapshot(s)) => Some(s),
            _ => None,
        }
    }

    /// The VolumeSnapshotContents there are.
    pub fn snapshot_contents(&self) -> usize {
        self.store
            .objects()
            .filter(|o| o.kind() == Kind::VolumeSnapshotContent)
            .count()
    }

    /// The claim `name` in the default namespace.
    pub fn claim(&self, name: &str) -> Option<&PersistentVolumeClaim> {
        let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", name);
        self.store.get(&key).and_then(Object::as_pvc)
    }

    /// The PV `name`.
    pub fn pv(&self, name: &str) -> Option<&PersistentVolume> {
        let key = ObjectKey::new(Kind::PersistentVolume, "", name);
        self.store.get(&key).and_then(Object::as_pv)
    }

    /// The pod `name` in the default namespace.
    pub fn pod(&self, name: &str) -> Option<&Pod> {
        let key = ObjectKey::new(Kind::Pod, "default", name);
        self.store.get(&key).and_then(Object::as_pod)
    }

    /// True when the pod's container started.
    pub fn running(&self, pod: &str) -> bool {
        self.pod(pod)
            .is_some_and(|p| p.status.phase == Some(PodPhase::Running))
    }

    /// Nodes with a VolumeAttachment for the PV (attached, or being
    /// attached or detached).
    pub fn attached_to(&self, pv: &str) -> Vec<String> {
        self.store
            .objects()
            .filter_map(|o| match o {
                Object::Va(va) if va.pv_name() == pv => Some(va.spec.node_name.clone()),
                _ => None,
            })
            .collect()
    }

    /// The pod's published volume targets on its node.
    pub fn targets(&self, pod: &str) -> Vec<String> {
        let Some(p) = self.pod(pod) else {
            return Vec::new();
        };
        let Some(k) = p.node().and_then(|n| self.kubelets.get(n)) else {
            return Vec::new();
        };
        k.actual()
            .mounts
            .values()
            .filter(|m| m.pod == p.metadata.uid)
            .map(|m| m.target.clone())
            .collect()
    }

    /// Volumes staged on a node's kubelet.
    pub fn staged_on(&self, node: &str) -> usize {
        self.kubelets
            .get(node)
            .map_or(0, |k| k.actual().devices.len())
    }

    /// True when an event with `reason` mentions `containing`.
    pub fn has_event(&self, reason: &str, containing: &str) -> bool {
        self.events
            .iter()
            .any(|e| e.reason == reason && e.message.contains(containing))
    }
}
