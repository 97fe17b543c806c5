//! An API server played in memory behind kube's `Client` (a tower service,
//! kube's documented way to test without a cluster): create, get, list,
//! watch (with replay from a resourceVersion, and 410 Gone for one older
//! than the compaction point), merge patches with the resourceVersion
//! precondition, the status subresource, delete with finalizers. Every
//! request is logged for the test to assert on.
//!
//! A test knob: compiled only with the non-default `fake-api` feature.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use volplane_core::model::patch::apply_merge_patch;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// The HTTP method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The query string.
    pub query: String,
    /// The body's content type.
    pub content_type: String,
    /// The body.
    pub body: Value,
}

#[derive(Debug, Default)]
struct State {
    /// Object path (`/api/v1/persistentvolumes/pv-1`) → object.
    objects: BTreeMap<String, Value>,
    rv: u64,
    /// (rv, collection path, event) for watch replay.
    events: Vec<(u64, String, Value)>,
    /// A watch from a resourceVersion below this is answered 410 Gone.
    compacted: u64,
    watchers: Vec<(String, mpsc::UnboundedSender<Value>)>,
    log: Vec<Logged>,
    /// Clients whose requests go unanswered (a partitioned replica).
    cut_off: std::collections::BTreeSet<String>,
    /// Requests are not logged (a benchmark's millions).
    unlogged: bool,
}

/// The fake API server.
#[derive(Debug, Clone, Default)]
pub struct FakeApi(Arc<Mutex<State>>);

/// `(collection path, name, status subresource)` of a request path.
fn split(path: &str) -> (String, Option<String>, bool) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // api/v1/... or apis/group/version/...
    let base = if segs[0] == "api" { 2 } else { 3 };
    let mut rest = &segs[base..];
    let mut prefix: Vec<&str> = segs[..base].to_vec();
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        prefix.extend_from_slice(&rest[..2]);
        rest = &rest[2..];
    }
    prefix.push(rest[0]);
    let collection = format!("/{}", prefix.join("/"));
    let name = rest.get(1).map(|s| s.to_string());
    let status = rest.get(2) == Some(&"status");
    (collection, name, status)
}

/// Every namespace's collection matches a cluster-wide path too.
fn in_collection(object_path: &str, collection: &str) -> bool {
    let parent = &object_path[..object_path.rfind('/').unwrap_or(0)];
    if parent == collection {
        return true;
    }
    // /api/v1/pods matches /api/v1/namespaces/x/pods
    let plural = collection.rsplit('/').next().unwrap_or("");
    let base = &collection[..collection.len() - plural.len()];
    parent.starts_with(&format!("{base}namespaces/")) && parent.ends_with(&format!("/{plural}"))
}

