#!/usr/bin/env python3
"""Write an OCI image archive from a static busybox or a root filesystem, with no engine.

    python3 scripts/oci_image.py --name pykatalyst.test/busybox:1 --out busybox.tar \
        [--busybox /bin/busybox] [--cmd /bin/sh -c 'sleep 3600']
    python3 scripts/oci_image.py --name pykatalyst:0.1.0 --out pykatalyst.tar \
        --rootfs DIR [--layout DIR] [--entrypoint katalyst] [--user 65532:65532] \
        [--env PYTHONUNBUFFERED=1] [--cmd --help]

The busybox image has one layer: busybox at /bin/busybox and a link for each applet it
lists (sh, sleep, cat, yes, ...). With --rootfs the one layer is that directory tree
instead: every file, directory, symlink and hard link under it, owned by root, modes kept.
--layout also writes the image as an OCI layout directory.

The archive is an OCI image layout in a tar, the form that ``ctr -n k8s.io images import``
reads; the image name travels in the index's
``io.containerd.image.name`` annotation. The output is byte-for-byte reproducible: every
time stamp is zero and every entry is written in a fixed order.

Standard library only, so that the cluster scripts need nothing from the project's venv.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import platform
import subprocess
import sys
import tarfile
from pathlib import Path

# The image holds the build machine's binaries (Debian's .debs, CPython wheels, busybox), so
# it is of the build machine's architecture, in OCI's (Go's) names.
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _info(name: str, *, kind: bytes = tarfile.REGTYPE, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True)
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})


def layer(busybox: Path) -> bytes:
    """The root filesystem as an uncompressed tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "root"):
            tar.addfile(_info(d, kind=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755))
        data = busybox.read_bytes()
        info = _info("bin/busybox", mode=0o755)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in applets(busybox):
            if name == "busybox":
                continue
            link = _info(f"bin/{name}", kind=tarfile.SYMTYPE, mode=0o777)
            link.linkname = "busybox"
            tar.addfile(link)
        for path, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnobody:x:65534:\n"),
        ):
            raw = text.encode()
            info = _info(path)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def tree_layer(root: Path) -> bytes:
    """A directory tree as an uncompressed tar: entries sorted, owned by root, mtimes zero,
    hard links kept as links, so the same tree always gives the same bytes."""
    buf = io.BytesIO()
    seen: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).parts):
            name = path.relative_to(root).as_posix()
            st = path.lstat()
            mode = st.st_mode & 0o7777
            if path.is_symlink():
                info = _info(name, kind=tarfile.SYMTYPE, mode=0o777)
                info.linkname = str(path.readlink())
                tar.addfile(info)
            elif path.is_dir():
                tar.addfile(_info(name, kind=tarfile.DIRTYPE, mode=mode))
            elif path.is_file():
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in seen:
                    info = _info(name, kind=tarfile.LNKTYPE, mode=mode)
                    info.linkname = seen[key]
                    tar.addfile(info)
                    continue
                seen[key] = name
                info = _info(name, mode=mode)
                info.size = st.st_size
                with path.open("rb") as f:
                    tar.addfile(info, f)
            # sockets, fifos and devices have no place in an image layer
    return buf.getvalue()


def blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def build(name: str, busybox: Path, cmd: list[str]) -> bytes:
    config = {"Env": ["PATH=/bin"], "Cmd": cmd, "WorkingDir": "/"}
    return build_from(name, layer(busybox), config, "busybox-static")


def build_from(name: str, raw: bytes, image_config: dict[str, object], what: str) -> bytes:
    """The OCI archive of one uncompressed layer `raw` with the runtime config given."""
    return _tar(layout_files(name, raw, image_config, what))


def layout_files(
    name: str, raw: bytes, image_config: dict[str, object], what: str
) -> list[tuple[str, bytes]]:
    """The files of an OCI image layout holding one image of one layer."""
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    gz = gzip.compress(raw, compresslevel=6, mtime=0)
    layer_digest, _ = blob(gz)
    config = {
        "architecture": ARCH,
        "os": "linux",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"pykatalyst scripts/oci_image.py ({what})"}],
    }
    config_raw = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest, _ = blob(config_raw)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_raw),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(gz),
            }
        ],
    }
    manifest_raw = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest, _ = blob(manifest_raw)
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_raw),
                "platform": {"architecture": ARCH, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    entries: list[tuple[str, bytes]] = [
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
        ("index.json", json.dumps(index, sort_keys=True).encode()),
    ]
    for digest, data in (
        (layer_digest, gz),
        (config_digest, config_raw),
        (manifest_digest, manifest_raw),
    ):
        entries.append((f"blobs/sha256/{digest.split(':', 1)[1]}", data))
    return entries


def _tar(entries: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_info(d, kind=tarfile.DIRTYPE, mode=0o755))
        for path, data in entries:
            info = _info(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--name", required=True, help="image reference, e.g. pykatalyst.test/busybox:1"
    )
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--busybox", type=Path, default=Path("/bin/busybox"))
    parser.add_argument("--rootfs", type=Path, help="a root filesystem to use instead of busybox")
    parser.add_argument("--layout", type=Path, help="also write an OCI layout directory here")
    parser.add_argument("--entrypoint", action="append", default=[], help="(--rootfs) repeatable")
    parser.add_argument("--user", default="", help="(--rootfs) uid:gid the image runs as")
    parser.add_argument("--env", action="append", default=[], help="(--rootfs) NAME=VALUE")
    parser.add_argument("--cmd", nargs=argparse.REMAINDER, default=["/bin/sh"])
    args = parser.parse_args(argv)
    if args.rootfs is not None:
        return _from_rootfs(parser, args)
    if not args.busybox.is_file():
        parser.error(f"--busybox: {args.busybox} does not exist (apt-get install busybox-static)")
    args.out.write_bytes(build(args.name, args.busybox, args.cmd or ["/bin/sh"]))
    return 0


def _from_rootfs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not args.rootfs.is_dir():
        parser.error(f"--rootfs: {args.rootfs} is not a directory")
    bad = [e for e in args.env if "=" not in e]
    if bad:
        parser.error(f"--env: {bad[0]!r} is not NAME=VALUE")
    config: dict[str, object] = {"Env": args.env, "WorkingDir": "/"}
    if args.entrypoint:
        config["Entrypoint"] = args.entrypoint
    if args.cmd != ["/bin/sh"] or not args.entrypoint:
        config["Cmd"] = args.cmd
    if args.user:
        config["User"] = args.user
    files = layout_files(args.name, tree_layer(args.rootfs), config, "rootfs")
    args.out.write_bytes(_tar(files))
    if args.layout is not None:
        for path, data in files:
            target = args.layout / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
