//! Which Secret a CSI call gets, from a class's parameters (B2.9): the
//! `csi.storage.k8s.io/<operation>-secret-name` / `-namespace` pairs (and
//! the deprecated `csi<Operation>SecretName` keys), falling back to the
//! default `csi.storage.k8s.io/secret-name` pair, their `${…}` templates
//! resolved against the volume and the claim, and the result checked as
//! the API server would check a Secret's name and namespace.
//!
//! Only references are resolved here; what a Secret holds reaches a
//! machine as an object like any other, and never its logs or events.

use std::collections::BTreeSet;

use crate::model::{PersistentVolumeClaim, SecretReference};

/// One operation's secret parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretParams {
    /// How messages name it ("Provisioner", "NodeStage", …).
    pub name: &'static str,
    /// `csi.storage.k8s.io/<name>`.
    name_key: &'static str,
    /// `csi.storage.k8s.io/<namespace>`.
    namespace_key: &'static str,
    /// The deprecated unprefixed keys, honoured and not stripped (B2.7).
    deprecated: Option<(&'static str, &'static str)>,
    /// Without its own pair, the class's default pair applies (volume
    /// operations; snapshot operations have no default).
    falls_back: bool,
}

const fn params(
    name: &'static str,
    name_key: &'static str,
    namespace_key: &'static str,
    deprecated: Option<(&'static str, &'static str)>,
) -> SecretParams {
    SecretParams {
        name,
        name_key,
        namespace_key,
        deprecated,
        falls_back: true,
    }
}

/// A snapshot operation's pair: no deprecated keys, no default fallback.
const fn snapshot_params(
    name: &'static str,
    name_key: &'static str,
    namespace_key: &'static str,
) -> SecretParams {
    SecretParams {
        falls_back: false,
        ..params(name, name_key, namespace_key, None)
    }
}

/// `csi.storage.k8s.io/secret-name` and `-namespace`: every operation's
/// fallback.
pub const DEFAULT: SecretParams = params(
    "Default",
    "csi.storage.k8s.io/secret-name",
    "csi.storage.k8s.io/secret-namespace",
    None,
);
/// CreateVolume and DeleteVolume.
pub const PROVISIONER: SecretParams = params(
    "Provisioner",
    "csi.storage.k8s.io/provisioner-secret-name",
    "csi.storage.k8s.io/provisioner-secret-namespace",
    Some(("csiProvisionerSecretName", "csiProvisionerSecretNamespace")),
);
/// ControllerPublishVolume and ControllerUnpublishVolume.
pub const CONTROLLER_PUBLISH: SecretParams = params(
    "ControllerPublish",
    "csi.storage.k8s.io/controller-publish-secret-name",
    "csi.storage.k8s.io/controller-publish-secret-namespace",
    Some((
        "csiControllerPublishSecretName",
        "csiControllerPublishSecretNamespace",
    )),
);
/// NodeStageVolume.
pub const NODE_STAGE: SecretParams = params(
    "NodeStage",
    "csi.storage.k8s.io/node-stage-secret-name",
    "csi.storage.k8s.io/node-stage-secret-namespace",
    Some(("csiNodeStageSecretName", "csiNodeStageSecretNamespace")),
);
/// NodePublishVolume.
pub const NODE_PUBLISH: SecretParams = params(
    "NodePublish",
    "csi.storage.k8s.io/node-publish-secret-name",
    "csi.storage.k8s.io/node-publish-secret-namespace",
    Some(("csiNodePublishSecretName", "csiNodePublishSecretNamespace")),
);
/// ControllerExpandVolume.
pub const CONTROLLER_EXPAND: SecretParams = params(
    "ControllerExpand",
    "csi.storage.k8s.io/controller-expand-secret-name",
    "csi.storage.k8s.io/controller-expand-secret-namespace",
    None,
);
/// ControllerModifyVolume (the PV carries it as annotations).
pub const CONTROLLER_MODIFY: SecretParams = params(
    "ControllerModify",
    "csi.storage.k8s.io/controller-modify-secret-name",
    "csi.storage.k8s.io/controller-modify-secret-namespace",
    None,
);
/// NodeExpandVolume.
pub const NODE_EXPAND: SecretParams = params(
    "NodeExpand",
    "csi.storage.k8s.io/node-expand-secret-name",
    "csi.storage.k8s.io/node-expand-secret-namespace",
    None,
);

