//! A Deployment, as far as the volume lifecycle sees one: a pod template and
//! a replica count. The lab turns replicas into pods and places them on
//! nodes with [`place`]; no ReplicaSet is modelled.

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, OwnerReference};
use super::workload::{Pod, PodSpec};
use super::{DecodeError, Unknown};

/// The label a Deployment's pods carry, naming it.
pub const DEPLOYMENT_LABEL: &str = "volplane.io/deployment";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `PodTemplate`, with the API's field names.
pub struct PodTemplate {
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: PodSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
/// Kubernetes' `DeploymentSpec`, with the API's field names.
pub struct DeploymentSpec {
    /// Kubernetes' default is 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    #[serde(default)]
    /// `template`.
    pub template: PodTemplate,
}

/// `apps/v1` Deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    #[serde(default)]
    /// `apiVersion`.
    pub api_version: String,
    #[serde(default)]
    /// `kind`.
    pub kind: String,
    #[serde(default)]
    /// `metadata`.
    pub metadata: ObjectMeta,
    #[serde(default)]
    /// `spec`.
    pub spec: DeploymentSpec,
}

impl Deployment {
    /// Reads a Deployment from a manifest document the model kept whole.
    pub fn from_unknown(doc: &Unknown) -> Result<Deployment, DecodeError> {
        if doc.kind != "Deployment" {
            return Err(DecodeError::NotA {
                expected: "Deployment",
                kind: doc.kind.clone(),
            });
        }
        let mut d: Deployment = serde_json::from_value(doc.value.clone())
            .map_err(|e| DecodeError::Fields(format!("Deployment: {e}")))?;
        if d.metadata.name.is_empty() {
            return Err(DecodeError::Required("Deployment: metadata.name"));
        }
        if d.metadata.namespace.is_empty() {
            d.metadata.namespace = "default".into();
        }
        Ok(d)
    }

    /// `spec.replicas`; 1 when unset, as Kubernetes defaults it.
    pub fn replicas(&self) -> u32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// The name of replica `index`: `<deployment>-<index>`.
    pub fn pod_name(&self, index: u32) -> String {
        format!("{}-{index}", self.metadata.name)
    }

    /// Replica `index` as a pod bound to `node`.
    pub fn pod(&self, index: u32, node: &str) -> Pod {
        let mut p = Pod::new(&self.metadata.namespace, &self.pod_name(index));
        p.metadata.labels = self.spec.template.metadata.labels.clone();
        p.metadata
            .labels
            .insert(DEPLOYMENT_LABEL.into(), self.metadata.name.clone());
        p.metadata.owner_references.push(OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: self.metadata.name.clone(),
            controller: None,
            uid: self.metadata.uid.clone(),
        });
        p.spec = self.spec.template.spec.clone();
        p.spec.node_name = Some(node.into());
        p
    }
}

/// Where replica `index` runs: two replicas per node, nodes in order,
/// wrapping around (replicas 0 and 1 on the first node, 2 and 3 on the
/// second…). `None` without nodes.
pub fn place(index: u32, nodes: &[String]) -> Option<&str> {
    if nodes.is_empty() {
        return None;
    }
    Some(nodes[(index as usize / 2) % nodes.len()].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::parse_manifests;

    const WEB: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: web}}
    spec:
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: shared}
";

    #[test]
    fn a_deployment_loads_from_a_manifest_and_makes_pods() {
        let (objects, unknown) = parse_manifests(WEB).unwrap();
        assert!(objects.is_empty());
        let d = Deployment::from_unknown(&unknown[0]).unwrap();
        assert_eq!(d.replicas(), 3);
        let p = d.pod(1, "node-a");
        assert_eq!(p.metadata.name, "web-1");
        assert_eq!(p.metadata.namespace, "default");
        assert_eq!(p.node(), Some("node-a"));
        assert_eq!(p.claims().collect::<Vec<_>>(), ["shared"]);
        assert_eq!(&p.metadata.labels["app"], "web");
        assert_eq!(&p.metadata.labels[DEPLOYMENT_LABEL], "web");
    }

    #[test]
    fn replicas_fill_each_node_with_two_in_order() {
        let nodes = vec!["node-a".to_string(), "node-b".to_string()];
        let placed: Vec<_> = (0..5).map(|i| place(i, &nodes).unwrap()).collect();
        assert_eq!(placed, ["node-a", "node-a", "node-b", "node-b", "node-a"]);
        assert_eq!(place(0, &[]), None);
    }

    #[test]
    fn a_deployment_without_a_name_is_refused() {
        let (_, unknown) = parse_manifests("kind: Deployment\nmetadata: {}\n").unwrap();
        let e = Deployment::from_unknown(&unknown[0]).unwrap_err();
        assert_eq!(e, DecodeError::Required("Deployment: metadata.name"));
        assert_eq!(e.to_string(), "Deployment: metadata.name is required");
    }
}
