"""Memory of the usage-file reader (`katalyst recommend --usage`), measured with tracemalloc.

Two shapes: many containers with few samples each (the per-container cost), and few
containers with many samples (the per-sample cost). The file is written to a temporary
directory first; only `read_usage_csv` runs under tracemalloc, so the figure is what the
reader itself holds at its peak (Python objects and numpy buffers, both traced).

    python benchmarks/usage_reader_memory.py [--containers 20000] [--samples 200000]

Only the shape of the file matters, not its values; see docs/recommend.md for the figures.

Summary line: `bytes_per_container: <n> bytes_per_sample: <n>`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

from pykatalyst.recommend.usage_csv import read_usage_csv

T0 = 1_700_000_000


def write(path: Path, containers: int, per_container: int, step_s: float = 300) -> int:
    """A usage CSV of `containers` containers with `per_container` samples each, `step_s`
    apart, rows interleaved as an export by time would be; returns the row count."""
    with path.open("w") as f:
        f.write("workload,container,timestamp,cpu,memory\n")
        for i in range(per_container):
            t = T0 + step_s * i
            f.writelines(
                f"w{c},main,{t},{0.1 + (c % 7) / 10:.2f},{100_000_000 + c}\n"
                for c in range(containers)
            )
    return containers * per_container


def measure(path: Path) -> tuple[int, float, int]:
    """(peak bytes, seconds, containers read)."""
    tracemalloc.start()
    started = time.perf_counter()
    data = read_usage_csv(path)
    took = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, took, len(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=20_000, help="shape 1: containers")
    ap.add_argument("--per-container", type=int, default=4, help="shape 1: samples each")
    ap.add_argument("--samples", type=int, default=200_000, help="shape 2: samples in all")
    ap.add_argument("--few", type=int, default=4, help="shape 2: containers")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        many = Path(tmp) / "many.csv"
        rows_many = write(many, args.containers, args.per_container)
        peak_many, s_many, n_many = measure(many)
        deep = Path(tmp) / "deep.csv"
        # all within the 30 days kept, so every sample is held
        per = args.samples // args.few
        rows_deep = write(deep, args.few, per, step_s=min(300.0, 29 * 86400 / per))
        peak_deep, s_deep, _ = measure(deep)
    print(
        f"many containers: {n_many} containers x {args.per_container} samples "
        f"({rows_many} rows): peak {peak_many / 2**20:.1f} MiB in {s_many:.1f} s"
    )
    print(
        f"many samples: {args.few} containers, {rows_deep} samples: "
        f"peak {peak_deep / 2**20:.1f} MiB in {s_deep:.1f} s"
    )
    per_container = peak_many / max(n_many, 1)
    per_sample = peak_deep / max(rows_deep, 1)
    print(f"bytes_per_container: {per_container:.0f} bytes_per_sample: {per_sample:.1f}")


if __name__ == "__main__":
    main()