fn to_hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(token: &str) -> Option<String> {
    let digits = token.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let bytes = digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

fn status(code: u16, reason: &str, message: &str) -> (StatusCode, Value) {
    (
        StatusCode::from_u16(code).unwrap(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

impl FakeApi {
    /// A kube client talking to this server.
    pub fn client(&self) -> kube::Client {
        self.client_named("")
    }

    /// A client the server knows as `name` (see [`FakeApi::cut_off`]).
    pub fn client_named(&self, name: &str) -> kube::Client {
        let (me, name) = (self.clone(), name.to_string());
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let (me, name) = (me.clone(), name.clone());
            async move {
                if me.0.lock().unwrap().cut_off.contains(&name) {
                    futures::future::pending::<()>().await;
                }
                Ok::<_, Infallible>(me.serve(req).await)
            }
        });
        kube::Client::new(service, "default")
    }

    /// A server that keeps no log of requests (and no watch history beyond
    /// what a watch from a recent version needs), for benchmarks.
    pub fn unlogged() -> FakeApi {
        let api = FakeApi::default();
        api.0.lock().unwrap().unlogged = true;
        api
    }

    /// From now on, requests of the client named `name` are never answered.
    pub fn cut_off(&self, name: &str) {
        self.0.lock().unwrap().cut_off.insert(name.into());
    }

    /// Stores `object` (with apiVersion and kind) as if a user created it.
    pub fn put(&self, path: &str, mut object: Value) -> Value {
        let mut s = self.0.lock().unwrap();
        s.rv += 1;
        let rv = s.rv.to_string();
        object["metadata"]["resourceVersion"] = json!(rv);
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{rv}"));
        }
        let kind = if s.objects.contains_key(path) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.objects.insert(path.into(), object.clone());
        Self::notify(&mut s, path, kind, &object);
        object
    }

    /// Deletes `path` as a user would (`kubectl delete`): marked for
    /// deletion while finalizers hold it, removed otherwise.
    pub fn delete_as_user(&self, path: &str) -> Option<Value> {
        let (code, v) = self.delete(path);
        code.is_success().then_some(v)
    }

    /// Removes `path` with no watch event (one lost while watches were
    /// down: only a relist can tell).
    pub fn remove_silently(&self, path: &str) {
        let mut s = self.0.lock().unwrap();
        s.rv += 1;
        s.objects.remove(path);
    }

    /// The object at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.0.lock().unwrap().objects.get(path).cloned()
    }

    /// How many objects of `collection` (cluster-wide paths match every
    /// namespace's) satisfy `test`.
    pub fn count(&self, collection: &str, test: impl Fn(&Value) -> bool) -> usize {
        let s = self.0.lock().unwrap();
        s.objects
            .iter()
            .filter(|(p, o)| in_collection(p, collection) && test(o))
            .count()
    }

    /// The paths of the objects of `collection`.
    pub fn paths(&self, collection: &str) -> Vec<String> {
        let s = self.0.lock().unwrap();
        s.objects
            .keys()
            .filter(|p| in_collection(p, collection))
            .cloned()
            .collect()
    }

    /// The requests so far.
    pub fn log(&self) -> Vec<Logged> {
        self.0.lock().unwrap().log.clone()
    }

    /// Watches from a resourceVersion at or below `rv` get 410 Gone, and
    /// every open watch ends (as when etcd compacts).
    pub fn compact(&self) {
        let mut s = self.0.lock().unwrap();
        s.compacted = s.rv;
        for (_, tx) in s.watchers.drain(..) {
            let _ = tx.unbounded_send(json!({"type": "ERROR", "object":
                status(410, "Expired", "too old resource version").1}));
        }
    }

    fn notify(s: &mut State, path: &str, kind: &str, object: &Value) {
        let event = json!({"type": kind, "object": object});
        let rv = s.rv;
        let collection = path[..path.rfind('/').unwrap()].to_string();
        s.events.push((rv, collection, event.clone()));
        if s.unlogged && s.events.len() > 200_000 {
            // Older history is compacted away: a watch from before it is Gone.
            s.events.drain(..100_000);
            s.compacted = s.events[0].0 - 1;
        }
        s.watchers
            .retain(|(c, tx)| !in_collection(path, c) || tx.unbounded_send(event.clone()).is_ok());
    }

    async fn serve(&self, req: Request<kube::client::Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        self.answer(parts, &bytes)
    }

    /// Answers one request, its body read (for serving over HTTP).
    pub fn answer(&self, parts: http::request::Parts, bytes: &[u8]) -> Response<Body> {
        let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or("").to_string();
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut state = self.0.lock().unwrap();
        if !state.unlogged {
            state.log.push(Logged {
                method: parts.method.to_string(),
                path: path.clone(),
                query: query.clone(),
                content_type,
                body: body.clone(),
            });
        }
        drop(state);
        let (collection, name, sub_status) = split(&path);
        let object_path = name.as_ref().map(|n| format!("{collection}/{n}"));
        let (code, value) = match (parts.method.as_str(), object_path) {
            ("GET", None) if query.contains("watch=true") => {
                return self.watch(&collection, &query);
            }
            ("GET", None) => self.list(&collection, &query),
            ("GET", Some(p)) => match self.get(&p) {
                Some(o) => (StatusCode::OK, o),
                None => status(404, "NotFound", &format!("{p} not found")),
            },
            ("POST", None) => self.create(&collection, body),
            ("PATCH", Some(p)) => self.patch(&p, &body, sub_status),
            ("DELETE", Some(p)) => self.delete(&p),
            (m, _) => status(405, "MethodNotAllowed", &format!("{m} {path}")),
        };
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(
                http_body_util::Full::new(Bytes::from(value.to_string()))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .unwrap()
    }

    /// A list, a page at a time when `limit` asks. The continue token is
    /// the last object's path in hex: opaque, as the API server's is, and
    /// nothing a client's query encoding changes.
    fn list(&self, collection: &str, query: &str) -> (StatusCode, Value) {
        let param = |name: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        let limit: usize = param("limit")
            .and_then(|l| l.parse().ok())
            .filter(|&l| l > 0)
            .unwrap_or(usize::MAX);
        let after = match param("continue") {
            None => String::new(),
            Some(token) => match from_hex(&token) {
                Some(path) => path,
                None => return status(400, "BadRequest", "invalid continue token"),
            },
        };
        let s = self.0.lock().unwrap();
        let mut items: Vec<(&String, &Value)> = s
            .objects
            .iter()
            .filter(|(p, _)| p.as_str() > after.as_str() && in_collection(p, collection))
            .take(limit.saturating_add(1))
            .collect();
        let more = items.len() > limit;
        items.truncate(limit);
        let mut metadata = json!({"resourceVersion": s.rv.to_string()});
        if more && let Some((last, _)) = items.last() {
            metadata["continue"] = json!(to_hex(last));
        }
        let items: Vec<Value> = items.into_iter().map(|(_, o)| o.clone()).collect();
        (
            StatusCode::OK,
            json!({"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": items}),
        )
    }

    fn watch(&self, collection: &str, query: &str) -> Response<Body> {
        let from: u64 = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("resourceVersion="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let (tx, rx) = mpsc::unbounded::<Value>();
        let mut s = self.0.lock().unwrap();
        if from < s.compacted {
            let _ = tx.unbounded_send(json!({"type": "ERROR", "object":
                status(410, "Expired", "too old resource version").1}));
        } else {
            for (rv, c, e) in &s.events {
                let path = format!(
                    "{c}/{}",
                    e["object"]["metadata"]["name"].as_str().unwrap_or("")
                );
                if *rv > from && in_collection(&path, collection) {
                    let _ = tx.unbounded_send(e.clone());
                }
            }
            s.watchers.push((collection.to_string(), tx));
        }
        let stream =
            rx.map(|v| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(format!("{v}\n")))));
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .unwrap()
    }

    fn create(&self, collection: &str, mut object: Value) -> (StatusCode, Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let path = format!("{collection}/{name}");
        if self.get(&path).is_some() {
            return status(409, "AlreadyExists", &format!("{path} already exists"));
        }
        if object["metadata"].get("resourceVersion").is_some() {
            return status(
                500,
                "InternalError",
                "resourceVersion should not be set on objects to be created",
            );
        }
        object["metadata"]["creationTimestamp"] = json!("2026-11-23T12:00:00Z");
        (StatusCode::CREATED, self.put(&path, object))
    }

    fn patch(&self, path: &str, patch: &Value, sub_status: bool) -> (StatusCode, Value) {
        let Some(current) = self.get(path) else {
            return status(404, "NotFound", &format!("{path} not found"));
        };
        if let Some(rv) = patch["metadata"]["resourceVersion"].as_str()
            && current["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            );
        }
        // A strategic merge patch as volplane sends one: finalizers taken
        // off by value, on the incarnation its `uid` names.
        let mut patch = patch.clone();
        let taken_off = patch["metadata"]
            .as_object_mut()
            .and_then(|m| m.remove("$deleteFromPrimitiveList/finalizers"))
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        if let Some(uid) = patch["metadata"]["uid"].as_str()
            && current["metadata"]["uid"].as_str() != Some(uid)
        {
            return status(
                422,
                "Invalid",
                &format!("metadata.uid: Invalid value: \"{uid}\": field is immutable"),
            );
        }
        let mut next = current.clone();
        apply_merge_patch(&mut next, &patch);
        if let Some(f) = next["metadata"]["finalizers"].as_array_mut() {
            f.retain(|x| !taken_off.contains(x));
            if f.is_empty() {
                next["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("finalizers");
            }
        }
        // The main resource ignores status; the status subresource only
        // takes status.
        if sub_status {
            let st = next["status"].clone();
            next = current.clone();
            next["status"] = st;
        } else {
            next["status"] = current["status"].clone();
            if next["status"].is_null() {
                next.as_object_mut().unwrap().remove("status");
            }
        }
        let finalized = next["metadata"]["deletionTimestamp"].is_string()
            && next["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
        if finalized {
            let mut s = self.0.lock().unwrap();
            s.rv += 1;
            s.objects.remove(path);
            Self::notify(&mut s, path, "DELETED", &next);
            return (StatusCode::OK, next);
        }
        (StatusCode::OK, self.put(path, next))
    }

    fn delete(&self, path: &str) -> (StatusCode, Value) {
        let Some(mut current) = self.get(path) else {
            return status(404, "NotFound", &format!("{path} not found"));
        };
        if current["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            if current["metadata"]["deletionTimestamp"].is_null() {
                current["metadata"]["deletionTimestamp"] = json!("2026-11-23T12:00:01Z");
                current = self.put(path, current);
            }
            return (StatusCode::OK, current);
        }
        let mut s = self.0.lock().unwrap();
        s.rv += 1;
        s.objects.remove(path);
        Self::notify(&mut s, path, "DELETED", &current);
        (StatusCode::OK, current)
    }
}
