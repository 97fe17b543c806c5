//! Workloads: what users do to the simulated cluster — generated from a
//! seed, or loaded from manifests — and playing one to the end.

use super::{Rng, Sim, SimConfig};
use crate::control::ApiCall;
use crate::model::*;

/// The Secret (namespace, name) holding the driver's credentials, which
/// a generated workload's classes name for the controller calls.
const CREDENTIALS: (&str, &str) = ("kube-system", "sim-creds");
/// Its one key and value.
const TOKEN: (&str, &str) = ("token", "sim-token");

/// What the driver's controller calls must carry.
fn driver_credentials() -> crate::driver::Secrets {
    crate::driver::Secrets([(TOKEN.0.to_string(), TOKEN.1.to_string())].into())
}

/// One user action.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Action {
    /// Create a storage class.
    Class {
        /// Its name.
        name: String,
        /// Its reclaim policy.
        policy: ReclaimPolicy,
        /// It names the Secret holding the driver's credentials for the
        /// controller calls (which the driver then requires).
        credentials: bool,
        /// Its volumes may only be in this zone (`allowedTopologies`);
        /// `None`: anywhere.
        zone: Option<String>,
    },
    /// Create a claim.
    Claim {
        /// Its name.
        name: String,
        /// Its class.
        class: String,
        /// Its access mode.
        mode: AccessMode,
        /// The VolumeAttributesClass it names, if any.
        attributes: Option<String>,
    },
    /// Schedule a pod using `claim` on node `node` (a single-node claim's pods
    /// follow its first pod, as a scheduler would place them).
    Pod {
        /// Its name.
        name: String,
        /// The claim it uses.
        claim: String,
        /// The node it is scheduled to (an index).
        node: usize,
    },
    /// Delete a pod.
    DeletePod {
        /// Its name.
        name: String,
    },
    /// Delete a claim, also while pods use it (pvc-protection holds it).
    DeleteClaim {
        /// Its name.
        name: String,
    },
    /// Delete the volume a claim is bound to (an administrator's mistake:
    /// pv-protection holds it while it is bound). Not generated at random:
    /// the attacher then retries a refused attach for any new pod forever.
    DeleteVolume {
        /// The claim.
        claim: String,
    },
    /// Grow a claim by 1 GiB.
    Resize {
        /// The claim.
        claim: String,
    },
    /// Ask a claim for more than the storage holds: the expansion is
    /// infeasible (OUT_OF_RANGE).
    Overgrow {
        /// The claim.
        claim: String,
    },
    /// Take back a growth not yet done: lower a claim's request to 1 GiB
    /// above its capacity (RecoverVolumeExpansionFailure lets a user).
    TakeBack {
        /// The claim.
        claim: String,
    },
    /// Name another VolumeAttributesClass on a claim (`gold`, `silver`,
    /// `infeasible` — whose value the storage refuses — or one that does
    /// not exist).
    Modify {
        /// The claim.
        claim: String,
        /// The class it names from now on.
        class: String,
    },
    /// A malformed plugin puts a registration socket in a node's
    /// registry (another type, no versions, no v1 version): the kubelet must
    /// refuse it and keep the real driver's registration.
    RoguePlugin {
        /// The node (an index).
        node: usize,
        /// Which malformation (an index into the list).
        kind: usize,
    },
    /// Snapshot a claim (a VolumeSnapshot of class `snapshots`).
    Snapshot {
        /// The VolumeSnapshot's name.
        name: String,
        /// The claim.
        claim: String,
    },
    /// Delete a VolumeSnapshot.
    DeleteSnapshot {
        /// Its name.
        name: String,
    },
    /// Create a claim restored from a VolumeSnapshot.
    Restore {
        /// The claim's name.
        name: String,
        /// The VolumeSnapshot.
        snapshot: String,
    },
    /// A VolumeGroupSnapshot (class `groups`) of the claims labelled
    /// `group=g<group>` (claim `c<n>` has label `g<n % 2>`).
    GroupSnapshot {
        /// The VolumeGroupSnapshot's name.
        name: String,
        /// Which label value it selects.
        group: usize,
    },
    /// Delete a VolumeGroupSnapshot.
    DeleteGroupSnapshot {
        /// Its name.
        name: String,
    },
    /// Let the cluster run this many steps.
    Run {
        /// How many steps.
        steps: u32,
    },
    /// Create an object from a manifest.
    Apply(Box<Object>),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Class {
                name,
                policy,
                credentials,
                zone,
            } => {
                let with = if *credentials {
                    ", with credentials"
                } else {
                    ""
                };
                let only = zone
                    .as_ref()
                    .map_or(String::new(), |z| format!(", only in {z}"));
                write!(
                    f,
                    "create StorageClass {name} (reclaim {policy}{with}{only})"
                )
            }
            Action::Claim {
                name,
                class,
                mode,
                attributes,
            } => {
                let with = attributes
                    .as_ref()
                    .map_or(String::new(), |a| format!(", attributes {a}"));
                write!(
                    f,
                    "create PVC {name} (class {class}, {}{with})",
                    mode.short()
                )
            }
            Action::Pod { name, claim, node } => {
                write!(f, "create Pod {name} using {claim} on node-{node}")
            }
            Action::DeletePod { name } => write!(f, "delete Pod {name}"),
            Action::DeleteClaim { name } => write!(f, "delete PVC {name}"),
            Action::DeleteVolume { claim } => write!(f, "delete the PV of PVC {claim}"),
            Action::Resize { claim } => write!(f, "grow PVC {claim} by 1Gi"),
            Action::Overgrow { claim } => {
                write!(f, "ask PVC {claim} for more than the storage holds")
            }
            Action::TakeBack { claim } => write!(f, "take back PVC {claim}'s growth"),
            Action::Modify { claim, class } => {
                write!(f, "set PVC {claim}'s VolumeAttributesClass to {class}")
            }
            Action::RoguePlugin { node, kind } => write!(
                f,
                "a plugin {} registers on node-{node}",
                super::registration::ROGUES[kind % super::registration::ROGUES.len()].0
            ),
            Action::Snapshot { name, claim } => {
                write!(f, "create VolumeSnapshot {name} of PVC {claim}")
            }
            Action::DeleteSnapshot { name } => write!(f, "delete VolumeSnapshot {name}"),
            Action::Restore { name, snapshot } => {
                write!(
                    f,
                    "create PVC {name} restored from VolumeSnapshot {snapshot}"
                )
            }
            Action::GroupSnapshot { name, group } => {
                write!(
                    f,
                    "create VolumeGroupSnapshot {name} of PVCs group=g{group}"
                )
            }
            Action::DeleteGroupSnapshot { name } => write!(f, "delete VolumeGroupSnapshot {name}"),
            Action::Run { steps } => write!(f, "run {steps} steps"),
            Action::Apply(o) => write!(f, "apply {}", o.key()),
        }
    }
}