/// CreateSnapshot and DeleteSnapshot (VolumeSnapshotClass).
pub const SNAPSHOTTER: SecretParams = snapshot_params(
    "Snapshotter",
    "csi.storage.k8s.io/snapshotter-secret-name",
    "csi.storage.k8s.io/snapshotter-secret-namespace",
);
/// ListSnapshots of a pre-provisioned snapshot (VolumeSnapshotClass).
pub const SNAPSHOTTER_LIST: SecretParams = snapshot_params(
    "SnapshotterList",
    "csi.storage.k8s.io/snapshotter-list-secret-name",
    "csi.storage.k8s.io/snapshotter-list-secret-namespace",
);
/// CreateVolumeGroupSnapshot and DeleteVolumeGroupSnapshot
/// (VolumeGroupSnapshotClass).
pub const GROUP_SNAPSHOTTER: SecretParams = snapshot_params(
    "GroupSnapshotter",
    "csi.storage.k8s.io/group-snapshotter-secret-name",
    "csi.storage.k8s.io/group-snapshotter-secret-namespace",
);
/// GetVolumeGroupSnapshot (VolumeGroupSnapshotClass).
pub const GROUP_SNAPSHOTTER_GET: SecretParams = snapshot_params(
    "GroupSnapshotterGet",
    "csi.storage.k8s.io/group-snapshotter-get-secret-name",
    "csi.storage.k8s.io/group-snapshotter-get-secret-namespace",
);

/// The name and namespace templates `p` gives in `parameters`, checked as
/// upstream checks them: each given once, both or neither, neither empty.
fn templates<'a>(
    p: &SecretParams,
    parameters: &'a crate::model::Labels,
) -> Result<Option<(&'a str, &'a str)>, ParamFault> {
    let mut names = Vec::new();
    let mut namespaces = Vec::new();
    let keys = p
        .deprecated
        .into_iter()
        .chain(std::iter::once((p.name_key, p.namespace_key)));
    for (name_key, namespace_key) in keys {
        names.extend(parameters.get(name_key));
        namespaces.extend(parameters.get(namespace_key));
    }
    if names.len() > 1 || namespaces.len() > 1 {
        return Err(ParamFault::BothKeys(p.name));
    }
    match (names.pop(), namespaces.pop()) {
        (None, None) => Ok(None),
        (Some(""), Some(_)) | (Some(_), Some("")) => Err(ParamFault::Empty(p.name)),
        (Some(name), Some(namespace)) => Ok(Some((name, namespace))),
        _ => Err(ParamFault::OnlyOne(p.name)),
    }
}

