//! Object metadata, references and label selectors, with Kubernetes' field names.

use super::Labels;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::hasher::canon;

/// `metadata` of every object. Unknown fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    /// `name`.
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `namespace`.
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `uid`.
    pub uid: String,
    /// The store's version of the object; writes carry it as a precondition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `labels`.
    pub labels: Labels,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `annotations`.
    pub annotations: Labels,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `finalizers`.
    pub finalizers: Vec<String>,
    /// Set when deletion was requested; the object stays until its finalizers are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `creationTimestamp`.
    pub creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `ownerReferences`.
    pub owner_references: Vec<OwnerReference>,
}

/// Field by field, the resourceVersion through `canon::rv` (the explorer
/// counts states equal up to renumbered versions as one).
impl Hash for ObjectMeta {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            labels,
            annotations,
            finalizers,
            deletion_timestamp,
            creation_timestamp,
            owner_references,
        } = self;
        (name, namespace, uid).hash(h);
        canon::rv(h, resource_version);
        (labels, annotations, finalizers).hash(h);
        (deletion_timestamp, creation_timestamp, owner_references).hash(h);
    }
}

/// As [`ObjectMeta`]'s: the resourceVersion through `canon::rv`.
impl Hash for ObjectReference {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let ObjectReference {
            kind,
            api_version,
            namespace,
            name,
            uid,
            resource_version,
        } = self;
        (kind, api_version, namespace, name, uid).hash(h);
        canon::rv(h, resource_version);
    }
}

impl ObjectMeta {
    /// Metadata of a cluster-scoped object named `name`.
    pub fn named(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Metadata of the object `namespace`/`name`.
    pub fn namespaced(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: name.into(),
            namespace: namespace.into(),
            ..Default::default()
        }
    }

    /// The annotation `key`'s value, if it is set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }

    /// True when the annotation `key` is set.
    pub fn has_annotation(&self, key: &str) -> bool {
        self.annotations.contains_key(key)
    }

    /// True when the finalizer `f` is present.
    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    /// Adds a finalizer; false when it was already there.
    pub fn add_finalizer(&mut self, f: &str) -> bool {
        if self.has_finalizer(f) {
            return false;
        }
        self.finalizers.push(f.to_string());
        true
    }

    /// Removes a finalizer; false when it was not there.
    pub fn remove_finalizer(&mut self, f: &str) -> bool {
        let before = self.finalizers.len();
        self.finalizers.retain(|x| x != f);
        before != self.finalizers.len()
    }

    /// True once deletion was asked for (`deletionTimestamp` set).
    pub fn deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `OwnerReference`, with the API's field names.
pub struct OwnerReference {
    #[serde(default)]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `name`.
    pub name: String,
    #[serde(default)]
    /// `uid`.
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `controller`: the owner is the object's managing controller.
    pub controller: Option<bool>,
}

/// `ObjectReference` (a PV's `claimRef`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `kind`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `namespace`.
    pub namespace: String,
    #[serde(default)]
    /// `name`.
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `uid`.
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// `resourceVersion`.
    pub resource_version: String,
}

/// A label selector: `matchLabels` and `matchExpressions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    /// `matchLabels`.
    pub match_labels: Labels,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `matchExpressions`.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `LabelSelectorRequirement`, with the API's field names.
pub struct LabelSelectorRequirement {
    /// `key`.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// `values`.
    pub values: Vec<String>,
}

impl LabelSelector {
    /// True when `labels` satisfy the selector (an empty selector matches all).
    /// An unknown operator matches nothing.
    pub fn matches(&self, labels: &impl super::attributes::LabelLookup) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.label(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.label(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.iter().any(|x| x == v)),
                    "NotIn" => value.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }

    /// The selector as kubectl prints it (metav1.FormatLabelSelector):
    /// `app=db,tier in (a,b),!legacy`; `<none>` when empty.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            let values = r.values.join(",");
            parts.push(match r.operator.as_str() {
                "In" => format!("{} in ({values})", r.key),
                "NotIn" => format!("{} notin ({values})", r.key),
                "Exists" => r.key.clone(),
                "DoesNotExist" => format!("!{}", r.key),
                other => format!("{} {other} ({values})", r.key),
            });
        }
        if parts.is_empty() {
            "<none>".into()
        } else {
            parts.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_labels_and_expressions() {
        let labels = Labels::from([("tier".to_string(), "gold".to_string())]);
        let mut s = LabelSelector::default();
        assert!(s.matches(&labels));
        s.match_labels.insert("tier".into(), "gold".into());
        assert!(s.matches(&labels));
        s.match_expressions.push(LabelSelectorRequirement {
            key: "zone".into(),
            operator: "DoesNotExist".into(),
            values: vec![],
        });
        assert!(s.matches(&labels));
        s.match_expressions.push(LabelSelectorRequirement {
            key: "tier".into(),
            operator: "NotIn".into(),
            values: vec!["gold".into()],
        });
        assert!(!s.matches(&labels));
    }
}
