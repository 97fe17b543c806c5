//! The safety invariants, checked after every step (and on every CSI call,
//! against what really exists in the simulated storage), and the liveness
//! checks run once faults stop. Written once, used by the simulator, the
//! tests and the fuzz targets.

use std::collections::BTreeMap;

use super::backend::Storage;
use super::{ROOT, Sim};
use crate::control::CsiCall;
use crate::driver::Request;
use crate::kubelet::Observed;

/// (node, volume handle) → needed there.
type Needed = BTreeMap<(String, String), bool>;
/// (node, target path, volume handle, pod) of a volume a pod needs published.
type Target = (String, String, String, String);
use crate::model::*;
use crate::store::Store;

/// An invariant that failed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Violation {
    /// The step it broke at.
    pub step: u64,
    /// Which invariant: shrinking keeps a run only while the same one fails.
    pub kind: &'static str,
    /// What broke, for a person.
    pub what: String,
}

fn is_target(path: &str) -> bool {
    path.contains("/pods/")
}

/// The PV whose CSI handle is `handle`.
fn pv_of<'a>(store: &'a Store, handle: &str) -> Option<&'a PersistentVolume> {
    store.objects().find_map(|o| match o {
        Object::Pv(pv)
            if pv
                .spec
                .csi
                .as_ref()
                .is_some_and(|c| c.volume_handle == handle) =>
        {
            Some(pv)
        }
        _ => None,
    })
}

