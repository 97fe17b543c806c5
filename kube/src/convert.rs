//! Between Kubernetes objects (k8s-openapi's types, or the JSON the API
//! server sends) and the core's model. The model has Kubernetes' field
//! names, so the way between them is JSON: what the model knows round-trips,
//! and what it does not know is left out of the model — and, because writes
//! are patches between two model views ([`crate::api`]), never written back.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use volplane_core::model::{Kind, Object};

use crate::resources::api_resource;

/// Why an object did not convert.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConvertError(String);

/// The core's view of an object the API server sent.
pub fn to_core(doc: Value) -> Result<Object, ConvertError> {
    Object::from_json(doc).map_err(ConvertError)
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
    to_core(serde_json::to_value(k).map_err(|e| ConvertError(e.to_string()))?)
}

/// A core object as k8s-openapi's type `K`.
pub fn to_typed<K: DeserializeOwned>(o: &Object) -> Result<K, ConvertError> {
    serde_json::from_value(to_json(o)).map_err(|e| {
        ConvertError(format!(
            "{} does not read as a Kubernetes {}: {e}",
            o.key(),
            o.kind().as_str()
        ))
    })
}

/// The kind a JSON object names, if the model knows it.
pub fn kind_of(doc: &Value) -> Option<Kind> {
    Kind::parse(doc.get("kind")?.as_str()?)
}
