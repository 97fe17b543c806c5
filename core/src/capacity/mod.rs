//! Storage capacity tracking: external-provisioner's capacity controller
//! (`--enable-capacity`) as a sans-IO machine.
//!
//! For every topology segment where the driver runs and every StorageClass
//! of the driver's (those with WaitForFirstConsumer binding, unless
//! immediate classes are asked for too), one CSIStorageCapacity object says
//! what GetCapacity reports for that class's parameters in that segment,
//! for the scheduler to place pods where their volumes fit. The segments
//! come from the CSINodes' topology keys and the Nodes' labels, or are one
//! fixed segment (a driver without topology: the empty one; a provisioner
//! per node: its node's).
//!
//! Guarantees:
//! * One object per (segment, class), in the configured namespace, labelled
//!   `csi.storage.k8s.io/drivername` and `csi.storage.k8s.io/managed-by`
//!   as upstream; its name is a hash of what it is for, so a create
//!   repeated after a crash finds the object it already made.
//! * Refreshed every poll interval, at once when its class changes, and
//!   when a volume of the driver appears in or leaves its segment; written
//!   only when what GetCapacity reports differs from what it says.
//! * Objects this tracker manages that no (segment, class) wants any more
//!   (a class or a node gone, a duplicate) are deleted; objects others
//!   manage are never touched.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::Tick;
use crate::control::{ApiCall, ApiResult, Controller, CsiResult, Cx, Engine, Watch};
use crate::driver::{self, Request, Response};
use crate::model::*;
use crate::provision::topology::{Term, node_segments};

/// `csi.storage.k8s.io/drivername`: the driver an object is for.
pub const DRIVER_NAME_LABEL: &str = "csi.storage.k8s.io/drivername";
/// `csi.storage.k8s.io/managed-by`: which provisioner manages an object.
pub const MANAGED_BY_LABEL: &str = "csi.storage.k8s.io/managed-by";
/// The managed-by value of a central provisioner.
pub const MANAGED_BY: &str = "external-provisioner";

/// The managed-by value of the provisioner deployed on `node`
/// (`--node-deployment`): `external-provisioner-<node>`, shortened with a
/// hash to a label value's 63 characters as upstream's
/// getNameWithMaxLength does.
pub fn managed_by_node(node: &str) -> String {
    const MAX: usize = 63;
    let base = MANAGED_BY;
    let name = format!("{base}-{node}");
    if name.len() <= MAX {
        return name;
    }
    let hash = |s: &str| {
        let mut h: u32 = 0x811c_9dc5;
        for b in s.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        format!("{h:08x}")
    };
    match MAX.checked_sub(10 + node.len()).filter(|n| *n > 0) {
        Some(keep) => format!("{}-{}-{node}", &base[..keep.min(base.len())], hash(base)),
        None => {
            let prefix = &base[..base.len().min(MAX - 9)];
            let short = format!("{prefix}-{}", hash(&name));
            short[..short.len().min(MAX)].to_string()
        }
    }
}

/// How the capacity tracker runs.
#[derive(Debug, Clone, Hash)]
pub struct CapacityConfig {
    /// The driver.
    pub driver: String,
    /// The `csi.storage.k8s.io/managed-by` label of its objects.
    pub managed_by: String,
    /// The namespace its objects live in (the provisioner's own).
    pub namespace: String,
    /// The owner of its objects (`--capacity-ownerref-level`), if any.
    pub owner: Option<OwnerReference>,
    /// How often every object is refreshed (`--capacity-poll-interval`);
    /// `None`: only on changes.
    pub poll_interval: Option<Tick>,
    /// `--capacity-for-immediate-binding`: classes with Immediate binding
    /// get objects too.
    pub immediate_binding: bool,
    /// The one segment of every object, instead of the nodes' segments.
    pub fixed_segment: Option<Term>,
    /// The first retry delay after a failure.
    pub retry_start: Tick,
    /// The longest retry delay.
    pub retry_max: Tick,
    /// Simulation only: a planted mistake.
    pub plant: crate::plant::Planted,
}