/// Why an operation's Secret cannot be named or read, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The class's parameters give the Secret's templates wrongly
    /// (`default`: the class's default pair).
    #[error(
        "failed to get {}name and namespace template from params: {fault}",
        if *default { "default " } else { "" }
    )]
    Parameters {
        /// The default pair's, not the operation's own.
        default: bool,
        /// What is wrong with them.
        fault: ParamFault,
    },
    /// A template names tokens the object does not have.
    #[error(
        "error resolving value {template:?}: invalid tokens: [{}]",
        missing.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(" ")
    )]
    Tokens {
        /// The template.
        template: String,
        /// The tokens that did not resolve, sorted.
        missing: Vec<String>,
    },
    /// A template resolved to something that cannot name a Secret (or
    /// its namespace).
    #[error("{}", not_a_name(template, resolved, what))]
    NotAName {
        /// The template.
        template: String,
        /// What it resolved to.
        resolved: String,
        /// `secret` or `namespace`.
        what: &'static str,
    },
    /// The Secret could not be read.
    #[error("error getting secret {name} in namespace {namespace}: {fault}")]
    Read {
        /// The Secret's name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// Why.
        fault: ReadFault,
    },
    /// A PV names a Secret by a name or namespace no Secret can have.
    #[error(
        "persistentvolume {pv} names Secret {name:?} in namespace {namespace:?} in its {field}, which is no valid Secret name and namespace; correct the PV"
    )]
    PvRef {
        /// The PV.
        pv: String,
        /// Its field (`nodeStageSecretRef`, …).
        field: String,
        /// The name it gives.
        name: String,
        /// The namespace it gives.
        namespace: String,
    },
    /// A PV's annotations name a Secret by a name or namespace no Secret
    /// can have.
    #[error(
        "persistentvolume {pv} names Secret {name:?} in namespace {namespace:?} in its {name_key} / {namespace_key} annotations, which is no valid Secret name and namespace; correct the annotations"
    )]
    AnnotationsRef {
        /// The PV.
        pv: String,
        /// The annotation naming the Secret.
        name_key: &'static str,
        /// The annotation naming its namespace.
        namespace_key: &'static str,
        /// The name it gives.
        name: String,
        /// The namespace it gives.
        namespace: String,
    },
}

fn not_a_name(template: &str, resolved: &str, what: &str) -> String {
    if resolved != template {
        format!("{template:?} resolved to {resolved:?} which is not a valid {what} name")
    } else {
        format!("{template:?} is not a valid {what} name")
    }
}

/// What is wrong with a class's secret parameters (the operation's name,
/// "Provisioner", "NodeStage", …, as messages give it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamFault {
    /// Given under both the prefixed and the deprecated keys.
    #[error(
        "{0} secrets specified in parameters with both \"csi\" and \"csi.storage.k8s.io/\" keys"
    )]
    BothKeys(&'static str),
    /// The name or the namespace is empty.
    #[error("{0} secrets specified in parameters but value of either namespace or name is empty")]
    Empty(&'static str),
    /// Only one of name and namespace.
    #[error("either name and namespace for {0} secrets specified, Both must be specified")]
    OnlyOne(&'static str),
}

/// Why a Secret's get gave no credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadFault {
    /// The API server answered with another kind.
    #[error("the API server answered with a {0}")]
    WrongKind(&'static str),
    /// There is no such Secret.
    #[error("secrets {0:?} not found")]
    NotFound(String),
    /// The API server refused or failed.
    #[error("{}", .0.message())]
    Api(crate::api::ApiFailure),
    /// An answer a get does not give.
    #[error("unexpected answer {0}")]
    Unexpected(String),
    /// Its data cannot be a CSI call's secrets.
    #[error("{0}")]
    Data(#[from] crate::model::CredentialsError),
}

/// Expands `$name` and `${name}` in `template` as Go's `os.Expand` does
/// (which upstream uses), looking names up in `lookup`; the names it could
/// not resolve, sorted, when there are any.
pub fn expand(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<String>> {
    let bytes = template.as_bytes();
    let mut out = String::with_capacity(template.len());
    let mut missing = BTreeSet::new();
    let mut plain = 0;
    let mut j = 0;
    while j < bytes.len() {
        if bytes[j] != b'$' || j + 1 == bytes.len() {
            j += 1;
            continue;
        }
        out.push_str(&template[plain..j]);
        let (name, width) = shell_name(&template[j + 1..]);
        match name {
            Some(name) => match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    missing.insert(name.to_string());
                }
            },
            // A `$` followed by no name stays; bad syntax is eaten.
            None if width == 0 => out.push('$'),
            None => {}
        }
        j += width + 1;
        plain = j;
    }
    out.push_str(&template[plain..]);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing.into_iter().collect())
    }
}

fn special(b: u8) -> bool {
    matches!(
        b,
        b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-' | b'0'..=b'9'
    )
}

