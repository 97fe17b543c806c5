//! The owner of the CSIStorageCapacity objects (`--capacity-ownerref-level`),
//! found as external-provisioner finds it: from the controller's own pod
//! (`POD_NAME` in `NAMESPACE`), up its chain of controlling owners.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use volplane_core::model::OwnerReference;

/// Why the owner could not be found.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// An object of the chain could not be read.
    #[error("look up owner(s) of pod: get {api_version} {kind} {namespace}/{name}: {source}")]
    Get {
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What the API server (or the connection) said.
        source: kube::Error,
    },
    /// An object of the chain has no controlling owner, fewer levels up
    /// than asked.
    #[error(
        "look up owner(s) of pod: {api_version}/{kind} {name:?} in namespace {namespace:?} has no controlling owner, cannot unwind the ownership further"
    )]
    NoController {
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// The object `levels` controlling owners above the pod `pod` of
/// `namespace` (0: the pod itself; 1: its StatefulSet, DaemonSet or
/// ReplicaSet; 2: a ReplicaSet's Deployment…), as an owner reference that
/// says it is the controller. Level 1 needs no read of the owner (only of
/// the pod), as upstream.
pub async fn lookup(
    client: &Client,
    namespace: &str,
    pod: &str,
    levels: u32,
) -> Result<OwnerReference, OwnerError> {
    let (mut api_version, mut kind, mut name) =
        ("v1".to_string(), "Pod".to_string(), pod.to_string());
    let mut levels = levels;
    loop {
        let resource = resource_of(&api_version, &kind);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let o = match api.get(&name).await {
            Ok(o) => o,
            Err(source) => {
                return Err(OwnerError::Get {
                    api_version,
                    kind,
                    namespace: namespace.into(),
                    name,
                    source,
                });
            }
        };
        if levels == 0 {
            return Ok(OwnerReference {
                api_version,
                kind,
                uid: o.metadata.uid.unwrap_or_default(),
                name,
                controller: Some(true),
            });
        }
        let Some(owner) = o
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.controller == Some(true))
        else {
            return Err(OwnerError::NoController {
                api_version,
                kind,
                namespace: namespace.into(),
                name,
            });
        };
        if levels == 1 {
            return Ok(OwnerReference {
                api_version: owner.api_version,
                kind: owner.kind,
                name: owner.name,
                uid: owner.uid,
                controller: Some(true),
            });
        }
        (api_version, kind, name) = (owner.api_version, owner.kind, owner.name);
        levels -= 1;
    }
}

/// The API resource of a namespaced kind an owner reference names (its
/// plural: the lower-cased kind and `s`, as for the workload kinds).
fn resource_of(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    };
    ApiResource {
        group,
        version,
        api_version: api_version.into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_kinds_have_their_api_paths() {
        let r = resource_of("apps/v1", "ReplicaSet");
        assert_eq!(
            (r.group.as_str(), r.version.as_str(), r.plural.as_str()),
            ("apps", "v1", "replicasets")
        );
        let r = resource_of("v1", "Pod");
        assert_eq!((r.group.as_str(), r.plural.as_str()), ("", "pods"));
    }
}
