//! CSI v1.12 and kubelet plugin-registration v1 wire types, generated at build
//! time from `proto/*.proto`; validated conversions between them and
//! volplane-core's types, both ways (server and client); endpoints.

#![allow(missing_debug_implementations)]
#![deny(missing_docs)]

/// CSI (`csi.v1`): every service of spec v1.12.0. Generated code: its
/// documentation is the CSI spec's comments, where the proto has them.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod csi {
    tonic::include_proto!("csi.v1");
    include!(concat!(env!("OUT_DIR"), "/csi_redacted_debug.rs"));
}

/// The kubelet's plugin-registration API (`pluginregistration`, v1).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod registration {
    tonic::include_proto!("pluginregistration");
}

pub mod authority;
pub mod client;
pub mod codec;
pub mod connections;
pub mod convert;
pub mod endpoint;
pub mod limits;
pub mod redact;
pub mod status;
