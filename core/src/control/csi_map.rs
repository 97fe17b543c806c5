//! How Kubernetes' access modes and volume modes become CSI capabilities
//! (B2.3, B2.4, csi-lib-utils' accessmodes), shared by the provisioner, the
//! attacher, the kubelet and the resizer.

use crate::driver::{AccessMode as Csi, AccessType, Capability};
use crate::model::{AccessMode as K8s, PersistentVolume, VolumeMode};

/// What the driver advertises that changes the mapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DriverModes {
    /// Controller/node SINGLE_NODE_MULTI_WRITER capability.
    pub single_node_multi_writer: bool,
}

/// Kubernetes access modes that have no CSI access mode (csi-lib-utils'
/// words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// ReadWriteOncePod beside another mode.
    #[error("ReadWriteOncePod may not be combined with other access modes")]
    OncePodCombined,
    /// ReadOnlyMany beside ReadWriteOnce (without ReadWriteMany).
    #[error("ReadOnlyMany together with ReadWriteOnce has no CSI access mode")]
    ReadOnlyWithOnce,
    /// A mode Kubernetes does not define.
    #[error("access mode {0:?} is not a Kubernetes access mode")]
    Unknown(String),
}

/// The CSI access mode for each Kubernetes mode (B2.4). RWOP with any other
/// mode, or ROX with RWO, is an error, as in csi-lib-utils.
pub fn access_modes(modes: &[K8s], driver: DriverModes) -> Result<Vec<Csi>, ModeError> {
    if modes.contains(&K8s::ReadWriteOncePod) && modes.len() > 1 {
        return Err(ModeError::OncePodCombined);
    }
    if modes.contains(&K8s::ReadOnlyMany)
        && modes.contains(&K8s::ReadWriteOnce)
        && !modes.contains(&K8s::ReadWriteMany)
    {
        return Err(ModeError::ReadOnlyWithOnce);
    }
    modes
        .iter()
        .map(|m| match m {
            K8s::ReadWriteMany => Ok(Csi::MultiNodeMultiWriter),
            K8s::ReadOnlyMany => Ok(Csi::MultiNodeReaderOnly),
            K8s::ReadWriteOnce if driver.single_node_multi_writer => Ok(Csi::SingleNodeMultiWriter),
            K8s::ReadWriteOnce => Ok(Csi::SingleNodeWriter),
            K8s::ReadWriteOncePod if driver.single_node_multi_writer => {
                Ok(Csi::SingleNodeSingleWriter)
            }
            K8s::ReadWriteOncePod => Ok(Csi::SingleNodeWriter),
            K8s::Other(s) => Err(ModeError::Unknown(s.clone())),
        })
        .collect()
}

/// The access type for a volume mode, filesystem and mount options.
pub fn access_type(mode: &VolumeMode, fs_type: &str, mount_flags: &[String]) -> AccessType {
    match mode {
        VolumeMode::Block => AccessType::Block,
        _ => AccessType::Mount {
            fs_type: fs_type.to_string(),
            mount_flags: mount_flags.to_vec(),
            volume_mount_group: String::new(),
        },
    }
}

/// The capability a PV is published and staged with: its first access mode
/// (D3.5; ReadWriteOnce when it has none) as CSI maps it.
pub fn pv_capability(pv: &PersistentVolume, driver: DriverModes) -> Result<Capability, ModeError> {
    let first = pv
        .spec
        .access_modes
        .first()
        .cloned()
        .unwrap_or(K8s::ReadWriteOnce);
    let mode = access_modes(&[first], driver)?[0];
    let fs = pv
        .spec
        .csi
        .as_ref()
        .map(|c| c.fs_type.as_str())
        .unwrap_or("");
    Ok(Capability {
        access_type: access_type(&pv.volume_mode(), fs, &pv.spec.mount_options),
        access_mode: mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b2_4_modes_map_as_csi_lib_utils_maps_them() {
        let plain = DriverModes::default();
        let multi = DriverModes {
            single_node_multi_writer: true,
        };
        assert_eq!(
            access_modes(&[K8s::ReadWriteMany], plain).unwrap(),
            vec![Csi::MultiNodeMultiWriter]
        );
        assert_eq!(
            access_modes(&[K8s::ReadOnlyMany], plain).unwrap(),
            vec![Csi::MultiNodeReaderOnly]
        );
        assert_eq!(
            access_modes(&[K8s::ReadWriteOnce], plain).unwrap(),
            vec![Csi::SingleNodeWriter]
        );
        assert_eq!(
            access_modes(&[K8s::ReadWriteOnce], multi).unwrap(),
            vec![Csi::SingleNodeMultiWriter]
        );
        assert_eq!(
            access_modes(&[K8s::ReadWriteOncePod], multi).unwrap(),
            vec![Csi::SingleNodeSingleWriter]
        );
        assert_eq!(
            access_modes(&[K8s::ReadWriteOncePod, K8s::ReadWriteOnce], plain),
            Err(ModeError::OncePodCombined)
        );
        assert_eq!(
            access_modes(&[K8s::ReadOnlyMany, K8s::ReadWriteOnce], plain),
            Err(ModeError::ReadOnlyWithOnce)
        );
    }
}
