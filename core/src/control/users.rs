//! Who uses which volume, indexed from the watches: the claims bound to
//! each volume and the pods that name each claim. Attach/detach and the
//! kubelet find a volume's pods through it without reading every pod.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::*;

/// Who uses what, kept from the watches: the claims bound to each volume
/// and the pods that name each claim (so a pass over one volume finds its
/// pods without reading every pod).
#[derive(Debug, Clone, Default, Hash)]
pub struct Users {
    /// Volume name → claims (namespace, name) whose `volumeName` is it.
    claims: BTreeMap<String, BTreeSet<(String, String)>>,
    /// Claim (namespace, name) → pods (names) that name it.
    pods: BTreeMap<(String, String), BTreeSet<String>>,
}

impl Users {
    /// Keeps the index in step with a cache: `o` entered it (`present`) or
    /// left it.
    pub fn index(&mut self, o: &Object, present: bool) {
        match o {
            Object::Pvc(c) => self.claim(c, present),
            Object::Pod(p) => self.pod(p, present),
            _ => {}
        }
    }

    /// Claims bound to `volume`.
    pub fn claims_of(&self, volume: &str) -> impl Iterator<Item = &(String, String)> {
        self.claims.get(volume).into_iter().flatten()
    }

    /// Pods naming the claim `namespace`/`claim`.
    pub fn pods_of(&self, namespace: &str, claim: &str) -> impl Iterator<Item = &String> {
        self.pods
            .get(&(namespace.to_string(), claim.to_string()))
            .into_iter()
            .flatten()
    }

    fn claim(&mut self, c: &PersistentVolumeClaim, present: bool) {
        let key = (c.metadata.namespace.clone(), c.metadata.name.clone());
        let volume = c.volume_name();
        if volume.is_empty() {
            return;
        }
        if present {
            self.claims
                .entry(volume.to_string())
                .or_default()
                .insert(key);
        } else if let Some(set) = self.claims.get_mut(volume) {
            set.remove(&key);
            if set.is_empty() {
                self.claims.remove(volume);
            }
        }
    }

    fn pod(&mut self, p: &Pod, present: bool) {
        for claim in p.claims() {
            let key = (p.metadata.namespace.clone(), claim.to_string());
            if present {
                self.pods
                    .entry(key)
                    .or_default()
                    .insert(p.metadata.name.clone());
            } else if let Some(set) = self.pods.get_mut(&key) {
                set.remove(&p.metadata.name);
                if set.is_empty() {
                    self.pods.remove(&key);
                }
            }
        }
    }
}
