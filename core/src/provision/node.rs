//! Distributed provisioning (`--node-deployment`): a provisioner beside the
//! driver on each node provisions only the claims whose selected node is
//! its own, deletes only volumes its node can reach, and — for classes with
//! Immediate binding — takes a claim no node was selected for by selecting
//! its own node, after a jittered wait and only when GetCapacity says its
//! node has room (upstream's becomeOwner). The first node to write the
//! annotation wins; the others see it and stand back.

use super::*;
use crate::provision::topology::{Term, flatten, subset};

/// `--node-deployment`: the one node this provisioner serves.
#[derive(Debug, Clone, Hash)]
pub struct NodeScope {
    /// The node's name (`NODE_NAME`).
    pub node: String,
    /// The node's segment, as the driver's NodeGetInfo reports it.
    pub topology: Term,
    /// `--node-deployment-immediate-binding`: Immediate claims are taken.
    pub immediate_binding: bool,
    /// `--node-deployment-base-delay`.
    pub base_delay: Tick,
    /// `--node-deployment-max-delay`.
    pub max_delay: Tick,
}

/// A claim this node is trying to take.
#[derive(Debug, Clone, Hash)]
pub(super) struct Taking {
    /// When the next try may begin.
    at: Tick,
    /// Tries that ended without the claim (no room, a conflict).
    tries: u32,
}

/// What the node decides about a claim.
pub(super) enum NodeVerdict {
    /// Provision it: its selected node is this one.
    Mine,
    /// Another node's, or none yet: leave it.
    NotMine,
}

impl NodeScope {
    /// The wait before try `tries` at taking the claim `uid`: the base
    /// delay doubled per earlier try up to the longest, less a jitter of
    /// up to the base delay (as upstream's rate limiter with jitter), the
    /// jitter drawn from the claim and the node so that nodes differ.
    fn delay(&self, uid: &str, tries: u32) -> Tick {
        let full = self
            .base_delay
            .saturating_mul(1 << tries.min(30))
            .min(self.max_delay);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in uid
            .bytes()
            .chain([0])
            .chain(self.node.bytes())
            .chain(tries.to_le_bytes())
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let jitter = self.base_delay.saturating_mul(h % 1024) / 1024;
        full.saturating_sub(jitter)
    }

    /// True when a volume whose node affinity is `affinity` can be reached
    /// from this node (no affinity: from anywhere).
    pub(super) fn reaches(&self, affinity: Option<&VolumeNodeAffinity>) -> bool {
        reaches(&self.topology, affinity)
    }
}

/// True when a volume whose node affinity is `affinity` can be reached
/// from a node with the segment `topology` (no affinity: from anywhere).
pub fn reaches(topology: &Term, affinity: Option<&VolumeNodeAffinity>) -> bool {
    affinity.is_none_or(|a| a.admits(topology))
}

