//! `guarded-driver`: a CSI driver built on the `volplane` crate, as a driver
//! author builds one, whose storage refuses CreateVolume and DeleteVolume
//! without the credentials it was started with — as a cloud or SAN
//! driver's API does. The real-apiserver test runs it to check that the
//! StorageClass's provisioner Secret reaches the driver.
//!
//! Usage: `guarded-driver --endpoint unix://… --node-id N --state-dir D
//! --kubelet-dir K`, with `GUARDED_STORAGE` the directory that holds the
//! volumes and `GUARDED_PASSWORD` the `password` the calls must carry.
//! With `GUARDED_KEEP_ON_DELETE=1` its DeleteVolume moves the volume to
//! the storage's trash (`ID.trash`, never emptied): a leak only the
//! storage shows, since the volume itself is gone. With
//! `GUARDED_STICKY_CREDENTIALS=1` a call that carries no password is
//! served with the last one a call carried (a storage client made once
//! from the first request's secrets and kept): credentials from nowhere.
//! With `GUARDED_ZONE=a` the node is in zone `a` (topology key
//! `topology.guarded.volplane.io/zone`) and its storage makes volumes
//! there, and also in `GUARDED_OTHER_ZONE` when given, as a zonal cloud's
//! does: where the requirement prefers, within the requisite zones, else
//! RESOURCE_EXHAUSTED; a volume of the other zone cannot be staged here
//! (FAILED_PRECONDITION), and each one made is said on stderr.

use std::path::PathBuf;
use std::sync::Mutex;

use volplane::{
    Attributes, Backend, Code, CreatePlan, Driver, Flags, NodeHost, NodeSource, Secrets, Status,
    Topology, Volume, host_status,
};

/// The driver's name.
const NAME: &str = "guarded.volplane.io";

/// The topology key of a zone.
const ZONE: &str = "topology.guarded.volplane.io/zone";

struct Guarded {
    storage: PathBuf,
    password: String,
    /// DeleteVolume leaves `ID.trash` behind (a planted leak).
    keep_on_delete: bool,
    /// A call without a password is served with the last one seen (a
    /// planted bug); `None`: every call needs its own.
    sticky: Option<Mutex<Option<String>>>,
    /// This node's zone and the other one the storage makes volumes in
    /// (`None`: no topology).
    zones: Option<(String, Option<String>)>,
}

impl Guarded {
    /// UNAUTHENTICATED unless `secrets` carry the password.
    fn check(&self, call: &str, secrets: &Secrets) -> Result<(), Status> {
        let mut given = secrets.0.get("password").cloned();
        if let Some(last) = &self.sticky {
            let mut last = last.lock().expect("the last password");
            match &given {
                Some(p) => *last = Some(p.clone()),
                None => given = last.clone(),
            }
        }
        match &given {
            Some(p) if *p == self.password => Ok(()),
            Some(_) => Err(Status::new(
                Code::Unauthenticated,
                format!("{call}: the password in the secrets is wrong"),
            )),
            None => Err(Status::new(
                Code::Unauthenticated,
                format!("{call}: no password in the secrets"),
            )),
        }
    }
}

impl Guarded {
    /// The zone a create's requirement asks for, among the storage's:
    /// the first preferred one that is requisite, else the first requisite.
    fn zone_for(&self, plan: &CreatePlan) -> Result<Option<String>, Status> {
        let Some((here, other)) = &self.zones else {
            return Ok(None);
        };
        let ours = |z: &str| z == here || other.as_deref() == Some(z);
        let Some(req) = plan
            .accessibility
            .as_ref()
            .filter(|r| !r.requisite.is_empty())
        else {
            return Ok(Some(here.clone()));
        };
        let zone_of = |t: &Topology| t.get(ZONE).map(str::to_string);
        let requisite: Vec<String> = req.requisite.iter().filter_map(zone_of).collect();
        let preferred = req.preferred.iter().filter_map(zone_of);
        match preferred
            .chain(requisite.clone())
            .find(|z| ours(z) && requisite.contains(z))
        {
            Some(z) => Ok(Some(z)),
            None => Err(Status::new(
                Code::ResourceExhausted,
                format!(
                    "the storage makes volumes in zones {here:?} and {other:?}, which no requisite topology allows"
                ),
            )),
        }
    }
}

