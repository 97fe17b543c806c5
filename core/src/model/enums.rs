//! The core's own enums for Kubernetes' string-valued fields. Each keeps an
//! `Other` variant so a value the core does not know loads (and round-trips)
//! instead of failing: the machines decide what an unknown value means.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $(#[doc = concat!("`", $s, "`.")] $variant,)*
            /// A value this version of volplane does not know.
            Other(String),
        }

        impl $name {
            /// The value as the API spells it.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $s,)*
                    $name::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> $name {
                match s {
                    $($s => $name::$variant,)*
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let s = String::deserialize(d)?;
                Ok($name::from(s.as_str()))
            }
        }
    };
}

string_enum!(
    /// `PersistentVolume.status.phase`.
    PvPhase { Pending = "Pending", Available = "Available", Bound = "Bound", Released = "Released", Failed = "Failed" }
);

string_enum!(
    /// `PersistentVolumeClaim.status.phase`.
    PvcPhase { Pending = "Pending", Bound = "Bound", Lost = "Lost" }
);

string_enum!(
    /// Kubernetes access modes.
    AccessMode {
        ReadWriteOnce = "ReadWriteOnce",
        ReadOnlyMany = "ReadOnlyMany",
        ReadWriteMany = "ReadWriteMany",
        ReadWriteOncePod = "ReadWriteOncePod",
    }
);

string_enum!(
    /// `volumeMode`.
    VolumeMode { Filesystem = "Filesystem", Block = "Block" }
);

string_enum!(
    /// `persistentVolumeReclaimPolicy` / StorageClass `reclaimPolicy`.
    ReclaimPolicy { Retain = "Retain", Delete = "Delete", Recycle = "Recycle" }
);

string_enum!(
    /// StorageClass `volumeBindingMode`.
    BindingMode { Immediate = "Immediate", WaitForFirstConsumer = "WaitForFirstConsumer" }
);

string_enum!(
    /// `Pod.status.phase`.
    PodPhase { Pending = "Pending", Running = "Running", Succeeded = "Succeeded", Failed = "Failed", Unknown = "Unknown" }
);

string_enum!(
    /// CSIDriver `fsGroupPolicy`.
    FsGroupPolicy { ReadWriteOnceWithFsType = "ReadWriteOnceWithFSType", File = "File", None = "None" }
);

impl AccessMode {
    /// The short form kubectl prints (RWO, ROX, RWX, RWOP).
    pub fn short(&self) -> &str {
        match self {
            AccessMode::ReadWriteOnce => "RWO",
            AccessMode::ReadOnlyMany => "ROX",
            AccessMode::ReadWriteMany => "RWX",
            AccessMode::ReadWriteOncePod => "RWOP",
            AccessMode::Other(s) => s,
        }
    }
}

impl PodPhase {
    /// Succeeded or Failed: the pod will not run again.
    pub fn terminated(&self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_load_and_round_trip() {
        let p: ReclaimPolicy = serde_json::from_str("\"Shred\"").unwrap();
        assert_eq!(p, ReclaimPolicy::Other("Shred".into()));
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"Shred\"");
        let m: AccessMode = serde_json::from_str("\"ReadWriteOncePod\"").unwrap();
        assert_eq!(m.short(), "RWOP");
    }
}