/// The name after a `$` and how many bytes it takes (`None` with a width:
/// bad syntax, eaten; with none: no name).
fn shell_name(s: &str) -> (Option<&str>, usize) {
    let b = s.as_bytes();
    if b[0] == b'{' {
        if b.len() > 2 && special(b[1]) && b[2] == b'}' {
            return (Some(&s[1..2]), 3);
        }
        return match s[1..].find('}') {
            Some(0) => (None, 2),
            Some(i) => (Some(&s[1..=i]), i + 2),
            None => (None, 1),
        };
    }
    if special(b[0]) {
        return (Some(&s[..1]), 1);
    }
    let n = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    if n == 0 {
        (None, 0)
    } else {
        (Some(&s[..n]), n)
    }
}

/// A DNS-1123 label: what a namespace must be.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: what a Secret's name must be.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(|l| !l.is_empty() && is_dns1123_label(l))
}

/// The Secret a pair of annotations names, when they are a valid Secret
/// name and namespace. Checked before any read: the API server does not
/// validate annotations, and a hand-edited one must not steer the request.
pub fn valid_ref(name: &str, namespace: &str) -> Option<SecretReference> {
    (is_dns1123_subdomain(name) && is_dns1123_label(namespace)).then(|| SecretReference {
        name: name.into(),
        namespace: namespace.into(),
    })
}

/// What `${…}` tokens a secret template may use, and their values.
pub trait Templates {
    /// A token a namespace template may use: values the user who asked
    /// for the object does not choose.
    fn namespace(&self, token: &str) -> Option<String>;
    /// A token a name template may use.
    fn name(&self, token: &str) -> Option<String>;
}

/// What a snapshot (or group snapshot) secret template may name: the
/// content's name, and the snapshot's namespace and (for a name) its name
/// when there is a snapshot (`${volumesnapshotcontent.name}`,
/// `${volumesnapshot.namespace}`, `${volumesnapshot.name}`; with
/// `volumegroupsnapshot…` for a group).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotTokens<'a> {
    /// `volumesnapshot` or `volumegroupsnapshot`.
    pub kind: &'static str,
    /// The content's name.
    pub content: &'a str,
    /// The snapshot's namespace and name, if there is one.
    pub snapshot: Option<(&'a str, &'a str)>,
}

impl Templates for SnapshotTokens<'_> {
    fn namespace(&self, token: &str) -> Option<String> {
        let (kind, field) = token.split_once('.')?;
        match field {
            "name" if kind == format!("{}content", self.kind) => Some(self.content.to_string()),
            "namespace" if kind == self.kind => self.snapshot.map(|(ns, _)| ns.to_string()),
            _ => None,
        }
    }

    fn name(&self, token: &str) -> Option<String> {
        if let Some(v) = self.namespace(token) {
            return Some(v);
        }
        match token.split_once('.')? {
            (kind, "name") if kind == self.kind => self.snapshot.map(|(_, n)| n.to_string()),
            _ => None,
        }
    }
}

/// What a volume's template may name: the volume's name, and the claim's
/// namespace, name and annotations.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    /// `${pv.name}`.
    pub pv_name: &'a str,
    /// `${pvc.namespace}`, `${pvc.name}`, `${pvc.annotations['…']}`, when
    /// there is a claim (a volume deleted after its claim has none).
    pub claim: Option<&'a PersistentVolumeClaim>,
}

impl Templates for Tokens<'_> {
    /// What a namespace template may use: values the claim's user does not
    /// choose.
    fn namespace(&self, token: &str) -> Option<String> {
        match token {
            "pv.name" => Some(self.pv_name.to_string()),
            "pvc.namespace" => self.claim.map(|c| c.metadata.namespace.clone()),
            _ => None,
        }
    }

    fn name(&self, token: &str) -> Option<String> {
        if let Some(v) = self.namespace(token) {
            return Some(v);
        }
        let c = self.claim?;
        if token == "pvc.name" {
            return Some(c.metadata.name.clone());
        }
        let key = token
            .strip_prefix("pvc.annotations['")?
            .strip_suffix("']")?;
        c.metadata.annotations.get(key).map(str::to_owned)
    }
}

