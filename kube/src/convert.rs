//! Between Kubernetes objects (k8s-openapi's types, or the JSON the API
//! server sends) and the core's model. The model has Kubernetes' field
//! names, so the way between them is JSON: what the model knows round-trips,
//! and what it does not know is left out of the model — and, because writes
//! are patches between two model views ([`crate::api`]), never written back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use volplane_core::model::{DecodeError, Kind, Object};

use crate::resources::api_resource;

/// Why an object did not convert.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The document is not an object of the model.
    #[error("{0}")]
    ToCore(#[from] DecodeError),
    /// A k8s-openapi value that does not serialize (the serializer's words).
    #[error("{0}")]
    Serialize(String),
    /// The model's object does not read as the Kubernetes type.
    #[error("{key} does not read as a Kubernetes {kind}: {reason}")]
    ToTyped {
        /// The object's `Kind/namespace/name`.
        key: String,
        /// Its kind.
        kind: &'static str,
        /// The decoder's words.
        reason: String,
    },
}

/// The core's view of an object the API server sent.
pub fn to_core(doc: Value) -> Result<Object, ConvertError> {
    Ok(Object::from_json(doc)?)
}

/// The object as the API server takes it: the model's JSON with
/// `apiVersion` and `kind`.
pub fn to_json(o: &Object) -> Value {
    let mut v = o.to_json();
    if let Value::Object(map) = &mut v {
        let r = api_resource(o.kind());
        map.insert("apiVersion".into(), Value::String(r.api_version));
        map.insert("kind".into(), Value::String(r.kind));
    }
    v
}

/// The core's view of a k8s-openapi object.
pub fn from_typed<K: Serialize>(k: &K) -> Result<Object, ConvertError> {
    to_core(serde_json::to_value(k).map_err(|e| ConvertError::Serialize(e.to_string()))?)
}

/// A core object as k8s-openapi's type `K`.
pub fn to_typed<K: DeserializeOwned>(o: &Object) -> Result<K, ConvertError> {
    serde_json::from_value(to_json(o)).map_err(|e| ConvertError::ToTyped {
        key: o.key().to_string(),
        kind: o.kind().as_str(),
        reason: e.to_string(),
    })
}

/// The kind a JSON object names, if the model knows it.
pub fn kind_of(doc: &Value) -> Option<Kind> {
    Kind::parse(doc.get("kind")?.as_str()?)
}
