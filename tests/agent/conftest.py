"""Fixtures shared by the agent's tests: this machine's real kernel, and a played kubelet."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def loop_device() -> Iterator[tuple[str, str]]:
    """A 48 MiB file-backed loop device, the disk of the real io tests: (its /dev path,
    MAJ:MIN). Skips where no loop device can be attached."""
    if not Path("/dev/loop-control").exists():
        pytest.skip("no /dev/loop-control: loop devices unavailable here")
    with tempfile.NamedTemporaryFile(prefix="pykatalyst-loop-", delete=False) as f:
        f.truncate(48 << 20)
        backing = f.name
    try:
        out = subprocess.run(
            ["losetup", "--find", "--show", backing], capture_output=True, text=True, timeout=60
        )
        if out.returncode != 0:
            pytest.skip(f"losetup cannot attach a loop device: {out.stderr.strip()}")
        dev = out.stdout.strip()
        try:
            rdev = os.stat(dev).st_rdev
            yield dev, f"{os.major(rdev)}:{os.minor(rdev)}"
        finally:
            subprocess.run(["losetup", "--detach", dev], timeout=60, check=False)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(backing)


@pytest.fixture
def kubelet_registry(tmp_path: Path) -> Iterator[tuple[Path, list[Any]]]:
    """The kubelet's Registration service on `<dir>/kubelet.sock`, recording requests."""
    grpc = pytest.importorskip("grpc", reason="grpcio is not installed (pykatalyst[node])")
    from pykatalyst.agent.deviceplugin import proto

    m = proto.messages()
    seen: list[Any] = []

    def register(request: Any, context: Any) -> Any:
        seen.append(request)
        return m["Empty"]()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(
        register,
        request_deserializer=m["RegisterRequest"].FromString,
        response_serializer=m["Empty"].SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(proto.REGISTRATION, {"Register": handler}),)
    )
    server.add_insecure_port(f"unix://{tmp_path / 'kubelet.sock'}")
    server.start()
    yield tmp_path, seen
    server.stop(0)