fn resolve(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
    valid: fn(&str) -> bool,
    what: &'static str,
) -> Result<String, SecretError> {
    let resolved = expand(template, lookup).map_err(|missing| SecretError::Tokens {
        template: template.to_string(),
        missing,
    })?;
    if valid(&resolved) {
        Ok(resolved)
    } else {
        Err(SecretError::NotAName {
            template: template.to_string(),
            resolved,
            what,
        })
    }
}

/// The Secret `p`'s operation gets under a class with `parameters` (its
/// own pair, else the default pair; `None` when neither is given), with
/// upstream's messages when the parameters are wrong or resolve to
/// something that cannot name a Secret.
pub fn secret_ref(
    p: &SecretParams,
    parameters: &crate::model::Labels,
    tokens: impl Templates,
) -> Result<Option<SecretReference>, SecretError> {
    let own = templates(p, parameters).map_err(|fault| SecretError::Parameters {
        default: false,
        fault,
    })?;
    let pair = match own {
        Some(pair) => pair,
        None if !p.falls_back => return Ok(None),
        None => match templates(&DEFAULT, parameters).map_err(|fault| SecretError::Parameters {
            default: true,
            fault,
        })? {
            Some(pair) => pair,
            None => return Ok(None),
        },
    };
    let (name, namespace) = pair;
    let namespace = resolve(
        namespace,
        |t| tokens.namespace(t),
        is_dns1123_label,
        "namespace",
    )?;
    let name = resolve(name, |t| tokens.name(t), is_dns1123_subdomain, "secret")?;
    Ok(Some(SecretReference { name, namespace }))
}

/// What the API server answered to the get of `secret`, as a CSI call's
/// secrets, or upstream's message (`error getting secret … in namespace
/// …: …`) saying why there are none.
pub fn read(
    secret: &SecretReference,
    result: crate::api::ApiResult,
) -> Result<crate::driver::Secrets, SecretError> {
    use crate::api::ApiResult;
    use crate::model::Object;
    let data = match result {
        ApiResult::Ok(Some(o)) => match &*o {
            Object::Secret(s) => s.credentials().map_err(ReadFault::Data),
            other => Err(ReadFault::WrongKind(other.kind().as_str())),
        },
        ApiResult::NotFound => Err(ReadFault::NotFound(secret.name.clone())),
        ApiResult::Failed(e) => Err(ReadFault::Api(e)),
        other => Err(ReadFault::Unexpected(format!("{other:?}"))),
    };
    data.map(crate::driver::Secrets)
        .map_err(|fault| SecretError::Read {
            name: secret.name.clone(),
            namespace: secret.namespace.clone(),
            fault,
        })
}

/// The Secret the PV `pv`'s `field` (`nodeStageSecretRef`, …) names, when
/// its name and namespace could be a Secret's; otherwise a message saying
/// which field to correct. Checked before any read: the names become part
/// of a request path, and a PV may be written by anyone who can write PVs.
pub fn pv_ref<'a>(
    pv: &str,
    field: &str,
    secret: &'a SecretReference,
) -> Result<&'a SecretReference, SecretError> {
    match valid_ref(&secret.name, &secret.namespace) {
        Some(_) => Ok(secret),
        None => Err(SecretError::PvRef {
            pv: pv.to_string(),
            field: field.to_string(),
            name: secret.name.clone(),
            namespace: secret.namespace.clone(),
        }),
    }
}

/// The get of `secret`.
pub fn get(secret: &SecretReference) -> crate::api::ApiCall {
    let key =
        crate::model::ObjectKey::new(crate::model::Kind::Secret, &secret.namespace, &secret.name);
    crate::api::ApiCall::Get(key)
}

#[cfg(test)]
mod tests;
