//! Hostile input: missing fields, `..` in ids and paths, paths outside
//! --kubelet-dir, oversized fields. Every one is INVALID_ARGUMENT naming the
//! field, and nothing is touched. Runs without root.

mod common;

use std::collections::HashMap;

use common::*;
use volplane_proto::csi;

fn invalid<T: std::fmt::Debug>(r: Result<T, tonic::Status>, field: &str) {
    let e = r.expect_err("hostile request accepted");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(field),
        "message names {field}: {:?}",
        e.message()
    );
}

both_runtimes!(
    hostile_requests_are_invalid_argument_and_touch_nothing,
    hostile_requests_are_invalid_argument_and_touch_nothing_on
);

async fn hostile_requests_are_invalid_argument_and_touch_nothing_on(rt: Runtime) {
    let d = Driver::start(rt);
    let csi = d.client().await;
    let (mut c, mut n) = (csi.controller.clone(), csi.node.clone());
    let outside = d.root().join("outside");
    let kube = d.kubelet();

    // Missing fields.
    invalid(
        c.create_volume(csi::CreateVolumeRequest::default()).await,
        "name",
    );
    invalid(
        c.create_volume(csi::CreateVolumeRequest {
            name: "x".into(),
            ..Default::default()
        })
        .await,
        "volume_capabilities",
    );
    invalid(
        c.create_volume(csi::CreateVolumeRequest {
            name: "x".into(),
            volume_capabilities: vec![csi::VolumeCapability::default()],
            ..Default::default()
        })
        .await,
        "access_mode",
    );
    invalid(
        c.delete_volume(csi::DeleteVolumeRequest::default()).await,
        "volume_id",
    );
    invalid(
        n.node_stage_volume(csi::NodeStageVolumeRequest::default())
            .await,
        "volume_id",
    );
    invalid(
        n.node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: "v".into(),
            ..Default::default()
        })
        .await,
        "staging_target_path",
    );
    invalid(
        n.node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: "v".into(),
            target_path: kube.join("pods/p/mount").display().to_string(),
            ..Default::default()
        })
        .await,
        "volume_capability",
    );

    // `..` in ids and paths.
    invalid(
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: "../../etc".into(),
            ..Default::default()
        })
        .await,
        "volume_id",
    );
    invalid(
        n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: "v".into(),
            target_path: format!("{}/pods/../../outside/mount", kube.display()),
        })
        .await,
        "target_path",
    );

    // Paths outside --kubelet-dir.
    invalid(
        n.node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: "v".into(),
            staging_target_path: outside.join("stage").display().to_string(),
            volume_capability: Some(multi_writer()),
            publish_context: [("device".to_string(), "/dev/loop0".to_string())].into(),
            ..Default::default()
        })
        .await,
        "staging_target_path",
    );
    invalid(
        n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: "v".into(),
            target_path: "/etc/passwd".into(),
        })
        .await,
        "target_path",
    );
    invalid(
        n.node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: "v".into(),
            staging_target_path: kube.join("plugins/x/globalmount").display().to_string(),
            target_path: outside.join("mount").display().to_string(),
            volume_capability: Some(multi_writer()),
            ..Default::default()
        })
        .await,
        "target_path",
    );

    // Oversized fields.
    invalid(
        c.create_volume(csi::CreateVolumeRequest {
            name: "n".repeat(200),
            volume_capabilities: vec![multi_writer()],
            ..Default::default()
        })
        .await,
        "name",
    );
    let big: HashMap<String, String> = (0..100)
        .map(|i| (format!("key-{i}"), "v".repeat(60)))
        .collect();
    invalid(
        c.create_volume(csi::CreateVolumeRequest {
            name: "pvc-big".into(),
            volume_capabilities: vec![multi_writer()],
            parameters: big,
            ..Default::default()
        })
        .await,
        "parameters",
    );
    invalid(
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: "v".repeat(300),
            ..Default::default()
        })
        .await,
        "volume_id",
    );
    invalid(
        c.create_volume(csi::CreateVolumeRequest {
            name: "pvc-neg".into(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: -1,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![multi_writer()],
            ..Default::default()
        })
        .await,
        "required_bytes",
    );
    invalid(
        c.create_volume(csi::CreateVolumeRequest {
            name: "pvc-param".into(),
            volume_capabilities: vec![multi_writer()],
            parameters: [("color".to_string(), "blue".to_string())].into(),
            ..Default::default()
        })
        .await,
        "parameters",
    );

    // Nothing was touched: nothing outside, no volume, no mount.
    assert!(!outside.exists(), "{} was created", outside.display());
    assert_eq!(d.leftovers(), Vec::<String>::new());
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.entries.is_empty(), "{listed:?}");
}

both_runtimes!(
    a_stale_socket_is_replaced_and_identity_answers,
    a_stale_socket_is_replaced_and_identity_answers_on
);

