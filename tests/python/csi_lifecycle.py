"""The CSI volume lifecycle through grpc C-core (Python's grpcio).

grpcio sends the unix socket path as the HTTP/2 :authority, which h2 alone
refuses; volplane must serve it as grpc-go drivers do. Run by
tests/tests/grpcio.rs:

    python3 csi_lifecycle.py PROTO_DIR SOCKET KUBELET_DIR NODE_ID

It prints one line per call and exits non-zero on the first failure.
"""

import atexit
import os
import shutil
import sys
import tempfile

import grpc
import grpc_tools
from grpc_tools import protoc


def load_stubs(proto_dir):
    out = tempfile.mkdtemp(prefix="volplane-grpcio-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", "-I", proto_dir, "-I", include,
                      "--python_out", out, "--grpc_python_out", out, "csi.proto"])
    if rc != 0:
        sys.exit("protoc failed on csi.proto")
    sys.path.insert(0, out)
    import csi_pb2
    import csi_pb2_grpc
    return csi_pb2, csi_pb2_grpc


def main():
    proto_dir, socket, kubelet, node = sys.argv[1:5]
    pb, rpc = load_stubs(proto_dir)
    channel = grpc.insecure_channel("unix://" + socket)
    identity = rpc.IdentityStub(channel)
    controller = rpc.ControllerStub(channel)
    nodes = rpc.NodeStub(channel)

    def call(name, fn, req):
        resp = fn(req, timeout=30)
        print("ok", name, flush=True)
        return resp

    info = call("GetPluginInfo", identity.GetPluginInfo, pb.GetPluginInfoRequest())
    assert info.name == "volplane.csi.io", info
    call("Probe", identity.Probe, pb.ProbeRequest())
    cap = pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))
    vol = call("CreateVolume", controller.CreateVolume, pb.CreateVolumeRequest(
        name="pvc-grpcio", capacity_range=pb.CapacityRange(required_bytes=32 << 20),
        volume_capabilities=[cap], parameters={"kind": "block"})).volume
    pub = call("ControllerPublishVolume", controller.ControllerPublishVolume,
               pb.ControllerPublishVolumeRequest(volume_id=vol.volume_id, node_id=node,
                                                 volume_capability=cap,
                                                 volume_context=vol.volume_context))
    staging = os.path.join(kubelet, "plugins/kubernetes.io/csi/volplane.csi.io/grpcio/globalmount")
    os.makedirs(staging, exist_ok=True)
    call("NodeStageVolume", nodes.NodeStageVolume, pb.NodeStageVolumeRequest(
        volume_id=vol.volume_id, publish_context=pub.publish_context,
        staging_target_path=staging, volume_capability=cap,
        volume_context=vol.volume_context))
    pod = os.path.join(kubelet, "pods/grpcio/volumes/kubernetes.io~csi/pvc-grpcio")
    os.makedirs(pod, exist_ok=True)
    target = os.path.join(pod, "mount")
    call("NodePublishVolume", nodes.NodePublishVolume, pb.NodePublishVolumeRequest(
        volume_id=vol.volume_id, publish_context=pub.publish_context,
        staging_target_path=staging, target_path=target, volume_capability=cap,
        volume_context=vol.volume_context))
    with open(os.path.join(target, "hello"), "w") as f:
        f.write("from grpcio\n")
    stats = call("NodeGetVolumeStats", nodes.NodeGetVolumeStats,
                 pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path=target))
    assert stats.usage and stats.usage[0].total > 0, stats
    call("NodeUnpublishVolume", nodes.NodeUnpublishVolume, pb.NodeUnpublishVolumeRequest(
        volume_id=vol.volume_id, target_path=target))
    call("NodeUnstageVolume", nodes.NodeUnstageVolume, pb.NodeUnstageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=staging))
    call("ControllerUnpublishVolume", controller.ControllerUnpublishVolume,
         pb.ControllerUnpublishVolumeRequest(volume_id=vol.volume_id, node_id=node))
    call("DeleteVolume", controller.DeleteVolume,
         pb.DeleteVolumeRequest(volume_id=vol.volume_id))
    os.rmdir(staging)
    try:
        nodes.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
            volume_id=vol.volume_id, volume_path="some/relative/path"), timeout=30)
        sys.exit("NodeGetVolumeStats of a relative path succeeded")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e
        print("ok NodeGetVolumeStats NOT_FOUND", flush=True)


if __name__ == "__main__":
    main()
