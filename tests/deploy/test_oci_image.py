"""scripts/oci_image.py --rootfs: a root filesystem becomes one reproducible image layer,
the form scripts/image.sh writes pykatalyst's image in."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "oci_image.py"


def _tree(root: Path, mtime: int) -> None:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3.11").write_bytes(b"\x7fELF...")
    (root / "usr/bin/python3.11").chmod(0o755)
    (root / "usr/bin/python3").symlink_to("python3.11")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text("root:x:0:0::/:/nologin\n")
    os.link(root / "etc/passwd", root / "etc/passwd-")
    for p in root.rglob("*"):
        os.utime(p, (mtime, mtime), follow_symlinks=False)


def _build(rootfs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(SCRIPT), "--name", "pykatalyst:t", "--out", str(out)]
    args += ["--rootfs", str(rootfs), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def _layer(archive: Path) -> tuple[JSON, list[tarfile.TarInfo]]:
    import gzip

    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            f = tar.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
            assert f is not None
            return f.read()

        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index = json.load(index_file)
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        raw = gzip.decompress(blob(manifest["layers"][0]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(raw)) as layer:
        return config, layer.getmembers()


JSON = dict[str, object]


def test_the_same_tree_gives_the_same_bytes_whatever_its_times(tmp_path: Path) -> None:
    for i, mtime in enumerate((1_000_000, 1_700_000_000)):
        _tree(tmp_path / f"t{i}", mtime)
        assert _build(tmp_path / f"t{i}", tmp_path / f"{i}.tar").returncode == 0
    assert (tmp_path / "0.tar").read_bytes() == (tmp_path / "1.tar").read_bytes()


def test_the_layer_keeps_links_modes_and_order_and_the_config(tmp_path: Path) -> None:
    _tree(tmp_path / "t", 5)
    done = _build(
        tmp_path / "t",
        tmp_path / "i.tar",
        "--layout",
        str(tmp_path / "layout"),
        "--entrypoint",
        "/usr/local/bin/katalyst",
        "--user",
        "65532:65532",
        "--env",
        "PYTHONUNBUFFERED=1",
        "--cmd",
        "--help",
    )
    assert done.returncode == 0, done.stderr
    config, members = _layer(tmp_path / "i.tar")
    runtime = config["config"]
    assert runtime == {
        "Entrypoint": ["/usr/local/bin/katalyst"],
        "Cmd": ["--help"],
        "User": "65532:65532",
        "Env": ["PYTHONUNBUFFERED=1"],
        "WorkingDir": "/",
    }
    by = {m.name: m for m in members}
    assert [m.name for m in members] == sorted(by, key=lambda n: n.split("/"))
    assert by["bin"].issym() and by["bin"].linkname == "usr/bin"
    assert by["usr/bin/python3"].linkname == "python3.11"
    assert by["usr/bin/python3.11"].mode == 0o755
    links = [by["etc/passwd"], by["etc/passwd-"]]
    assert sum(m.islnk() for m in links) == 1  # one copy of the data, one hard link
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in members)
    assert (tmp_path / "layout/index.json").is_file()
    assert (tmp_path / "layout/oci-layout").read_text() == '{"imageLayoutVersion":"1.0.0"}'


def test_bad_arguments_are_refused_naming_the_option(tmp_path: Path) -> None:
    done = _build(tmp_path / "absent", tmp_path / "i.tar")
    assert done.returncode == 2 and "--rootfs" in done.stderr
    _tree(tmp_path / "t", 5)
    done = _build(tmp_path / "t", tmp_path / "i.tar", "--env", "NOEQUALS")
    assert done.returncode == 2 and "--env" in done.stderr
    assert not (tmp_path / "i.tar").exists()
