//! What the simulation judges of storage capacity: once the cluster is
//! quiet, the tracker's CSIStorageCapacity objects say, for each zone where
//! the driver is registered and each StorageClass of the driver's, exactly
//! what the storage has free there — one object each, none for anything
//! else.

use std::collections::{BTreeMap, BTreeSet};

use super::actor::CAPACITY_NAMESPACE;
use super::{DRIVER, Sim, ZONE_KEY};
use crate::capacity::{DRIVER_NAME_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
use crate::model::*;

impl Sim {
    /// The zones of the nodes where the driver is registered (its
    /// CSINode entry lists the zone key, the Node carries the label).
    fn registered_zones(&self) -> BTreeSet<String> {
        self.store
            .objects()
            .filter_map(|o| {
                let Object::CsiNode(c) = o else { return None };
                c.driver(DRIVER)?;
                let key = ObjectKey::new(Kind::Node, "", &c.metadata.name);
                match self.store.get(&key) {
                    Some(Object::Node(n)) => n.metadata.labels.get(ZONE_KEY).map(str::to_owned),
                    _ => None,
                }
            })
            .collect()
    }

    /// Zones holding a volume no PV shows as it is: one no PV names (a
    /// create that timed out for a claim that went), or one whose size
    /// its PV does not say (an expansion whose claim went before its PV
    /// was updated). Only a poll finds what they have free.
    fn zones_with_unseen_volumes(&self) -> BTreeSet<String> {
        let named: BTreeMap<&str, u64> = self
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pv(pv) => {
                    let handle = pv.spec.csi.as_ref()?.volume_handle.as_str();
                    Some((handle, pv.capacity().map_or(0, |q| q.bytes())))
                }
                _ => None,
            })
            .collect();
        self.storage
            .placed
            .iter()
            .filter(|(handle, (_, bytes))| named.get(handle.as_str()) != Some(bytes))
            .map(|(_, (zone, _))| zone.clone())
            .collect()
    }

    /// Before the last poll, the objects follow the volumes by their PVs
    /// alone: in every zone whose volumes all have PVs, they are right
    /// already.
    pub fn check_capacity_followed_volumes(&mut self) {
        let mut found = Vec::new();
        let unseen = self.zones_with_unseen_volumes();
        self.capacity_converged_in(&mut found, &|zone| !unseen.contains(zone));
        for what in found {
            self.violate(
                "capacity not refreshed",
                format!("not refreshed when volumes came or went: {what}"),
            );
        }
    }

    /// Liveness: one object per (zone, class), each saying what is free.
    pub(super) fn capacity_converged(&self, found: &mut Vec<String>) {
        self.capacity_converged_in(found, &|_| true);
    }

    fn capacity_converged_in(&self, found: &mut Vec<String>, judged: &dyn Fn(&str) -> bool) {
        if !self.config.capacity {
            return;
        }
        let classes: Vec<String> = self
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Class(sc) if sc.provisioner == DRIVER => Some(sc.metadata.name.clone()),
                _ => None,
            })
            .collect();
        let mut seen: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
        for o in self.store.objects() {
            let Object::Capacity(c) = o else { continue };
            let managed = c.metadata.namespace == CAPACITY_NAMESPACE
                && c.metadata.labels.get(DRIVER_NAME_LABEL) == Some(DRIVER)
                && c.metadata.labels.get(MANAGED_BY_LABEL) == Some(MANAGED_BY);
            if !managed {
                continue;
            }
            let zone = c
                .node_topology
                .as_ref()
                .and_then(|t| t.match_labels.get(ZONE_KEY).map(str::to_owned))
                .unwrap_or_default();
            let bytes = c.capacity.as_ref().map_or(0, Quantity::bytes);
            seen.entry((zone, c.storage_class_name.clone()))
                .or_default()
                .push(bytes);
        }
        for zone in self.registered_zones().into_iter().filter(|z| judged(z)) {
            for class in &classes {
                let want = self.storage.free(Some(&zone));
                match seen.remove(&(zone.clone(), class.clone())).as_deref() {
                    Some([bytes]) if *bytes == want => {}
                    got => found.push(format!(
                        "CSIStorageCapacity of class {class} in zone {zone}: {got:?}, but {want} bytes are free"
                    )),
                }
            }
        }
        for ((zone, class), _) in seen.into_iter().filter(|((z, _), _)| judged(z)) {
            found.push(format!(
                "CSIStorageCapacity of class {class} in zone {zone:?} left behind: no such class or zone"
            ));
        }
    }
}