/// The VolumeAttributesClasses of generated workloads: name, `tier`.
pub const ATTRIBUTE_CLASSES: [(&str, &str); 3] = [
    ("gold", "gold"),
    ("silver", "silver"),
    ("infeasible", super::backend::INFEASIBLE_VALUE),
];

/// A generated workload: two classes (Delete, Retain), a snapshot class
/// and attribute classes, then claims (RWO, RWX, RWOP) and pods across
/// nodes created and deleted, expansions, class changes, snapshots taken,
/// restored and deleted, and runs of steps in between.
pub fn generate(seed: u64, nodes: usize, pods: usize, len: usize) -> Vec<Action> {
    let mut rng = Rng::new(seed ^ 0x57a7e);
    let mut snaps = Rng::new(seed ^ 0x5a95);
    let mut modifies = Rng::new(seed ^ 0x30d1);
    let mut recovers = Rng::new(seed ^ 0x4ec0);
    let mut named = std::collections::BTreeMap::new();
    let claims = pods.div_ceil(2).max(1);
    let mut out = setup();
    for _ in 0..len {
        let c = format!("c{}", rng.below(claims));
        let p = format!("p{}", rng.below(pods.max(1)));
        out.push(match rng.below(12) {
            0 | 1 => Action::Claim {
                name: c,
                // Now and then a claim no volume can ever satisfy: no class
                // (and no static volume), or a class that does not exist.
                class: match rng.below(20) {
                    0 => "",
                    1 => "missing",
                    2..=10 => "delete",
                    _ => "retain",
                }
                .into(),
                mode: [
                    AccessMode::ReadWriteOnce,
                    AccessMode::ReadWriteMany,
                    AccessMode::ReadWriteOncePod,
                ][rng.below(3)]
                .clone(),
                attributes: (modifies.below(5) == 0).then(|| "gold".into()),
            },
            2..=4 => Action::Pod {
                name: p,
                claim: c,
                node: rng.below(nodes.max(1)),
            },
            5 | 6 => Action::DeletePod { name: p },
            7 => Action::DeleteClaim { name: c },
            8 => Action::Resize { claim: c },
            11 if rng.below(6) == 0 => Action::RoguePlugin {
                node: rng.below(nodes.max(1)),
                kind: rng.below(super::registration::ROGUES.len()),
            },
            _ => Action::Run {
                steps: rng.below(60) as u32,
            },
        });
        // Now and then a claim asks for more than the storage holds, and
        // a user takes a growth back, from a stream of their own.
        match recovers.below(24) {
            0 => out.push(Action::Overgrow {
                claim: format!("c{}", recovers.below(claims)),
            }),
            1 | 2 => out.push(Action::TakeBack {
                claim: format!("c{}", recovers.below(claims)),
            }),
            _ => {}
        }
        // Now and then a claim names another class, from a stream of its own.
        if modifies.below(10) == 0 {
            let claim = format!("c{}", modifies.below(claims));
            let class = ["gold", "silver", "gold", "infeasible", "missing"][modifies.below(5)];
            named.insert(claim.clone(), class);
            out.push(Action::Modify {
                claim,
                class: class.into(),
            });
        }
        // Now and then a snapshot taken, restored or deleted, drawn from a
        // stream of its own so the rest of the workload stays as it was.
        if snaps.below(8) == 0 {
            let s = format!("s{}", snaps.below(claims));
            out.push(match snaps.below(5) {
                0 => Action::Snapshot {
                    name: s,
                    claim: format!("c{}", snaps.below(claims)),
                },
                1 => Action::Restore {
                    name: format!("r{}", snaps.below(claims)),
                    snapshot: s,
                },
                2 => Action::DeleteSnapshot { name: s },
                3 => Action::GroupSnapshot {
                    name: format!("g{}", snaps.below(2)),
                    group: snaps.below(2),
                },
                _ => Action::DeleteGroupSnapshot {
                    name: format!("g{}", snaps.below(2)),
                },
            });
        }
    }
    // A claim left naming a class it cannot have is retried (provisioned
    // or modified) once per longest retry delay for ever, so the cluster
    // never goes quiet: the user corrects it in the end.
    for (claim, class) in named {
        if matches!(class, "infeasible" | "missing") {
            out.push(Action::Modify {
                claim,
                class: "gold".into(),
            });
        }
    }
    out
}

