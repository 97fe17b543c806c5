//! loop-block: each volume is a sparse image file; ControllerPublish
//! attaches it as a loop device and hands the device to the node in the
//! publish context; the node side proves the device really is that
//! volume's before volplane formats or mounts it.

use std::path::PathBuf;

use volplane::{
    Attributes, Backend, Capability, CreatePlan, DEVICE_KEY, Features, HostError, NodeHost,
    NodeSource, Secrets, Status, Volume, host_status,
};

/// The driver's name.
pub const NAME: &str = "loop-block.example.com";
/// The smallest volume: room for a filesystem's own metadata.
const MIN_BYTES: u64 = 16 << 20;

/// The backend: images live in `root`.
#[derive(Debug, Clone)]
pub struct LoopBlock {
    root: PathBuf,
}

impl LoopBlock {
    /// The backend over `root`.
    pub fn new(root: impl Into<PathBuf>) -> LoopBlock {
        LoopBlock { root: root.into() }
    }

    fn image(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.img"))
    }
}

/// A volume's id from its name, stable and safe as a file name (FNV-1a).
fn volume_id(name: &str) -> String {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("lb-{hash:016x}")
}

fn is_ours(id: &str) -> bool {
    id.strip_prefix("lb-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl Backend for LoopBlock {
    fn features(&self) -> Features {
        Features {
            attach: true,
            block: true,
            ..Features::default()
        }
    }

    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        let id = volume_id(&plan.name);
        let (image, size) = (self.image(&id), plan.suggested_bytes.max(MIN_BYTES));
        // An image already there (a create repeated after a crash) is kept.
        let size = host
            .run(move |h| h.create_image(&image, size))
            .await
            .map_err(|e| host_status(&format!("create volume {:?}", plan.name), e))?;
        Ok(Volume {
            volume_id: id,
            capacity_bytes: size,
            volume_context: Attributes::new(),
            accessible_topology: Vec::new(),
            content_source: None,
        })
    }

    async fn delete_volume(&self, host: &NodeHost, v: &Volume, _: &Secrets) -> Result<(), Status> {
        if !is_ours(&v.volume_id) {
            return Ok(()); // never ours: nothing to delete
        }
        let image = self.image(&v.volume_id);
        host.run(move |h| {
            if h.loop_device_of(&image)?.is_some() {
                return Err(HostError::Refused("still attached: detach it first".into()));
            }
            h.remove(&image)
        })
        .await
        .map_err(|e| host_status(&format!("delete volume {}", v.volume_id), e))
    }

    async fn controller_publish(
        &self,
        host: &NodeHost,
        v: &Volume,
        node_id: &str,
        _: &Capability,
        _readonly: bool,
        _: &Secrets,
    ) -> Result<Attributes, Status> {
        let image = self.image(&v.volume_id);
        let device = host
            .run(move |h| h.loop_attach(&image))
            .await
            .map_err(|e| host_status(&format!("attach volume {} to {node_id}", v.volume_id), e))?;
        Ok([(DEVICE_KEY.to_string(), device.display().to_string())].into())
    }

    async fn controller_unpublish(
        &self,
        host: &NodeHost,
        v: &Volume,
        node_id: &str,
        _still_published: &[String],
        _: &Secrets,
    ) -> Result<(), Status> {
        let image = self.image(&v.volume_id);
        host.run(move |h| h.loop_detach(&image))
            .await
            .map_err(|e| host_status(&format!("detach volume {} from {node_id}", v.volume_id), e))
    }

    async fn node_source(
        &self,
        host: &NodeHost,
        volume_id: &str,
        publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> Result<NodeSource, Status> {
        if !is_ours(volume_id) {
            return Err(Status::not_found(format!(
                "volume {volume_id} does not exist"
            )));
        }
        // The publish context only names a device; the image's own loop
        // device is the proof.
        let (image, named) = (self.image(volume_id), publish_context.get(DEVICE_KEY));
        let attached = host.run(move |h| h.loop_device_of(&image)).await;
        match attached.map_err(|e| host_status(&format!("volume {volume_id}"), e))? {
            Some(dev) if named.is_none_or(|n| dev.path() == std::path::Path::new(n)) => {
                Ok(NodeSource::Device(dev.path().to_path_buf()))
            }
            Some(dev) => Err(Status::failed_precondition(format!(
                "volume {volume_id} is attached as {}, not as the publish context's {named:?}",
                dev.path().display()
            ))),
            None => Err(Status::failed_precondition(format!(
                "volume {volume_id} is not attached to this node"
            ))),
        }
    }
}