async fn a_stale_socket_is_replaced_and_identity_answers_on(rt: Runtime) {
    let mut d = Driver::start(rt);
    d.kill();
    assert!(
        d.root().join("csi.sock").exists(),
        "a killed driver leaves its socket"
    );
    d.spawn(None);
    let mut csi = d.client().await;
    let info = csi
        .identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    let probe = csi
        .identity
        .probe(csi::ProbeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(probe.ready, Some(true));
    let info = csi
        .node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, NODE);
    assert_eq!(
        info.accessible_topology.unwrap().segments["topology.volplane.io/zone"],
        "local"
    );
    assert!(d.stop().success());
    assert!(!d.root().join("csi.sock").exists());
}

/// The smol build starts no tokio runtime: no tokio worker thread exists in
/// a `volplane serve --runtime smol` process while it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smol_driver_runs_no_tokio_runtime() {
    let mut d = Driver::start(Runtime::Smol);
    let mut csi = d.client().await;
    csi.identity.probe(csi::ProbeRequest {}).await.unwrap();
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", d.pid()))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    assert!(
        threads.iter().any(|t| t.starts_with("volplane-smol")),
        "{threads:?}"
    );
    assert!(
        !threads.iter().any(|t| t.starts_with("tokio")),
        "a tokio thread runs: {threads:?}"
    );
    assert!(d.stop().success());
}

/// Sends `body` as the bytes of one message to `path`: what a broken or
/// hostile client puts on the wire.
mod raw {
    use prost::bytes::BufMut;
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Debug, Default)]
    pub struct Raw;

    #[derive(Debug, Default)]
    pub struct Bytes;

    impl Encoder for Bytes {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
            buf.put_slice(&item);
            Ok(())
        }
    }

    impl Decoder for Bytes {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
            use prost::bytes::Buf;
            let mut out = vec![0; buf.remaining()];
            buf.copy_to_slice(&mut out);
            Ok(Some(out))
        }
    }

    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Bytes;
        type Decoder = Bytes;
        fn encoder(&mut self) -> Bytes {
            Bytes
        }
        fn decoder(&mut self) -> Bytes {
            Bytes
        }
    }
}

both_runtimes!(
    a_malformed_message_is_invalid_argument,
    a_malformed_message_is_invalid_argument_on
);

/// Issue 29: bytes that are not a valid protobuf message (a string field
/// that is not UTF-8, a field cut short) are INVALID_ARGUMENT naming the
/// message, not INTERNAL.
async fn a_malformed_message_is_invalid_argument_on(rt: Runtime) {
    let d = Driver::start(rt);
    let channel = volplane_tokio::connect(&d.endpoint).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    for (what, body) in [
        ("a name that is not UTF-8", vec![0x0a, 0x02, 0xff, 0xfe]),
        ("a field cut short", vec![0x0a, 0x10, b'x']),
    ] {
        grpc.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_static("/csi.v1.Controller/CreateVolume");
        let e = grpc
            .unary(tonic::Request::new(body), path, raw::Raw)
            .await
            .expect_err(what);
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{what}: {e:?}");
        assert!(
            e.message()
                .contains("CreateVolumeRequest is not valid protobuf"),
            "{what}: {:?}",
            e.message()
        );
    }
}

both_runtimes!(
    an_oversized_request_and_an_unknown_method_are_named,
    an_oversized_request_and_an_unknown_method_are_named_on
);

/// Issue 29: a request larger than the 4 MiB limit is RESOURCE_EXHAUSTED
/// (gRPC's convention) naming both sizes; a method the driver does not
/// have is UNIMPLEMENTED naming it.
async fn an_oversized_request_and_an_unknown_method_are_named_on(rt: Runtime) {
    let d = Driver::start(rt);
    let channel = volplane_tokio::connect(&d.endpoint).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/csi.v1.Controller/CreateVolume");
    let big = vec![0u8; 5 * 1024 * 1024];
    let e = grpc
        .unary(tonic::Request::new(big), path, raw::Raw)
        .await
        .expect_err("a 5 MiB request");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert_eq!(
        e.message(),
        "the request to /csi.v1.Controller/CreateVolume is 5242880 bytes, over the limit of \
         4194304 bytes: send a smaller request"
    );
    for method in ["/csi.v1.Controller/Nope", "/csi.v9.Other/Call"] {
        grpc.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_maybe_shared(method).unwrap();
        let e = grpc
            .unary(tonic::Request::new(vec![]), path, raw::Raw)
            .await
            .expect_err(method);
        assert_eq!(e.code(), tonic::Code::Unimplemented, "{e:?}");
        assert_eq!(
            e.message(),
            format!("unknown method {method}: this server does not serve it")
        );
    }
    // The connection still serves.
    let mut csi = d.client().await;
    csi.identity
        .probe(volplane_proto::csi::ProbeRequest::default())
        .await
        .unwrap();
}