/// What every generated workload starts with: the driver's credentials,
/// two classes (Delete anywhere, Retain in one zone), the snapshot and
/// group snapshot classes, and the VolumeAttributesClasses.
fn setup() -> Vec<Action> {
    let (namespace, name) = CREDENTIALS;
    let secret = Secret::new(namespace, name, &[(TOKEN.0, TOKEN.1)]);
    let mut out = vec![
        Action::Apply(Box::new(Object::Secret(secret))),
        Action::Class {
            name: "delete".into(),
            policy: ReclaimPolicy::Delete,
            credentials: true,
            zone: None,
        },
        Action::Class {
            name: "retain".into(),
            policy: ReclaimPolicy::Retain,
            credentials: true,
            zone: Some(super::zone_of("node-0").into()),
        },
        Action::Apply(Box::new(Object::SnapshotClass(VolumeSnapshotClass::new(
            "snapshots",
            super::DRIVER,
            DeletionPolicy::Delete,
        )))),
        Action::Apply(Box::new(Object::GroupSnapshotClass(
            VolumeGroupSnapshotClass::new("groups", super::DRIVER, DeletionPolicy::Delete),
        ))),
    ];
    for (name, tier) in ATTRIBUTE_CLASSES {
        let vac = VolumeAttributesClass::new(name, super::DRIVER, &[("tier", tier)]);
        out.push(Action::Apply(Box::new(Object::AttributesClass(vac))));
    }
    out
}

/// A workload from manifests: every object created in order, pods without a
/// node spread across nodes, with some steps between objects.
pub fn from_manifests(text: &str, nodes: usize) -> Result<Vec<Action>, ManifestError> {
    let (objects, _) = parse_manifests(text)?;
    let mut out = Vec::new();
    let mut next = 0;
    for mut o in objects {
        if let Object::Pod(p) = &mut o
            && p.node().is_none()
        {
            p.spec.node_name = Some(format!("node-{}", next % nodes.max(1)));
            next += 1;
        }
        out.push(Action::Apply(Box::new(o)));
        out.push(Action::Run { steps: 20 });
    }
    Ok(out)
}