impl CapacityConfig {
    /// Capacity tracking for `driver` with objects in `namespace`, with the
    /// sidecar's defaults (a 1 minute poll, WaitForFirstConsumer classes).
    pub fn new(driver: &str, namespace: &str) -> CapacityConfig {
        CapacityConfig {
            driver: driver.into(),
            managed_by: MANAGED_BY.into(),
            namespace: namespace.into(),
            owner: None,
            poll_interval: Some(60_000),
            immediate_binding: false,
            fixed_segment: None,
            retry_start: 1_000,
            retry_max: 300_000,
            plant: crate::plant::Planted::default(),
        }
    }
}

/// What one object is for: a segment and a class.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Item {
    /// The topology segment (empty: everywhere).
    pub segment: Term,
    /// The StorageClass.
    pub class: String,
}

/// What a pass reconciles.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// The object of one (segment, class).
    Item(Item),
    /// An object of this tracker's, by name: deleted if nothing wants it.
    Object(String),
}

/// What the tracker has in flight.
#[derive(Debug, Clone, Hash)]
pub enum Call {
    /// GetCapacity for an item.
    Get(Item),
    /// The create or update of an item's object.
    Write(Item),
    /// The delete of an object no item wants.
    Delete(String),
}

/// The capacity tracker. See the module documentation.
pub type CapacityTracker = Engine<CapacityReconciler>;

/// What the capacity tracker keeps of its own; the engine keeps the rest.
#[derive(Debug, Clone, Hash)]
pub struct CapacityReconciler {
    config: CapacityConfig,
    /// The (segment, class) pairs that want an object.
    items: BTreeSet<Item>,
    /// GetCapacity's answers waiting to be written: (available, maximum).
    reported: BTreeMap<Item, (u64, Option<u64>)>,
    /// Items marked while a call of theirs was in flight: its answer may
    /// predate the change, so they are asked again once it ends.
    stale: BTreeSet<Item>,
    next_poll: Option<Tick>,
}

impl CapacityTracker {
    /// A tracker with empty memory.
    pub fn new(config: CapacityConfig) -> CapacityTracker {
        let (retry_start, retry_max) = (config.retry_start, config.retry_max);
        let reconciler = CapacityReconciler {
            config,
            items: BTreeSet::new(),
            reported: BTreeMap::new(),
            stale: BTreeSet::new(),
            next_poll: None,
        };
        Engine::driving(reconciler, retry_start, retry_max)
    }
}

impl CapacityReconciler {
    /// The kinds its informers watch.
    pub fn watches(&self, kind: Kind) -> bool {
        matches!(
            kind,
            Kind::StorageClass
                | Kind::CsiNode
                | Kind::Node
                | Kind::CsiStorageCapacity
                | Kind::PersistentVolume
        )
    }

    /// The name of the object for `item`: `csisc-` and a hash of the
    /// driver, the manager, the class and the segment.
    pub fn object_name(&self, item: &Item) -> String {
        let mut h = Fnv::default();
        for part in [&self.config.driver, &self.config.managed_by, &item.class] {
            h.write(part.as_bytes());
            h.write(&[0]);
        }
        for (k, v) in &item.segment {
            h.write(k.as_bytes());
            h.write(&[1]);
            h.write(v.as_bytes());
            h.write(&[0]);
        }
        format!("csisc-{:016x}", h.0)
    }

    /// True when `c` is one of this tracker's objects.
    fn manages(&self, c: &CsiStorageCapacity) -> bool {
        c.metadata.namespace == self.config.namespace
            && c.metadata.labels.get(DRIVER_NAME_LABEL) == Some(&self.config.driver)
            && c.metadata.labels.get(MANAGED_BY_LABEL) == Some(&self.config.managed_by)
    }

    /// This tracker's objects, by name.
    fn objects<'a>(&'a self, cx: &'a Cx<Self>) -> impl Iterator<Item = &'a CsiStorageCapacity> {
        cx.cache()
            .of_kind(Kind::CsiStorageCapacity)
            .filter_map(|o| match o {
                Object::Capacity(c) if self.manages(c) => Some(c),
                _ => None,
            })
    }

    /// The item an object of this tracker's stands for, if one wants it:
    /// the object named for it.
    fn wanted(&self, c: &CsiStorageCapacity) -> bool {
        self.items
            .iter()
            .any(|item| self.object_name(item) == c.metadata.name && matches_item(c, item))
    }

