//! The CSI driver: its controller asks the appliance over HTTP (the
//! appliance is the truth about which volumes exist), its node side
//! attaches a volume's image as a loop device when staging it and
//! detaches it after unstaging — the shape of an iSCSI or NVMe-oF driver.

use std::path::PathBuf;
use std::time::Duration;

use volplane::{
    Attributes, Backend, Code, CreatePlan, Features, NodeHost, NodeSource, Secrets, StagePlan,
    Status, StoredVolume, Volume, VolumePage, host_status,
};

use crate::api::{self, Page, Problem, VolumeInfo, is_volume_id};
use crate::http;

/// The driver's name.
pub const NAME: &str = "remote-appliance.example.com";
/// The secret key holding the appliance token (from the StorageClass's
/// `csi.storage.k8s.io/provisioner-secret-*`).
pub const TOKEN_KEY: &str = "token";
/// The smallest volume: room for a filesystem's own metadata.
const MIN_BYTES: u64 = 16 << 20;

/// The backend.
#[derive(Debug, Clone)]
pub struct RemoteAppliance {
    /// `host:port` of the appliance.
    address: String,
    /// The driver's own token, for what carries no secrets (ListVolumes,
    /// ControllerGetVolume): read-only on the appliance.
    reader: Option<String>,
    /// Where the node sees the appliance's images (its export).
    images: PathBuf,
    /// How long one request may take.
    timeout: Duration,
}

impl RemoteAppliance {
    /// A backend for the appliance at `address`, whose images the node
    /// sees in `images`.
    pub fn new(address: &str, reader: Option<String>, images: impl Into<PathBuf>) -> Self {
        RemoteAppliance {
            address: address.to_string(),
            reader,
            images: images.into(),
            timeout: Duration::from_secs(30),
        }
    }

    fn image(&self, volume_id: &str) -> Result<PathBuf, Status> {
        if !is_volume_id(volume_id) {
            return Err(Status::not_found(format!(
                "volume {volume_id} does not exist"
            )));
        }
        Ok(self.images.join(format!("{volume_id}.img")))
    }

    /// The request's token: a change needs one.
    fn token(secrets: &Secrets, what: &str) -> Result<String, Status> {
        secrets.0.get(TOKEN_KEY).cloned().ok_or_else(|| {
            Status::invalid(format!(
                "{what}: the request carries no secret {TOKEN_KEY:?}; set csi.storage.k8s.io/provisioner-secret-name and -namespace on the StorageClass"
            ))
        })
    }

    /// The request's token, or the driver's own reader token.
    fn reading_token(&self, secrets: &Secrets, what: &str) -> Result<String, Status> {
        match (secrets.0.get(TOKEN_KEY), &self.reader) {
            (Some(t), _) | (None, Some(t)) => Ok(t.clone()),
            (None, None) => Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{what}: no token: the request carries none and the driver was started without --token-file"
                ),
            )),
        }
    }

    /// One request to the appliance, on the blocking pool; a change
    /// carries this process's incarnation (the appliance's fence).
    async fn call(
        &self,
        host: &NodeHost,
        method: &'static str,
        path: String,
        token: String,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), Status> {
        let (address, timeout) = (self.address.clone(), self.timeout);
        let mut headers = vec![("Authorization", format!("Bearer {token}"))];
        if method != "GET" {
            headers.push(("X-Incarnation", host.incarnation().to_string()));
        }
        host.blocking(move || {
            http::call(&address, method, &path, &headers, &body, timeout).map_err(|e| {
                Status::new(
                    Code::Unavailable,
                    format!("the appliance at {address} did not answer {method} {path}: {e}"),
                )
            })
        })
        .await
    }
}

/// The appliance's refusal as the CSI code a CO acts on.
fn refusal(what: &str, code: u16, body: &[u8]) -> Status {
    let why = serde_json::from_slice::<Problem>(body)
        .map_or_else(|_| String::from_utf8_lossy(body).into_owned(), |p| p.error);
    let message = format!("{what}: the appliance answered {code}: {why}");
    let code = match code {
        400 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        409 if why.starts_with("fenced") => Code::Aborted,
        409 if what.starts_with("create") => Code::AlreadyExists,
        409 => Code::FailedPrecondition,
        503 => Code::Unavailable,
        507 => Code::ResourceExhausted,
        _ => Code::Internal,
    };
    Status::new(code, message)
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(body).map_err(|e| {
        Status::internal(format!(
            "{what}: the appliance's answer is not understood: {e}"
        ))
    })
}

fn volume(v: VolumeInfo) -> StoredVolume {
    let name = v.name.clone();
    let mut stored = StoredVolume::new(Volume {
        volume_id: v.id,
        capacity_bytes: v.bytes,
        volume_context: Attributes::new(),
        accessible_topology: Vec::new(),
        content_source: None,
    });
    stored.name = name;
    stored
}

