#!/usr/bin/env python3
"""Packs a root filesystem directory into an image archive that
`ctr images import` takes (docker-archive: manifest.json, one layer).

    mkimage.py ROOTFS OUT.tar NAME:TAG [NAME:TAG ...] [--entrypoint JSON] [--cmd JSON]

Files are stored owned by root, with their modes; nothing is compressed.
"""
import argparse
import hashlib
import io
import json
import os
import tarfile


def layer(rootfs: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(top, name)
                info = tar.gettarinfo(path, arcname=os.path.relpath(path, rootfs))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("rootfs")
    p.add_argument("out")
    p.add_argument("names", nargs="+")
    p.add_argument("--entrypoint", type=json.loads, default=None)
    p.add_argument("--cmd", type=json.loads, default=["/bin/sh"])
    a = p.parse_args()
    data = layer(a.rootfs)
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": a.entrypoint,
            "Cmd": a.cmd,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "tests/e2e/images/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": a.names, "Layers": ["layer.tar"]}]
    with tarfile.open(a.out, "w") as out:
        for name, blob in (
            ("layer.tar", data),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            out.addfile(info, io.BytesIO(blob))


if __name__ == "__main__":
    main()