    /// The classes that want objects: the driver's, WaitForFirstConsumer
    /// unless immediate classes are asked for too.
    fn classes<'a>(&self, cx: &'a Cx<Self>) -> Vec<&'a StorageClass> {
        cx.cache()
            .of_kind(Kind::StorageClass)
            .filter_map(Object::as_class)
            .filter(|sc| sc.provisioner == self.config.driver)
            .filter(|sc| {
                self.config.immediate_binding || sc.binding_mode() != BindingMode::Immediate
            })
            .collect()
    }

    /// Recomputes which (segment, class) pairs want an object; new pairs
    /// are reconciled, and objects no pair wants any more are deleted.
    fn refresh_items(&mut self, cx: &mut Cx<Self>) {
        let segments: BTreeSet<Term> = match &self.config.fixed_segment {
            Some(s) => [s.clone()].into(),
            None => node_segments(&self.config.driver, cx.cache()),
        };
        let classes: Vec<String> = self
            .classes(cx)
            .iter()
            .map(|c| c.metadata.name.clone())
            .collect();
        let items: BTreeSet<Item> = segments
            .iter()
            .flat_map(|s| {
                classes.iter().map(|class| Item {
                    segment: s.clone(),
                    class: class.clone(),
                })
            })
            .collect();
        for item in items.difference(&self.items) {
            cx.mark(Key::Item(item.clone()));
        }
        let gone = self.items.difference(&items).count() > 0;
        self.items = items;
        if gone {
            self.mark_objects(cx);
        }
        self.reported.retain(|item, _| self.items.contains(item));
    }

    fn mark_objects(&mut self, cx: &mut Cx<Self>) {
        let names: Vec<String> = self.objects(cx).map(|c| c.metadata.name.clone()).collect();
        cx.mark_all(names.into_iter().map(Key::Object));
    }

    /// Marks the items of `class`, or of the segments a volume's node
    /// affinity names.
    fn mark_items(&mut self, cx: &mut Cx<Self>, wants: impl Fn(&Item) -> bool) {
        let keys: Vec<Key> = self
            .items
            .iter()
            .filter(|i| wants(i))
            .cloned()
            .map(Key::Item)
            .collect();
        cx.mark_all(keys);
    }

    fn mark(&mut self, cx: &mut Cx<Self>, o: &Object) {
        match o {
            Object::Class(sc) if sc.provisioner == self.config.driver => {
                self.refresh_items(cx);
                let name = sc.metadata.name.clone();
                self.mark_items(cx, |i| i.class == name);
            }
            Object::CsiNode(_) | Object::Node(_) | Object::Class(_) => self.refresh_items(cx),
            Object::Capacity(c) if self.manages(c) => {
                cx.mark(Key::Object(c.metadata.name.clone()));
            }
            Object::Pv(_)
                if self
                    .config
                    .plant
                    .is(crate::plant::Plant::CapacityIgnoresVolumes) => {}
            Object::Pv(pv) => {
                let on_driver = pv
                    .spec
                    .csi
                    .as_ref()
                    .is_some_and(|c| c.driver == self.config.driver);
                if on_driver {
                    let terms = volume_segments(pv);
                    self.mark_items(cx, |i| {
                        terms.is_empty() || terms.iter().any(|t| t == &i.segment)
                    });
                }
            }
            _ => {}
        }
    }

    fn sync_item(&mut self, cx: &mut Cx<Self>, item: Item) {
        if !self.items.contains(&item) {
            return;
        }
        if cx.busy(&Key::Item(item.clone())) {
            self.stale.insert(item);
            return;
        }
        match self.reported.remove(&item) {
            Some(reported) => self.write(cx, item, reported),
            None => self.get_capacity(cx, item),
        }
    }

    fn get_capacity(&mut self, cx: &mut Cx<Self>, item: Item) {
        let Some(Object::Class(sc)) = cx.cache().find(Kind::StorageClass, "", &item.class) else {
            return;
        };
        let request = Request::GetCapacity(driver::GetCapacity {
            capabilities: Vec::new(),
            parameters: sc.parameters.clone().into_iter().collect(),
            accessible_topology: (!item.segment.is_empty())
                .then(|| item.segment.clone().into_iter().collect()),
        });
        cx.csi_holding([Key::Item(item.clone())], None, request, Call::Get(item));
    }

    /// Writes what GetCapacity reported on the item's object: created when
    /// there is none, updated when it says something else or lacks the
    /// owner, left alone when it says the same.
    fn write(&mut self, cx: &mut Cx<Self>, item: Item, (available, maximum): (u64, Option<u64>)) {
        let name = self.object_name(&item);
        let key = ObjectKey::new(Kind::CsiStorageCapacity, &self.config.namespace, &name);
        let capacity = Some(Quantity::from_bytes(available));
        let maximum = maximum.map(Quantity::from_bytes);
        let call = match cx.cache().get(&key) {
            Some(Object::Capacity(c)) => {
                let owned = self.config.owner.as_ref().is_none_or(|o| owned_by(c, o));
                // What the object is for is ours to say: one edited by
                // someone else (another class, segment or label) is put back.
                let fits = self.manages(c) && matches_item(c, &item);
                if same_size(&c.capacity, &capacity)
                    && same_size(&c.maximum_volume_size, &maximum)
                    && owned
                    && fits
                {
                    return;
                }
                let fresh = self.new_object(&item, capacity, maximum);
                let mut c = c.clone();
                c.capacity = fresh.capacity;
                c.maximum_volume_size = fresh.maximum_volume_size;
                c.node_topology = fresh.node_topology;
                c.storage_class_name = fresh.storage_class_name;
                c.metadata.labels.extend(fresh.metadata.labels);
                if let (false, Some(o)) = (owned, &self.config.owner) {
                    c.metadata.owner_references.push(o.clone());
                }
                ApiCall::Update(Object::Capacity(c))
            }
            _ => ApiCall::Create(Object::Capacity(self.new_object(&item, capacity, maximum))),
        };
        cx.api_holding([Key::Item(item.clone())], call, Call::Write(item));
    }

    fn new_object(
        &self,
        item: &Item,
        capacity: Option<Quantity>,
        maximum_volume_size: Option<Quantity>,
    ) -> CsiStorageCapacity {
        let mut metadata = ObjectMeta::namespaced(&self.config.namespace, &self.object_name(item));
        metadata
            .labels
            .insert(DRIVER_NAME_LABEL.into(), self.config.driver.clone());
        metadata
            .labels
            .insert(MANAGED_BY_LABEL.into(), self.config.managed_by.clone());
        metadata
            .owner_references
            .extend(self.config.owner.iter().cloned());
        CsiStorageCapacity {
            api_version: "storage.k8s.io/v1".into(),
            kind: "CSIStorageCapacity".into(),
            metadata,
            node_topology: Some(LabelSelector {
                match_labels: item.segment.iter().collect(),
                match_expressions: Vec::new(),
            }),
            storage_class_name: item.class.clone(),
            capacity,
            maximum_volume_size,
        }
    }

    /// Deletes an object of this tracker's that no item wants.
    fn sync_object(&mut self, cx: &mut Cx<Self>, name: String) {
        let key = ObjectKey::new(Kind::CsiStorageCapacity, &self.config.namespace, &name);
        let Some(Object::Capacity(c)) = cx.cache().get(&key) else {
            return;
        };
        if !self.manages(c) || self.wanted(c) || cx.busy(&Key::Object(name.clone())) {
            return;
        }
        cx.api_holding(
            [Key::Object(name.clone())],
            ApiCall::Delete(key),
            Call::Delete(name),
        );
    }

    /// The (segment, class) pairs that want an object (for tests and checks).
    pub fn items(&self) -> &BTreeSet<Item> {
        &self.items
    }
}

