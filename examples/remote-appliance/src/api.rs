//! The appliance's HTTP JSON API, as both sides see it.
//!
//! | request | answer |
//! |---|---|
//! | `POST /v1/volumes` `{name, bytes}` | 201 a new [`VolumeInfo`], 200 the one of that name, 409 that name with less room |
//! | `GET /v1/volumes/{id}` | 200 [`VolumeInfo`], 404 |
//! | `GET /v1/volumes?start={id}&limit={n}` | 200 [`Page`] in id order (`start`: the id a page starts at), 400 a start that is no id |
//! | `POST /v1/volumes/{id}/expand` `{bytes}` | 200 [`VolumeInfo`], 404 |
//! | `DELETE /v1/volumes/{id}` | 204, 404, 409 while a node has it attached |
//! | `POST /v1/faults` `{slow_next, slow_ms, short_expand}` | 200: the next changes wait, expansions grow nothing (fault injection, for tests) |
//! | `GET /v1/stats` | 200 [`Stats`] (no token needed) |
//!
//! Every request but the last carries `Authorization: Bearer <token>`
//! (401 without), and every change `X-Incarnation: <n>`, the driver
//! process's incarnation: the appliance refuses a change from an
//! incarnation older than the newest it has seen (409, `fenced`), so a
//! request of a killed driver process that lands late cannot act after
//! its successor. 503 is the appliance being busy: try again.

use serde::{Deserialize, Serialize};

/// A volume on the appliance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeInfo {
    /// Its id: `ra-` and ten digits.
    pub id: String,
    /// The name it was created under.
    pub name: String,
    /// Its size.
    pub bytes: u64,
}

/// `POST /v1/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Create {
    /// The name (CreateVolume's): the same name is the same volume.
    pub name: String,
    /// The size.
    pub bytes: u64,
}

/// `POST /v1/volumes/{id}/expand`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expand {
    /// The new size, at least.
    pub bytes: u64,
}

/// A page of volumes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Page {
    /// The volumes, in id order.
    pub volumes: Vec<VolumeInfo>,
    /// The id the next page starts at (empty: this was the last).
    pub next: String,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Problem {
    /// For a person.
    pub error: String,
}

/// `POST /v1/faults`: fault injection.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Faults {
    /// How many of the next changes wait.
    pub slow_next: u64,
    /// How long each waits, in milliseconds.
    pub slow_ms: u64,
    /// Expansions answer without growing anything (a broken appliance).
    #[serde(default)]
    pub short_expand: bool,
}

/// `GET /v1/stats`: what the appliance has been asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests, in all (but for these stats).
    pub requests: u64,
    /// Requests refused for a missing or wrong token.
    pub unauthorized: u64,
    /// Changes refused as from an older incarnation.
    pub fenced: u64,
    /// Requests answered 503 on purpose.
    pub busy: u64,
    /// The newest incarnation seen.
    pub incarnation: u64,
}

/// True for an id of the appliance's form (`ra-` and ten digits): nothing
/// else names a volume, or a file.
pub fn is_volume_id(id: &str) -> bool {
    id.strip_prefix("ra-")
        .is_some_and(|d| d.len() == 10 && d.bytes().all(|b| b.is_ascii_digit()))
}
