"""The numpy histogram against VPA's own Go code (benchmarks/vpa_anchor), when it is built."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pykatalyst.recommend.histogram import CPU_LAYOUT, MEMORY_LAYOUT, build_histogram

ANCHOR = (
    Path(os.environ.get("PYKATALYST_CACHE", Path.home() / ".cache" / "pykatalyst"))
    / "vpa-v1.8.1"
    / "bin"
    / "vpa-anchor"
)

pytestmark = pytest.mark.skipif(
    not ANCHOR.is_file(),
    reason=f"VPA anchor not built ({ANCHOR}); run bash benchmarks/vpa_anchor/build.sh",
)


def test_percentiles_equal_vpas_decaying_histogram() -> None:
    rng = np.random.default_rng(0)
    commands, expected = [], []
    for trial in range(200):
        kind = "cpu" if trial % 2 == 0 else "memory"
        layout = CPU_LAYOUT if kind == "cpu" else MEMORY_LAYOUT
        n = int(rng.integers(1, 150))
        # A third of the values sit exactly on bucket boundaries, where rounding would show.
        values = np.where(
            rng.random(n) < 0.3,
            layout.starts[rng.integers(1, 175, n)],
            rng.lognormal(0 if kind == "cpu" else 20, 2, n),
        )
        weights = rng.random(n) * 2
        times = 1.7e9 + np.sort(rng.random(n)) * 30 * 86400
        half_life = float(rng.choice([3600.0, 86400.0, 7 * 3600.0]))
        p = float(rng.choice([0.5, 0.9, 0.95, 0.99]).item())
        rows = "".join(
            f"{v!r} {w!r} {t!r}\n"
            for v, w, t in zip(values.tolist(), weights.tolist(), times.tolist(), strict=True)
        )
        commands.append(f"H {half_life:g} {p!r} {kind} {n}\n{rows}")
        expected.append(build_histogram(layout, values, weights, times, half_life).percentile(p))
    out = subprocess.run(
        [str(ANCHOR)], input="".join(commands), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("P ")]
    assert got == expected


def test_anchor_recommends_like_vpa_defaults() -> None:
    # Two days of steady 0.5 core / 300 MiB: target = bucket end of p90 x 1.15, and memory at
    # least VPA's 250 MiB pod minimum.
    lines = ["N c"]
    for i in range(2 * 1440):
        lines.append(f"S {1_700_000_000 + 60 * i} 0.5 {300 * 2**20}")
    lines.append(f"Q {1_700_000_000 + 2 * 86400}")
    out = subprocess.run(
        [str(ANCHOR)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60
    )
    fields = out.stdout.split()
    target_cpu, lower_cpu, upper_cpu = (float(x) for x in fields[3:6])
    bucket = int(CPU_LAYOUT.find_buckets(np.array([0.5]))[0])
    # VPA holds cpu in whole millicores: the percentile, then the margin, each truncated.
    millis = int(CPU_LAYOUT.bucket_start(bucket + 1) * 1000)
    assert target_cpu == int(millis * 1.15) / 1000
    assert lower_cpu <= target_cpu <= upper_cpu