impl Sim {
    /// Once settled: every storage snapshot has a content naming it (none
    /// leaked), and no content whose policy is Delete outlives its
    /// VolumeSnapshot.
    fn snapshots_converged(&self, found: &mut Vec<String>) {
        // A member of a group is named by its content, or (until the
        // members are made) by its group's content.
        let handles: std::collections::BTreeSet<&str> = self
            .store
            .objects()
            .flat_map(|o| match o {
                Object::Content(c) => c.snapshot_handle().into_iter().collect(),
                Object::GroupContent(c) => c
                    .status
                    .iter()
                    .flat_map(|s| &s.volume_snapshot_info_list)
                    .map(|i| i.snapshot_handle.as_str())
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        for id in self.storage.snapshots.keys() {
            if !handles.contains(id.as_str()) {
                found.push(format!(
                    "storage snapshot {id} leaked: no VolumeSnapshotContent names it"
                ));
            }
        }
        for o in self.store.objects() {
            let Object::Content(c) = o else { continue };
            let r = &c.spec.volume_snapshot_ref;
            let snapshot = self
                .store
                .get(&ObjectKey::new(Kind::VolumeSnapshot, &r.namespace, &r.name))
                .filter(|s| s.meta().uid == r.uid);
            if snapshot.is_none() && c.spec.deletion_policy == DeletionPolicy::Delete {
                found.push(format!(
                    "VolumeSnapshotContent {} outlives its VolumeSnapshot {}/{} with policy Delete",
                    c.metadata.name, r.namespace, r.name
                ));
            }
        }
        for o in self.store.objects() {
            let Object::GroupContent(c) = o else { continue };
            let r = &c.spec.volume_group_snapshot_ref;
            let group = self
                .store
                .get(&ObjectKey::new(
                    Kind::VolumeGroupSnapshot,
                    &r.namespace,
                    &r.name,
                ))
                .filter(|g| g.meta().uid == r.uid);
            if group.is_none() && c.spec.deletion_policy == DeletionPolicy::Delete {
                found.push(format!(
                    "VolumeGroupSnapshotContent {} outlives its VolumeGroupSnapshot {}/{} with policy Delete",
                    c.metadata.name, r.namespace, r.name
                ));
            }
        }
    }
}

/// What a restarted kubelet finds mounted on its node.
pub fn observed_mounts(storage: &Storage, store: &Store, node: &str) -> Observed {
    let mut o = Observed::default();
    for (path, handle) in storage.mounts.get(node).into_iter().flatten() {
        let Some(pv) = pv_of(store, handle) else {
            continue;
        };
        if is_target(path) {
            // <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount
            let uid = path
                .trim_start_matches(&format!("{ROOT}/pods/"))
                .split('/')
                .next()
                .unwrap_or("");
            o.published
                .push((uid.to_string(), pv.name().to_string(), handle.clone()));
        } else {
            o.staged.push((pv.name().to_string(), handle.clone()));
        }
    }
    o
}

impl Sim {
    pub(super) fn violate(&mut self, kind: &'static str, what: String) {
        if !self.violations.iter().any(|v| v.what == what) {
            self.violations.push(Violation {
                step: self.stats.steps,
                kind,
                what,
            });
        }
    }

    /// Safety on a CSI call, judged by what exists when it is made.
    /// Why `who`'s DeleteVolume of `volume` is unsafe, if it is: the
    /// volume is attached, staged or published, its PV says Retain, or it
    /// holds data its claim was not deleted for.
    fn unsafe_delete(&self, who: &str, volume: &str) -> Option<(&'static str, String)> {
        let s = &self.storage;
        if s.attached.iter().any(|(h, _)| h == volume) {
            let what = format!("{who} deletes {volume} while it is attached");
            return Some(("delete while in use", what));
        }
        if s.mounts.values().any(|m| m.values().any(|h| h == volume)) {
            let what = format!("{who} deletes {volume} while it is staged or published");
            return Some(("delete while in use", what));
        }
        let pv = pv_of(&self.store, volume)?;
        let claim_deleted_with_delete = pv
            .spec
            .claim_ref
            .as_ref()
            .and_then(|c| self.deleted_claims.get(&c.uid))
            .is_some_and(|p| *p == Some(ReclaimPolicy::Delete));
        if pv.reclaim_policy() == ReclaimPolicy::Retain {
            let what = format!(
                "{who} deletes {volume} although its PV {} says Retain",
                pv.name()
            );
            return Some(("Retain deleted", what));
        }
        if s.volumes.get(volume) == Some(&true) && !claim_deleted_with_delete {
            let what = format!(
                "{who} deletes {volume}, which holds data, although its claim was not deleted under Delete"
            );
            return Some(("data lost", what));
        }
        None
    }

    pub(super) fn check_call(&mut self, who: &str, node: Option<&str>, call: &CsiCall) {
        self.stats.checks += 1;
        let s = &self.storage;
        let mut bad = None;
        match call {
            Request::NodeUnstage(r) => {
                let node = node.unwrap_or("");
                if s.mounts_of(node, &r.volume_id).iter().any(|p| is_target(p)) {
                    bad = Some((
                        "unstage while published",
                        format!(
                            "{who} unstages {} on {node} while a pod still has it published",
                            r.volume_id
                        ),
                    ));
                }
            }
            Request::ControllerUnpublish(r) => {
                for (n, mounts) in &s.mounts {
                    if r.node_id.as_ref().is_none_or(|x| x == n)
                        && mounts.values().any(|h| *h == r.volume_id)
                    {
                        bad = Some((
                            "detach while staged",
                            format!(
                                "{who} detaches {} from {n} while it is staged or published there",
                                r.volume_id
                            ),
                        ));
                    }
                }
            }
            Request::ControllerPublish(r) => {
                let single = pv_of(&self.store, &r.volume_id)
                    .is_some_and(|pv| !crate::attach::multi_attach_allowed(pv));
                let elsewhere: Vec<&String> = s
                    .attached
                    .iter()
                    .filter(|(h, n)| *h == r.volume_id && *n != r.node_id)
                    .map(|(_, n)| n)
                    .collect();
                if single && !elsewhere.is_empty() {
                    bad = Some((
                        "single-node volume on two nodes",
                        format!(
                            "{who} attaches single-node volume {} to {} while it is attached to {elsewhere:?}",
                            r.volume_id, r.node_id
                        ),
                    ));
                }
            }
            Request::DeleteVolume(r) => bad = self.unsafe_delete(who, &r.volume_id),
            _ => {}
        }
        if let Some((kind, what)) = bad {
            self.violate(kind, what);
        }
    }

    /// Safety over the whole world, after every step.
    pub(super) fn check_world(&mut self) {
        self.stats.checks += 1;
        let mut found = Vec::new();
        // What reads only the objects and storage is checked again only
        // when either changed.
        let at = (self.store.version(), self.storage_writes);
        let world_changed = self.world_checked_at != Some(at);
        self.world_checked_at = Some(at);
        if world_changed && let Err(e) = crate::binder::check_one_to_one(self.store.objects()) {
            found.push(("binding not one-to-one", e.to_string()));
        }
        // Every machine's own invariants, for the machines that changed.
        for (a, unchecked) in self.actors.iter().zip(&mut self.unchecked) {
            if std::mem::take(unchecked)
                && let Err(e) = a.check_invariants()
            {
                found.push(("machine invariant", e.to_string()));
            }
        }
        if world_changed {
            self.check_attachments_and_snapshots(&mut found);
            self.check_topology(&mut found);
            self.check_attributes(&mut found);
            self.check_expansions(&mut found);
        }
        for (kind, what) in found {
            self.violate(kind, what.to_string());
        }
        self.check_registrations();
    }

    /// No volume is provisioned outside its class's allowedTopologies: each
    /// segment of a PV's node affinity satisfies one allowed term.
    fn check_topology(&self, found: &mut Vec<(&'static str, String)>) {
        use crate::provision::topology::{Term, flatten, subset};
        for o in self.store.objects() {
            let Object::Pv(pv) = o else { continue };
            let Some(affinity) = pv
                .spec
                .node_affinity
                .as_ref()
                .and_then(|a| a.required.as_ref())
            else {
                continue;
            };
            let class = ObjectKey::new(Kind::StorageClass, "", pv.class());
            let Some(Object::Class(sc)) = self.store.get(&class) else {
                continue;
            };
            if sc.allowed_topologies.is_empty() {
                continue;
            }
            let allowed = flatten(&sc.allowed_topologies);
            for term in &affinity.node_selector_terms {
                let segment: Term = term
                    .match_expressions
                    .iter()
                    .filter_map(|e| Some((e.key.clone(), e.values.first()?.clone())))
                    .collect();
                if !allowed.iter().any(|t| subset(t, &segment)) {
                    found.push((
                        "volume outside its allowed topology",
                        format!(
                            "PV {} is accessible from {segment:?}, which StorageClass {} does not allow",
                            pv.name(),
                            sc.metadata.name
                        ),
                    ));
                }
            }
        }
    }

    /// The invariants over attachments and snapshots: the objects and what
    /// storage holds.
    fn check_attachments_and_snapshots(&self, found: &mut Vec<(&'static str, String)>) {
        // A single-node volume is attached (and wanted) on one node at most.
        let mut nodes_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (h, n) in &self.storage.attached {
            nodes_of.entry(h).or_default().push(n);
        }
        for o in self.store.objects() {
            if let Object::Va(va) = o
                && let Some(Object::Pv(pv)) =
                    self.store
                        .get(&ObjectKey::new(Kind::PersistentVolume, "", va.pv_name()))
                && let Some(csi) = &pv.spec.csi
                && !nodes_of
                    .get(csi.volume_handle.as_str())
                    .is_some_and(|v| v.contains(&va.spec.node_name.as_str()))
            {
                nodes_of
                    .entry(csi.volume_handle.as_str())
                    .or_default()
                    .push(&va.spec.node_name);
            }
        }
        for (h, nodes) in nodes_of {
            if nodes.len() > 1
                && pv_of(&self.store, h).is_some_and(|pv| !crate::attach::multi_attach_allowed(pv))
            {
                found.push((
                    "single-node volume on two nodes",
                    format!(
                        "single-node volume {h} is attached to {}",
                        nodes.join(" and ")
                    ),
                ));
            }
        }
        self.check_snapshots(found);
    }

    /// A snapshot the API shows ready (and not going) exists in storage,
    /// and no volume is restored from one that does not.
    fn check_snapshots(&self, found: &mut Vec<(&'static str, String)>) {
        for o in self.store.objects() {
            if let Object::Content(c) = o
                && c.ready()
                && !c.metadata.deleting()
                && let Some(h) = c.status.as_ref().and_then(|s| s.snapshot_handle.as_deref())
                && !self.storage.snapshots.contains_key(h)
            {
                found.push((
                    "snapshot lost",
                    format!(
                        "VolumeSnapshotContent {} is ready, but the storage has no snapshot {h}",
                        c.metadata.name
                    ),
                ));
            }
        }
        if let Some(v) = self.storage.restored_from_missing.first() {
            found.push((
                "restored from a lost snapshot",
                format!("volume {v}, which the storage no longer has"),
            ));
        }
    }

    /// A claim is removed from the API only once no pod that has not
    /// terminated uses it (pvc-protection). Pods created after its deletion
    /// was asked for do not count: the kubelet never starts them.
    pub(super) fn check_claim_removed(&mut self, c: &PersistentVolumeClaim) {
        let asked = self.delete_asked_at.get(&c.metadata.uid).copied();
        let users: Vec<String> = self
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pod(p)
                    if p.uses_claim(&c.metadata.namespace, &c.metadata.name)
                        && asked.is_none_or(|a| {
                            self.created_at.get(&p.metadata.uid).is_none_or(|t| *t < a)
                        }) =>
                {
                    Some(p.metadata.key())
                }
                _ => None,
            })
            .collect();
        if !users.is_empty() {
            self.violate(
                "claim removed while in use",
                format!(
                    "claim {} was removed while {} still use it",
                    c.metadata.key(),
                    users.join(", ")
                ),
            );
        }
    }

    /// A volume is removed from the API only once it is not Bound
    /// (pv-protection).
    pub(super) fn check_volume_removed(&mut self, pv: &PersistentVolume) {
        if pv.phase() == PvPhase::Bound {
            self.violate(
                "volume removed while bound",
                format!(
                    "volume {} was removed while bound to {}",
                    pv.name(),
                    pv.spec
                        .claim_ref
                        .as_ref()
                        .map_or_else(String::new, |r| format!("{}/{}", r.namespace, r.name))
                ),
            );
        }
    }

    /// Liveness, once faults have stopped and the cluster went quiet: every
    /// running pod's volumes are published on its node; every claim deleted
    /// under Delete has its storage gone; no attachment, stage or mount is
    /// left that no pod needs.
    pub fn check_converged(&mut self) {
        let mut found = Vec::new();
        self.snapshots_converged(&mut found);
        self.registrations_converged(&mut found);
        let (needed, targets) = self.wanted_mounts(&mut found);
        self.mounts_converged(&needed, &targets, &mut found);
        self.storage_converged(&mut found);
        self.attributes_converged(&mut found);
        self.expansions_converged(&mut found);
        self.capacity_converged(&mut found);
        for what in found {
            self.violate("not converged", format!("not converged: {what}"));
        }
    }

    /// Every node's driver is registered: in the watcher, on its CSINode
    /// and in its node-id annotation.
    fn registrations_converged(&self, found: &mut Vec<String>) {
        for n in self.nodes.keys() {
            let on_csinode = matches!(
                self.store.get(&ObjectKey::new(Kind::CsiNode, "", n)),
                Some(Object::CsiNode(c)) if c.driver(super::DRIVER).is_some()
            );
            let annotated = matches!(
                self.store.get(&ObjectKey::new(Kind::Node, "", n)),
                Some(Object::Node(node))
                    if crate::registration::watcher::node_ids(node).contains_key(super::DRIVER)
            );
            if !self.registered(n) || !on_csinode || !annotated {
                found.push(format!(
                    "driver {} is not registered on {n} (watcher {}, CSINode {on_csinode}, annotation {annotated})",
                    super::DRIVER,
                    self.registered(n)
                ));
            }
        }
    }

    /// True when `c` can be provisioned as the user set things up: its
    /// class exists, the VolumeAttributesClass it names is one the storage
    /// can have, and the Secret the class names for CreateVolume does
    /// too (a workload shrunk without its Secret leaves the claim Pending,
    /// rightly).
    fn can_provision(&self, c: &PersistentVolumeClaim) -> bool {
        if !self.attributes_provisionable(c) {
            return false;
        }
        let Some(Object::Class(sc)) =
            self.store
                .get(&ObjectKey::new(Kind::StorageClass, "", c.class()))
        else {
            return false;
        };
        let param = |p: &str| {
            sc.parameters
                .get(&format!("csi.storage.k8s.io/provisioner-secret-{p}"))
        };
        match (param("namespace"), param("name")) {
            (Some(namespace), Some(name)) => self
                .store
                .get(&ObjectKey::new(Kind::Secret, namespace, name))
                .is_some(),
            _ => true,
        }
    }

    /// What the running pods need: (node, handle) pairs staged or
    /// attached, and the (node, target, handle, pod) each pod's volume
    /// must be published at. A pod whose claim never got a volume is
    /// found wanting.
    fn wanted_mounts(&self, found: &mut Vec<String>) -> (Needed, Vec<Target>) {
        let mut needed = Needed::new();
        let mut targets = Vec::new();
        for o in self.store.objects() {
            let Object::Pod(pod) = o else { continue };
            let Some(node) = pod.node() else { continue };
            if pod.terminated() {
                continue;
            }
            for claim in pod.claims() {
                let Some(Object::Pvc(c)) = self.store.get(&ObjectKey::new(
                    Kind::PersistentVolumeClaim,
                    &pod.metadata.namespace,
                    claim,
                )) else {
                    continue;
                };
                let Some(Object::Pv(pv)) =
                    self.store
                        .get(&ObjectKey::new(Kind::PersistentVolume, "", c.volume_name()))
                else {
                    if self.can_provision(c) && !c.metadata.deleting() {
                        found.push(format!(
                            "pod {} waits for claim {} that never got a volume",
                            pod.metadata.key(),
                            c.metadata.key()
                        ));
                    }
                    continue;
                };
                let Some(csi) = &pv.spec.csi else { continue };
                needed.insert((node.to_string(), csi.volume_handle.clone()), true);
                let target = crate::model::names::publish_path(ROOT, &pod.metadata.uid, pv.name());
                let mounted = self
                    .storage
                    .mounts
                    .get(node)
                    .is_some_and(|m| m.contains_key(&target));
                if c.metadata.deleting() && !mounted {
                    // The kubelet starts no pod on a claim being deleted.
                    continue;
                }
                targets.push((
                    node.to_string(),
                    target,
                    csi.volume_handle.clone(),
                    pod.metadata.key(),
                ));
            }
        }
        (needed, targets)
    }

    /// Each target published, and nothing mounted or attached that no
    /// running pod needs.
    fn mounts_converged(&self, needed: &Needed, targets: &[Target], found: &mut Vec<String>) {
        for (node, path, handle, pod) in targets {
            let mounted = self.storage.mounts.get(node).and_then(|m| m.get(path));
            if mounted != Some(handle) {
                found.push(format!(
                    "pod {pod} runs on {node} but {handle} is not published at {path}"
                ));
            }
        }
        for (node, mounts) in &self.storage.mounts {
            for (path, handle) in mounts {
                let wanted = if is_target(path) {
                    targets
                        .iter()
                        .any(|(n, p, h, _)| n == node && p == path && h == handle)
                } else {
                    needed.contains_key(&(node.clone(), handle.clone()))
                };
                if !wanted {
                    found.push(format!("orphan mount of {handle} at {path} on {node}"));
                }
            }
        }
        for (handle, node) in &self.storage.attached {
            if !needed.contains_key(&(node.clone(), handle.clone())) {
                found.push(format!("orphan attachment of {handle} to {node}"));
            }
        }
    }

    /// The storage of every claim deleted under Delete is gone.
    fn storage_converged(&self, found: &mut Vec<String>) {
        let terminating: std::collections::BTreeSet<&str> = self
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pvc(c) => Some(c.metadata.uid.as_str()),
                _ => None,
            })
            .collect();
        for (uid, policy) in &self.deleted_claims {
            // A claim still in the store is held by its pods (pvc-protection).
            if *policy != Some(ReclaimPolicy::Delete) || terminating.contains(uid.as_str()) {
                continue;
            }
            let handle = format!("vol-pvc-{uid}");
            if self.storage.volumes.contains_key(&handle) {
                found.push(format!(
                    "the storage of deleted claim {uid} (Delete) still exists: {handle}"
                ));
            }
        }
    }
}
