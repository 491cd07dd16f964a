"""Fixtures shared by the agent's tests on this machine's real kernel."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