impl ProvisionerReconciler {
    /// Under `--node-deployment`, whether this node provisions the claim;
    /// an Immediate claim without a selected node is taken when its time
    /// comes. Without it, every claim is this provisioner's.
    pub(super) fn node_verdict(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        uid: &str,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> NodeVerdict {
        let Some(scope) = self.config.node.clone() else {
            return NodeVerdict::Mine;
        };
        match claim.metadata.annotation(names::ANN_SELECTED_NODE) {
            Some(n) if n == scope.node => {
                self.taking.remove(uid);
                NodeVerdict::Mine
            }
            Some(n) if !n.is_empty() => {
                self.taking.remove(uid);
                NodeVerdict::NotMine
            }
            _ => {
                let immediate = class.binding_mode() == BindingMode::Immediate;
                if immediate && scope.immediate_binding {
                    self.take(cx, &scope, key, uid, claim, class);
                }
                NodeVerdict::NotMine
            }
        }
    }

    /// One step towards taking a claim: wait for its time, ask GetCapacity
    /// whether this node has room, then select this node on the claim.
    fn take(
        &mut self,
        cx: &mut Cx<Self>,
        scope: &NodeScope,
        key: &ObjectKey,
        uid: &str,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) {
        let now = cx.now();
        let at = self
            .taking
            .entry(uid.to_string())
            .or_insert_with(|| Taking {
                at: now + scope.delay(uid, 0),
                tries: 0,
            })
            .at;
        if now < at || cx.busy(uid) {
            return;
        }
        // Under way: no deadline until it ends.
        if let Some(t) = self.taking.get_mut(uid) {
            t.at = Tick::MAX;
        }
        // A class that does not allow this node's segment is not taken.
        let allowed = flatten(&class.allowed_topologies);
        if !class.allowed_topologies.is_empty()
            && self.config.topology
            && !allowed.iter().any(|t| subset(t, &scope.topology))
        {
            self.taking.remove(uid);
            return;
        }
        // As upstream: the same request as provisioning would make; when it
        // cannot be built, the claim is taken and provisioning says why.
        let Ok(request) = self.build_request(cx, claim, class) else {
            return self.select_own_node(cx, key, uid, claim);
        };
        let check = Request::GetCapacity(driver::GetCapacity {
            capabilities: request.capabilities,
            parameters: request.parameters,
            accessible_topology: (!scope.topology.is_empty())
                .then(|| scope.topology.clone().into_iter().collect()),
        });
        self.csi(
            cx,
            Call::CheckCapacity {
                uid: uid.to_string(),
                claim: key.clone(),
            },
            check,
        );
    }

    /// Writes this node as the claim's selected node.
    fn select_own_node(
        &mut self,
        cx: &mut Cx<Self>,
        key: &ObjectKey,
        uid: &str,
        claim: &PersistentVolumeClaim,
    ) {
        let Some(scope) = &self.config.node else {
            return;
        };
        let mut c = claim.clone();
        c.metadata
            .annotations
            .insert(names::ANN_SELECTED_NODE.into(), scope.node.clone());
        let call = Call::TakeClaim {
            uid: uid.to_string(),
            claim: key.clone(),
        };
        self.api(cx, call, ApiCall::Update(Object::Pvc(c)));
    }

    /// GetCapacity answered for the claim `uid`: with room (or no answer,
    /// as upstream goes on), the node selects itself; without, it tries
    /// again later.
    pub(super) fn capacity_checked(
        &mut self,
        cx: &mut Cx<Self>,
        uid: String,
        key: ObjectKey,
        result: CsiResult,
    ) {
        let Some(claim) = self.claim(cx, &key).filter(|c| c.metadata.uid == uid) else {
            self.taking.remove(&uid);
            return;
        };
        let asked = claim.request().map_or(0, |q| q.bytes());
        match result {
            Ok(Response::Capacity {
                available_bytes, ..
            }) if available_bytes < asked => self.retry_take(cx, &uid),
            _ => self.select_own_node(cx, &key, &uid, &claim),
        }
        cx.mark(key);
    }

    /// The write of this node on the claim `uid` ended: taken, or (lost the
    /// race, a conflict) tried again later unless another node has it.
    pub(super) fn take_written(
        &mut self,
        cx: &mut Cx<Self>,
        uid: String,
        key: ObjectKey,
        result: ApiResult,
    ) {
        match result {
            ApiResult::Ok(Some(o)) => {
                self.taking.remove(&uid);
                cx.cache_mut().apply(o);
            }
            _ => self.retry_take(cx, &uid),
        }
        cx.mark(key);
    }

    fn retry_take(&mut self, cx: &mut Cx<Self>, uid: &str) {
        let Some(scope) = &self.config.node else {
            return;
        };
        let now = cx.now();
        if let Some(t) = self.taking.get_mut(uid) {
            t.tries += 1;
            t.at = now + scope.delay(uid, t.tries).max(1);
        }
    }

    /// The earliest time a claim may be tried again.
    pub(super) fn next_take(&self) -> Option<Tick> {
        self.taking
            .values()
            .map(|t| t.at)
            .filter(|at| *at != Tick::MAX)
            .min()
    }

    /// Claims whose time to be taken came by `now` are looked at again.
    pub(super) fn takes_due(&mut self, cx: &mut Cx<Self>, now: Tick) {
        let due: Vec<String> = self
            .taking
            .iter()
            .filter(|(_, t)| t.at <= now && t.at != Tick::MAX)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in due {
            let claim = cx
                .cache()
                .of_kind(Kind::PersistentVolumeClaim)
                .find(|o| o.meta().uid == uid)
                .map(Object::key);
            match claim {
                Some(k) => {
                    cx.mark(k);
                }
                None => {
                    self.taking.remove(&uid);
                }
            }
        }
    }
}
