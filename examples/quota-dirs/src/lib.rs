//! quota-dirs: each volume is a directory under one storage directory,
//! with the size promised to it recorded beside it. Everything else — the
//! CSI services, validation, staging and publishing (bind mounts), crash
//! safety — is volplane's.

use std::path::PathBuf;

use volplane::{
    Attributes, Backend, CreatePlan, HostError, NodeHost, NodeSource, Secrets, Status, Volume,
    host_status,
};

/// The driver's name.
pub const NAME: &str = "quota-dirs.example.com";
/// The volume context key that carries the recorded size.
pub const QUOTA: &str = "quota-dirs.example.com/quota-bytes";

/// The backend: volumes live in `root`.
#[derive(Debug, Clone)]
pub struct QuotaDirs {
    root: PathBuf,
}

impl QuotaDirs {
    /// The backend over `root`.
    pub fn new(root: impl Into<PathBuf>) -> QuotaDirs {
        QuotaDirs { root: root.into() }
    }

    /// A volume's directory, and the file recording its size.
    fn paths(&self, id: &str) -> (PathBuf, PathBuf) {
        (self.root.join(id), self.root.join(format!("{id}.quota")))
    }
}

/// A volume's id from its name: stable across restarts and releases, and
/// safe as a file name whatever the name holds (FNV-1a).
fn volume_id(name: &str) -> String {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("qd-{hash:016x}")
}

/// Whether `id` is one [`volume_id`] made: nothing else becomes a path.
fn is_ours(id: &str) -> bool {
    id.strip_prefix("qd-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl Backend for QuotaDirs {
    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        let id = volume_id(&plan.name);
        let (dir, record) = self.paths(&id);
        let asked = plan.suggested_bytes;
        // Again after a crash: the record already there is what was promised.
        let quota = host
            .run(move |h| {
                h.write_new(&record, asked.to_string().as_bytes())?;
                h.create_dir(&dir)?;
                let recorded = h.read_small(&record, 32)?.unwrap_or_default();
                String::from_utf8_lossy(&recorded)
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| HostError::Refused(format!("{} is damaged", record.display())))
            })
            .await
            .map_err(|e| host_status(&format!("create volume {:?}", plan.name), e))?;
        Ok(Volume {
            volume_id: id,
            capacity_bytes: quota,
            volume_context: [(QUOTA.to_string(), quota.to_string())].into(),
            accessible_topology: Vec::new(),
            content_source: None,
        })
    }

    async fn delete_volume(&self, host: &NodeHost, v: &Volume, _: &Secrets) -> Result<(), Status> {
        if !is_ours(&v.volume_id) {
            return Ok(()); // never ours: nothing to delete
        }
        let (dir, record) = self.paths(&v.volume_id);
        host.run(move |h| {
            h.remove_tree(&dir)?;
            h.remove(&record)
        })
        .await
        .map_err(|e| host_status(&format!("delete volume {}", v.volume_id), e))
    }

    async fn node_source(
        &self,
        host: &NodeHost,
        volume_id: &str,
        _publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> Result<NodeSource, Status> {
        let (dir, _) = self.paths(volume_id);
        let probe = dir.clone();
        let found = is_ours(volume_id)
            && host
                .run(move |h| h.open_existing(&probe).map(|d| d.is_some()))
                .await
                .map_err(|e| host_status(&format!("volume {volume_id}"), e))?;
        match found {
            true => Ok(NodeSource::Directory(dir)),
            false => Err(Status::not_found(format!(
                "volume {volume_id} does not exist"
            ))),
        }
    }
}