impl Backend for RemoteAppliance {
    fn features(&self) -> Features {
        Features {
            block: true,
            expand: true,
            node_expand: true,
            lookup: true,
            list: true,
            ..Features::default()
        }
    }

    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        let what = format!("create volume {:?}", plan.name);
        let token = Self::token(&plan.secrets, &what)?;
        let bytes = plan.suggested_bytes.max(MIN_BYTES);
        if plan.capacity.limit_bytes != 0 && bytes > plan.capacity.limit_bytes {
            return Err(Status::new(
                Code::OutOfRange,
                format!(
                    "{what}: the smallest volume is {MIN_BYTES} bytes, over the limit of {}",
                    plan.capacity.limit_bytes
                ),
            ));
        }
        let body = serde_json::to_vec(&api::Create {
            name: plan.name.clone(),
            bytes,
        })
        .map_err(|e| Status::internal(e.to_string()))?;
        match self
            .call(host, "POST", "/v1/volumes".into(), token, body)
            .await?
        {
            (200 | 201, body) => Ok(volume(parse(&what, &body)?).volume),
            (code, body) => Err(refusal(&what, code, &body)),
        }
    }

    async fn delete_volume(
        &self,
        host: &NodeHost,
        v: &Volume,
        secrets: &Secrets,
    ) -> Result<(), Status> {
        if !is_volume_id(&v.volume_id) {
            return Ok(()); // never the appliance's: nothing to delete
        }
        let what = format!("delete volume {}", v.volume_id);
        let token = Self::token(secrets, &what)?;
        let path = format!("/v1/volumes/{}", v.volume_id);
        match self.call(host, "DELETE", path, token, Vec::new()).await? {
            (204 | 404, _) => Ok(()),
            (code, body) => Err(refusal(&what, code, &body)),
        }
    }

    async fn controller_expand(
        &self,
        host: &NodeHost,
        v: &Volume,
        capacity: volplane::CapacityRange,
        _: Option<&volplane::Capability>,
        secrets: &Secrets,
    ) -> Result<(u64, bool), Status> {
        let what = format!("expand volume {}", v.volume_id);
        let token = Self::token(secrets, &what)?;
        let body = serde_json::to_vec(&api::Expand {
            bytes: capacity.required_bytes,
        })
        .map_err(|e| Status::internal(e.to_string()))?;
        let path = format!("/v1/volumes/{}/expand", v.volume_id);
        match self.call(host, "POST", path, token, body).await? {
            (200, body) => Ok((parse::<VolumeInfo>(&what, &body)?.bytes, true)),
            (code, body) => Err(refusal(&what, code, &body)),
        }
    }

    async fn lookup_volume(
        &self,
        host: &NodeHost,
        volume_id: &str,
        secrets: &Secrets,
    ) -> Result<Option<StoredVolume>, Status> {
        if !is_volume_id(volume_id) {
            return Ok(None); // never the appliance's: asked of nobody
        }
        let what = format!("look up volume {volume_id}");
        let token = self.reading_token(secrets, &what)?;
        let path = format!("/v1/volumes/{volume_id}");
        match self.call(host, "GET", path, token, Vec::new()).await? {
            (200, body) => Ok(Some(volume(parse(&what, &body)?))),
            (404, _) => Ok(None),
            (code, body) => Err(refusal(&what, code, &body)),
        }
    }

    async fn list_volumes(
        &self,
        host: &NodeHost,
        starting_token: &str,
        max_entries: u32,
    ) -> Result<VolumePage, Status> {
        if !starting_token.is_empty() && !is_volume_id(starting_token) {
            return Err(Status::new(
                Code::Aborted,
                format!(
                    "ListVolumes: starting_token {starting_token:?} was not handed out by this driver"
                ),
            ));
        }
        let token = self.reading_token(&Secrets::default(), "ListVolumes")?;
        let path = format!("/v1/volumes?start={starting_token}&limit={max_entries}");
        match self.call(host, "GET", path, token, Vec::new()).await? {
            (200, body) => {
                let page: Page = parse("ListVolumes", &body)?;
                Ok(VolumePage {
                    entries: page.volumes.into_iter().map(volume).collect(),
                    next_token: page.next,
                })
            }
            (code, body) => Err(refusal("ListVolumes", code, &body)),
        }
    }

    async fn node_source(
        &self,
        host: &NodeHost,
        volume_id: &str,
        _publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> Result<NodeSource, Status> {
        // The image's own loop device is the proof: nothing the caller
        // names is taken for the volume.
        let image = self.image(volume_id)?;
        let attached = host.run(move |h| h.loop_device_of(&image)).await;
        match attached.map_err(|e| host_status(&format!("volume {volume_id}"), e))? {
            Some(dev) => Ok(NodeSource::Device(dev.path().to_path_buf())),
            None => Err(Status::failed_precondition(format!(
                "volume {volume_id} is not attached to this node"
            ))),
        }
    }

    async fn node_stage(&self, host: &NodeHost, plan: &StagePlan) -> Result<(), Status> {
        let id = &plan.volume_id;
        let image = self.image(id)?;
        let device = host
            .run(move |h| h.loop_attach(&image))
            .await
            .map_err(|e| host_status(&format!("attach volume {id} to this node"), e))?;
        host.stage(plan, NodeSource::Device(device)).await
    }

    async fn node_unstage(&self, host: &NodeHost, plan: &StagePlan) -> Result<(), Status> {
        let id = &plan.volume_id;
        let source = self
            .node_source(host, id, &plan.publish_context, &plan.volume_context)
            .await
            .ok();
        host.unstage(plan, source).await?;
        let image = self.image(id)?;
        host.run(move |h| h.loop_detach(&image))
            .await
            .map_err(|e| host_status(&format!("detach volume {id} from this node"), e))
    }

    async fn node_expand(
        &self,
        host: &NodeHost,
        volume_id: &str,
        publish_context: &Attributes,
        volume_context: &Attributes,
        mount_point: &str,
        block: bool,
    ) -> Result<u64, Status> {
        // The loop device learns the image's new size first.
        let image = self.image(volume_id)?;
        host.run(move |h| match h.loop_device_of(&image)? {
            Some(dev) => h.loop_refresh(&dev),
            None => Ok(()),
        })
        .await
        .map_err(|e| host_status(&format!("refresh volume {volume_id}'s device"), e))?;
        let source = self
            .node_source(host, volume_id, publish_context, volume_context)
            .await?;
        host.expand(source, mount_point, block).await
    }
}