impl Backend for Guarded {
    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        self.check("CreateVolume", &plan.secrets)?;
        let zone = self.zone_for(plan)?;
        let id = match &zone {
            Some(z) => format!("guarded-{z}-{:016x}", fnv(&plan.name)),
            None => format!("guarded-{:016x}", fnv(&plan.name)),
        };
        let path = self.storage.join(&id);
        host.run(move |h| h.create_dir(&path).map(|_| ()))
            .await
            .map_err(|e| host_status(&format!("create volume {}", plan.name), e))?;
        if let (Some(z), Some((here, _))) = (&zone, &self.zones)
            && z != here
        {
            eprintln!("guarded-driver: volume {id} made in zone {z}");
        }
        Ok(Volume {
            volume_id: id,
            capacity_bytes: plan.suggested_bytes,
            volume_context: Attributes::new(),
            accessible_topology: zone
                .into_iter()
                .map(|z| [(ZONE.to_string(), z)].into_iter().collect())
                .collect(),
            content_source: None,
        })
    }

    async fn delete_volume(
        &self,
        host: &NodeHost,
        v: &Volume,
        secrets: &Secrets,
    ) -> Result<(), Status> {
        self.check("DeleteVolume", secrets)?;
        let path = self.storage.join(&v.volume_id);
        let trash =
            (self.keep_on_delete).then(|| self.storage.join(format!("{}.trash", v.volume_id)));
        host.run(move |h| {
            if let Some(trash) = trash {
                h.create_dir(&trash)?;
            }
            h.remove_tree(&path)
        })
        .await
        .map_err(|e| host_status(&format!("delete volume {}", v.volume_id), e))
    }

    async fn node_source(
        &self,
        _host: &NodeHost,
        volume_id: &str,
        _publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> Result<NodeSource, Status> {
        let path = self.storage.join(volume_id);
        // One that is gone is NOT_FOUND, wherever it was.
        if let Some((here, Some(other))) = &self.zones
            && volume_id.starts_with(&format!("guarded-{other}-"))
            && path.symlink_metadata().is_ok()
        {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!("volume {volume_id} is in zone {other:?}; this node is in zone {here:?}"),
            ));
        }
        Ok(NodeSource::Directory(path))
    }
}

/// FNV-1a: the same name, the same id.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn main() -> Result<(), volplane::Error> {
    volplane::init_logging("info");
    let var =
        |name: &str| std::env::var(name).map_err(|_| volplane::Error::Setup(format!("set {name}")));
    let storage = PathBuf::from(var("GUARDED_STORAGE")?);
    let password = var("GUARDED_PASSWORD")?;
    let zone = std::env::var("GUARDED_ZONE").ok().filter(|z| !z.is_empty());
    let other = std::env::var("GUARDED_OTHER_ZONE")
        .ok()
        .filter(|z| !z.is_empty());
    let mut driver = Driver::new(
        NAME,
        Guarded {
            storage: storage.clone(),
            password,
            keep_on_delete: std::env::var("GUARDED_KEEP_ON_DELETE").is_ok_and(|v| v == "1"),
            sticky: std::env::var("GUARDED_STICKY_CREDENTIALS")
                .is_ok_and(|v| v == "1")
                .then(|| Mutex::new(None)),
            zones: zone.clone().map(|z| (z, other)),
        },
    );
    if let Some(z) = &zone {
        driver = driver.topology(ZONE, z);
    }
    driver
        .flags(&Flags::from_env()?)
        .storage_dir(storage)
        .serve()
}