fn claim_of(sim: &Sim, name: &str) -> Option<PersistentVolumeClaim> {
    match sim.store.get(&ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        name,
    )) {
        Some(Object::Pvc(c)) => Some(c.clone()),
        _ => None,
    }
}

fn pods_using(sim: &Sim, claim: &str) -> Vec<Pod> {
    sim.store
        .objects()
        .filter_map(|o| match o {
            Object::Pod(p) if p.claims().any(|c| c == claim) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

impl Sim {
    /// Carries out one user action.
    pub fn act(&mut self, a: &Action) {
        let call = match a {
            Action::RoguePlugin { node, kind } => {
                return self.rogue_plugin(&format!("node-{node}"), *kind);
            }
            Action::Run { steps } => {
                self.run(u64::from(*steps));
                return;
            }
            Action::Class {
                name,
                policy,
                credentials,
                zone,
            } => Some(self.class_call(name, policy, *credentials, zone.as_deref())),
            Action::Claim {
                name,
                class,
                mode,
                attributes,
            } => {
                let mut c = new_claim(name, class, mode);
                c.spec.volume_attributes_class_name = attributes.clone();
                Some(ApiCall::Create(Object::Pvc(c)))
            }
            Action::Pod { name, claim, node } => self
                .place_pod(name, claim, node)
                .map(|p| ApiCall::Create(Object::Pod(p))),
            Action::DeletePod { name } => Some(delete(Kind::Pod, name)),
            // Even while pods use it: pvc-protection holds it Terminating.
            Action::DeleteClaim { name } => Some(delete(Kind::PersistentVolumeClaim, name)),
            Action::DeleteVolume { claim } => claim_of(self, claim)
                .filter(|c| !c.volume_name().is_empty())
                .map(|c| {
                    let key = ObjectKey::new(Kind::PersistentVolume, "", c.volume_name());
                    ApiCall::Delete(key)
                }),
            // The API server only lets bound claims grow.
            Action::Resize { claim } => claim_of(self, claim)
                .filter(|c| c.phase() == PvcPhase::Bound)
                .map(|c| ApiCall::Update(Object::Pvc(grown(c)))),
            Action::Overgrow { claim } => claim_of(self, claim)
                .filter(|c| c.phase() == PvcPhase::Bound)
                .map(|c| ApiCall::Update(Object::Pvc(asking(c, 1 << 40)))),
            // The API server lets a request fall, but not to the status
            // capacity or below.
            Action::TakeBack { claim } => claim_of(self, claim)
                .filter(|c| c.phase() == PvcPhase::Bound)
                .and_then(|c| {
                    let request = c.request().map_or(0, |q| q.bytes());
                    let lower = c.status_capacity().map_or(0, |q| q.bytes()) + (1 << 30);
                    (lower < request).then(|| ApiCall::Update(Object::Pvc(asking(c, lower))))
                }),
            // Only once bound: the PV controller never binds a claim to the
            // volume provisioned for it when the claim named another class
            // meanwhile (upstream's FindMatchingVolume skips it), so a user
            // changes the class of a bound claim.
            Action::Modify { claim, class } => claim_of(self, claim)
                .filter(|c| c.phase() == PvcPhase::Bound)
                .map(|mut c| {
                    c.spec.volume_attributes_class_name = Some(class.clone());
                    ApiCall::Update(Object::Pvc(c))
                }),
            Action::Snapshot { name, claim } => {
                let s = VolumeSnapshot::of_claim("default", name, claim, "snapshots");
                Some(ApiCall::Create(Object::Snapshot(s)))
            }
            Action::DeleteSnapshot { name } => Some(delete(Kind::VolumeSnapshot, name)),
            Action::Restore { name, snapshot } => {
                Some(ApiCall::Create(Object::Pvc(restore_claim(name, snapshot))))
            }
            Action::GroupSnapshot { name, group } => {
                let selector = LabelSelector {
                    match_labels: [("group".to_string(), format!("g{group}"))].into(),
                    match_expressions: Vec::new(),
                };
                let g = VolumeGroupSnapshot::of_claims("default", name, selector, "groups");
                Some(ApiCall::Create(Object::GroupSnapshot(g)))
            }
            Action::DeleteGroupSnapshot { name } => Some(delete(Kind::VolumeGroupSnapshot, name)),
            Action::Apply(o) => Some(ApiCall::Create((**o).clone())),
        };
        if let Some(call) = call {
            self.user(call);
        }
    }

    /// A StorageClass of the driver's that allows expansion: reclaim
    /// `policy`, naming the driver's credentials for its controller calls
    /// when `credentials` (the driver then requires them), its volumes
    /// only in `zone` when given.
    fn class_call(
        &mut self,
        name: &str,
        policy: &ReclaimPolicy,
        credentials: bool,
        zone: Option<&str>,
    ) -> ApiCall {
        let mut sc = StorageClass::new(name, super::DRIVER);
        sc.reclaim_policy = Some(policy.clone());
        sc.allow_volume_expansion = Some(true);
        if let Some(zone) = zone {
            sc.allowed_topologies = vec![TopologySelectorTerm {
                match_label_expressions: vec![TopologySelectorLabelRequirement {
                    key: super::ZONE_KEY.into(),
                    values: vec![zone.to_string()],
                }],
            }];
        }
        // The driver's controller and node calls need its credentials,
        // which the class names (the workload applied the Secret).
        let ops = [
            "provisioner",
            "controller-publish",
            "controller-expand",
            "controller-modify",
            "node-stage",
            "node-publish",
            "node-expand",
        ];
        for op in ops.iter().filter(|_| credentials) {
            let (namespace, secret) = CREDENTIALS;
            let prefix = format!("csi.storage.k8s.io/{op}-secret");
            sc.parameters
                .insert(format!("{prefix}-name"), secret.into());
            sc.parameters
                .insert(format!("{prefix}-namespace"), namespace.into());
        }
        if credentials {
            self.controller.credentials = Some(driver_credentials());
            for node in self.nodes.values_mut() {
                node.credentials = Some(driver_credentials());
            }
        }
        ApiCall::Create(Object::Class(sc))
    }

    /// `node`, or — when the volume bound to `claim` lives in another zone
    /// — the first node of that zone, as the scheduler would choose.
    fn in_zone_of_volume(&self, claim: &PersistentVolumeClaim, node: String) -> String {
        let key = ObjectKey::new(Kind::PersistentVolume, "", claim.volume_name());
        let Some(Object::Pv(pv)) = self.store.get(&key) else {
            return node;
        };
        let zone = pv
            .spec
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
            .into_iter()
            .flat_map(|r| &r.node_selector_terms)
            .flat_map(|t| &t.match_expressions)
            .find(|e| e.key == super::ZONE_KEY)
            .and_then(|e| e.values.first());
        match zone {
            Some(zone) if super::zone_of(&node) != zone => self
                .nodes
                .keys()
                .find(|n| super::zone_of(n) == zone)
                .cloned()
                .unwrap_or(node),
            _ => node,
        }
    }

    /// The pod the scheduler would place for `name`: none when its claim
    /// does not exist or is being deleted, or is ReadWriteOncePod and in
    /// use; on the node of the claim's other pods when the claim is
    /// single-node.
    fn place_pod(&self, name: &str, claim: &str, node: &usize) -> Option<Pod> {
        let c = claim_of(self, claim).filter(|c| !c.metadata.deleting())?;
        let users = pods_using(self, claim);
        let mode = c.spec.access_modes.first().cloned();
        let single = matches!(
            mode,
            Some(AccessMode::ReadWriteOnce | AccessMode::ReadWriteOncePod)
        );
        if mode == Some(AccessMode::ReadWriteOncePod) && !users.is_empty() {
            return None;
        }
        let node = match users.first().and_then(|p| p.node().map(str::to_string)) {
            Some(n) if single => n,
            _ => self.in_zone_of_volume(&c, format!("node-{node}")),
        };
        let mut p = Pod::new("default", name);
        p.spec.node_name = Some(node);
        p.spec.volumes.push(PodVolume {
            name: "data".into(),
            persistent_volume_claim: Some(PvcSource {
                claim_name: claim.to_string(),
                read_only: false,
            }),
        });
        Some(p)
    }
}

/// Plays `actions` with faults on, then stops the faults, lets the cluster
/// settle (at most `settle` steps) and checks that it converged.
pub fn play(config: SimConfig, actions: &[Action], settle: u64) -> Sim {
    let mut sim = Sim::new(config);
    for a in actions {
        sim.act(a);
        if !sim.violations.is_empty() {
            return sim;
        }
    }
    sim.faults_on = false;
    sim.run(settle);
    // Upstream polls capacity every minute; here once the cluster is quiet,
    // after checking what events alone kept right.
    if sim.violations.is_empty() {
        sim.check_capacity_followed_volumes();
    }
    if sim.poll_capacity() {
        // The poll's calls and writes, among whatever retries still run.
        sim.run(settle.min(10_000));
    }
    if sim.violations.is_empty() {
        sim.check_converged();
    }
    sim
}

/// The small configuration of exhaustive mode: two nodes, a claim under
/// Delete used by two pods on one node and a claim under Retain, settled;
/// then the script to explore — a third pod comes and goes, the first pod
/// goes, a new claim arrives, the Retain claim is deleted, the last pod goes.
pub fn small_configuration(plant: crate::plant::Planted) -> (Sim, Vec<Action>) {
    let mut config = SimConfig::new(2, 0);
    config.plant = plant;
    // Capacity tracking adds states, not interleavings the script is about.
    config.capacity = false;
    let mut sim = Sim::new(config);
    let prefix = [
        Action::Class {
            name: "delete".into(),
            policy: ReclaimPolicy::Delete,
            credentials: false,
            zone: None,
        },
        Action::Class {
            name: "retain".into(),
            policy: ReclaimPolicy::Retain,
            credentials: false,
            zone: None,
        },
        Action::Claim {
            name: "c0".into(),
            class: "delete".into(),
            mode: AccessMode::ReadWriteOnce,
            attributes: None,
        },
        Action::Claim {
            name: "c1".into(),
            class: "retain".into(),
            mode: AccessMode::ReadWriteOnce,
            attributes: None,
        },
        Action::Pod {
            name: "p0".into(),
            claim: "c0".into(),
            node: 0,
        },
        Action::Pod {
            name: "p1".into(),
            claim: "c0".into(),
            node: 0,
        },
    ];
    sim.faults_on = false;
    for a in &prefix {
        sim.act(a);
    }
    sim.run(10_000);
    let script = vec![
        Action::Pod {
            name: "p2".into(),
            claim: "c0".into(),
            node: 0,
        },
        Action::DeletePod { name: "p2".into() },
        Action::DeletePod { name: "p0".into() },
        Action::Claim {
            name: "c2".into(),
            class: "delete".into(),
            mode: AccessMode::ReadWriteOnce,
            attributes: None,
        },
        Action::DeleteClaim { name: "c1".into() },
        Action::DeletePod { name: "p1".into() },
    ];
    (sim, script)
}

/// A user's delete of `kind` `default`/`name` (or cluster-scoped).
fn delete(kind: Kind, name: &str) -> ApiCall {
    let namespace = if kind == Kind::PersistentVolume {
        ""
    } else {
        "default"
    };
    ApiCall::Delete(ObjectKey::new(kind, namespace, name))
}

/// A 1 GiB claim of `class`, labelled with its group (`g0`, `g1`).
fn new_claim(name: &str, class: &str, mode: &AccessMode) -> PersistentVolumeClaim {
    let mut c = PersistentVolumeClaim::new("default", name);
    let n: usize = name.trim_start_matches('c').parse().unwrap_or(0);
    c.metadata
        .labels
        .insert("group".into(), format!("g{}", n % 2));
    c.spec.storage_class_name = Some(class.to_string());
    c.spec.access_modes = vec![mode.clone()];
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::from_bytes(1 << 30));
    c
}

/// `c` asking for 1 GiB more.
fn grown(c: PersistentVolumeClaim) -> PersistentVolumeClaim {
    let q = c.request().map_or(1 << 30, |q| q.bytes()) + (1 << 30);
    asking(c, q)
}

/// `c` asking for `bytes`.
fn asking(mut c: PersistentVolumeClaim, bytes: u64) -> PersistentVolumeClaim {
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::from_bytes(bytes));
    c
}

/// A claim restoring `snapshot`, big enough for a snapshot of a claim
/// grown a few times.
fn restore_claim(name: &str, snapshot: &str) -> PersistentVolumeClaim {
    let mut c = PersistentVolumeClaim::new("default", name);
    c.spec.storage_class_name = Some("delete".into());
    c.spec.access_modes = vec![AccessMode::ReadWriteOnce];
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::from_bytes(8 << 30));
    c.spec.data_source = Some(TypedLocalObjectReference {
        api_group: Some("snapshot.storage.k8s.io".into()),
        kind: "VolumeSnapshot".into(),
        name: snapshot.to_string(),
    });
    c
}
