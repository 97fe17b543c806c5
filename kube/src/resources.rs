//! Where each kind the machines know lives in the Kubernetes API: its
//! group, version and plural (from k8s-openapi's types), and whether it is
//! namespaced.

use k8s_openapi::api::core::v1 as core_v1;
use k8s_openapi::api::storage::v1 as storage_v1;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, Resource};
use volplane_core::model::Kind;

/// The API resource of `kind`.
pub fn api_resource(kind: Kind) -> ApiResource {
    fn erase<K: Resource<DynamicType = ()>>() -> ApiResource {
        ApiResource::erase::<K>(&())
    }
    match kind {
        Kind::PersistentVolume => erase::<core_v1::PersistentVolume>(),
        Kind::PersistentVolumeClaim => erase::<core_v1::PersistentVolumeClaim>(),
        Kind::StorageClass => erase::<storage_v1::StorageClass>(),
        Kind::VolumeAttachment => erase::<storage_v1::VolumeAttachment>(),
        Kind::CsiNode => erase::<storage_v1::CSINode>(),
        Kind::CsiDriver => erase::<storage_v1::CSIDriver>(),
        Kind::Node => erase::<core_v1::Node>(),
        Kind::Pod => erase::<core_v1::Pod>(),
        Kind::VolumeSnapshot => snapshot_api("VolumeSnapshot", "volumesnapshots"),
        Kind::VolumeSnapshotContent => {
            snapshot_api("VolumeSnapshotContent", "volumesnapshotcontents")
        }
        Kind::VolumeSnapshotClass => snapshot_api("VolumeSnapshotClass", "volumesnapshotclasses"),
        Kind::VolumeGroupSnapshot => group_api("VolumeGroupSnapshot", "volumegroupsnapshots"),
        Kind::VolumeGroupSnapshotContent => {
            group_api("VolumeGroupSnapshotContent", "volumegroupsnapshotcontents")
        }
        Kind::VolumeGroupSnapshotClass => {
            group_api("VolumeGroupSnapshotClass", "volumegroupsnapshotclasses")
        }
        Kind::Secret => erase::<core_v1::Secret>(),
        Kind::VolumeAttributesClass => erase::<storage_v1::VolumeAttributesClass>(),
        Kind::CsiStorageCapacity => erase::<storage_v1::CSIStorageCapacity>(),
    }
}

/// A kind of the snapshot CRDs (external-snapshotter's, not in k8s-openapi).
fn snapshot_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "snapshot.storage.k8s.io".into(),
        version: "v1".into(),
        api_version: "snapshot.storage.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A kind of the group snapshot CRDs (external-snapshotter's).
fn group_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "groupsnapshot.storage.k8s.io".into(),
        version: "v1".into(),
        api_version: "groupsnapshot.storage.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Claims, pods, VolumeSnapshots, VolumeGroupSnapshots, Secrets and
/// CSIStorageCapacities live in a namespace; the rest are cluster-scoped.
pub fn namespaced(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::PersistentVolumeClaim
            | Kind::Pod
            | Kind::VolumeSnapshot
            | Kind::VolumeGroupSnapshot
            | Kind::Secret
            | Kind::CsiStorageCapacity
    )
}

/// The API for `kind` in `namespace` (every namespace when it is empty).
pub fn api(client: &Client, kind: Kind, namespace: &str) -> Api<DynamicObject> {
    let resource = api_resource(kind);
    if namespaced(kind) && !namespace.is_empty() {
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_upstream_path() {
        let paths: Vec<String> = Kind::ALL
            .into_iter()
            .map(|k| {
                let r = api_resource(k);
                format!("{} {} {}", r.api_version, r.kind, r.plural)
            })
            .collect();
        assert_eq!(
            paths,
            [
                "v1 PersistentVolume persistentvolumes",
                "v1 PersistentVolumeClaim persistentvolumeclaims",
                "storage.k8s.io/v1 StorageClass storageclasses",
                "storage.k8s.io/v1 VolumeAttachment volumeattachments",
                "storage.k8s.io/v1 CSINode csinodes",
                "storage.k8s.io/v1 CSIDriver csidrivers",
                "v1 Node nodes",
                "v1 Pod pods",
                "snapshot.storage.k8s.io/v1 VolumeSnapshot volumesnapshots",
                "snapshot.storage.k8s.io/v1 VolumeSnapshotContent volumesnapshotcontents",
                "snapshot.storage.k8s.io/v1 VolumeSnapshotClass volumesnapshotclasses",
                "groupsnapshot.storage.k8s.io/v1 VolumeGroupSnapshot volumegroupsnapshots",
                "groupsnapshot.storage.k8s.io/v1 VolumeGroupSnapshotContent volumegroupsnapshotcontents",
                "groupsnapshot.storage.k8s.io/v1 VolumeGroupSnapshotClass volumegroupsnapshotclasses",
                "v1 Secret secrets",
                "storage.k8s.io/v1 VolumeAttributesClass volumeattributesclasses",
                "storage.k8s.io/v1 CSIStorageCapacity csistoragecapacities",
            ]
        );
        for k in Kind::ALL {
            assert_eq!(api_resource(k).kind, k.as_str());
        }
    }
}