/// True when `c` is for `item`'s class and segment.
fn matches_item(c: &CsiStorageCapacity, item: &Item) -> bool {
    c.storage_class_name == item.class
        && c.node_topology.as_ref().is_some_and(|t| {
            t.match_expressions.is_empty()
                && t.match_labels
                    .iter()
                    .eq(item.segment.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        })
}

fn same_size(a: &Option<Quantity>, b: &Option<Quantity>) -> bool {
    a.as_ref().map(Quantity::bytes) == b.as_ref().map(Quantity::bytes)
}

/// True when `owner` is `c`'s controller (upstream's isOwnedByUs).
fn owned_by(c: &CsiStorageCapacity, owner: &OwnerReference) -> bool {
    c.metadata
        .owner_references
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == owner.uid)
}

/// The segments a volume's node affinity names (upstream's termToSegment:
/// `In` with one value per expression); empty when it has none.
fn volume_segments(pv: &PersistentVolume) -> Vec<Term> {
    pv.spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .into_iter()
        .flat_map(|r| &r.node_selector_terms)
        .filter_map(|t| {
            t.match_expressions
                .iter()
                .map(|e| match (e.operator.as_str(), &e.values[..]) {
                    ("In", [v]) => Some((e.key.clone(), v.clone())),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// FNV-1a, 64 bits: stable names across processes and versions.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Controller for CapacityReconciler {
    type Key = Key;
    type Call = Call;
    type Retry = Key;

    fn retry(&mut self, cx: &mut Cx<Self>, key: Key) {
        cx.mark(key);
    }

    fn watches(&self, kind: Kind) -> bool {
        CapacityReconciler::watches(self, kind)
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let (o, deleted) = match &watch {
            Watch::Applied(o) => (o.clone(), false),
            Watch::Deleted(o) => (o.clone(), true),
        };
        // A volume changes what is free only when it comes, goes or grows.
        let fills = match &*o {
            Object::Pv(pv) => {
                deleted
                    || cx.cache().get(&o.key()).is_none_or(|old| {
                        old.as_pv().and_then(PersistentVolume::capacity) != pv.capacity()
                    })
            }
            _ => true,
        };
        cx.apply(watch);
        // After the cache has it: what it changes is computed on the new view.
        if fills {
            self.mark(cx, &o);
        }
        // A deleted object of an item is made again.
        if let Object::Capacity(c) = &*o
            && deleted
            && self.manages(c)
        {
            let item = self
                .items
                .iter()
                .find(|i| self.object_name(i) == c.metadata.name)
                .cloned();
            if let Some(item) = item {
                cx.mark(Key::Item(item));
            }
        }
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: Key) {
        if self.next_poll.is_none() {
            self.next_poll = self.config.poll_interval.map(|p| cx.now() + p);
        }
        if cx.waiting(&key) {
            return;
        }
        match key {
            Key::Item(item) => self.sync_item(cx, item),
            Key::Object(name) => self.sync_object(cx, name),
        }
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        let key = match &call {
            Call::Write(item) | Call::Get(item) => Key::Item(item.clone()),
            Call::Delete(name) => Key::Object(name.clone()),
        };
        if let Call::Write(item) = &call
            && self.stale.remove(item)
        {
            cx.mark(key.clone());
        }
        match result {
            ApiResult::Ok(Some(o)) => {
                cx.cache_mut().apply(o);
                cx.succeed(&key);
            }
            ApiResult::Ok(None) | ApiResult::NotFound if matches!(call, Call::Delete(_)) => {
                cx.succeed(&key);
            }
            _ => {
                cx.fail(key.clone());
                // The next try asks GetCapacity again.
                cx.mark(key);
            }
        }
    }

    fn csi_done(&mut self, cx: &mut Cx<Self>, call: Call, result: CsiResult) {
        let Call::Get(item) = call else { return };
        let key = Key::Item(item.clone());
        // Changed while asked: the answer may be older than the change.
        if self.stale.remove(&item) {
            cx.mark(key);
            return;
        }
        match result {
            Ok(Response::Capacity {
                available_bytes,
                maximum_volume_size,
                ..
            }) if self.items.contains(&item) => {
                self.reported
                    .insert(item, (available_bytes, maximum_volume_size));
                cx.mark(key);
            }
            Ok(_) => {}
            Err(_) => {
                cx.fail(key);
            }
        }
    }

    fn deadline(&self, _cx: &Cx<Self>) -> Option<Tick> {
        self.next_poll
    }

    /// A resync refreshes every object, as a poll does (what changes the
    /// storage without an event — a volume whose PV never came — shows).
    fn resync(&mut self, cx: &mut Cx<Self>) {
        self.mark_items(cx, |_| true);
    }

    /// The poll: every item is refreshed.
    fn fire(&mut self, cx: &mut Cx<Self>, now: Tick) {
        let Some(at) = self.next_poll else { return };
        if now < at {
            return;
        }
        self.next_poll = self.config.poll_interval.map(|p| now + p);
        self.mark_items(cx, |_| true);
    }

    /// One operation per key at a time.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        let keys: Vec<Key> = cx
            .in_flight()
            .map(|c| match c {
                Call::Get(i) | Call::Write(i) => Key::Item(i.clone()),
                Call::Delete(n) => Key::Object(n.clone()),
            })
            .collect();
        crate::machine::one_at_a_time("capacity", keys.iter(), |k| cx.busy(k), cx.held_count())
    }
}
