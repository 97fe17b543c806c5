//! volplane-kube: the adapter between the core's control-plane machines and
//! a real Kubernetes API server, on kube-rs. Watches become the machines'
//! `Watch` inputs ([`watch`]), their API calls become requests ([`api`]) —
//! updates as patches of only what a machine changed — and their events
//! become Kubernetes events ([`events`]). [`controller`] runs the sidecars'
//! roles (provisioner, attacher, resizer; binder and protection behind
//! flags) on the core's one loop.
//!
//! It runs on any runtime that supplies `volplane_service::drive::Runtime`:
//! kube's client is tokio-bound, so on smol its tasks run inside
//! async-compat's tokio context ([`runtime`]).
//!
//! The library does not choose a Kubernetes version: the binary turns on
//! one of k8s-openapi's version features (`volplane` chooses `latest`).

#![deny(missing_docs)]

pub mod api;
pub mod client;
pub mod config;
pub mod controller;
pub mod convert;
pub mod election;
pub mod events;
#[cfg(feature = "fake-api")]
pub mod fake;
pub mod owner;
pub mod resources;
pub mod role_metrics;
pub mod roles;
pub mod runtime;
pub mod watch;
