"""benchmarks/gpu_share.py on a tiny synthetic trace: the method runs end to end through
the scheduler's plugins, dumps merge back, and the last line has the promised shape."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_share", ROOT / "benchmarks/gpu_share.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_share"] = mod
    spec.loader.exec_module(mod)
    return mod


def _trace(tmp: Path) -> tuple[Path, Path]:
    nodes = tmp / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,131072,{4 if i % 2 else 2},T4\n" for i in range(6))
        + "cpu-only,32000,131072,0,\n"
    )
    pods = tmp / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,x,y,z"]
    shapes = [(4000, 1, 300), (2000, 1, 700), (8000, 1, 1000), (1000, 0, 0), (6000, 2, 1000)]
    for i in range(40):
        cpu, n, milli = shapes[i % len(shapes)]
        spec = "T4" if i % 7 == 0 and n else ""
        rows.append(f"p{i},{cpu},4096,{n},{milli},{spec},LS,Running,0,0,0")
    pods.write_text("\n".join(rows) + "\n")
    return nodes, pods


def test_the_benchmark_runs_merges_and_ends_with_the_verdict_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _bench()
    nodes, pods = _trace(tmp_path)
    dump = tmp_path / "runs.jsonl"
    args = ["--nodes", str(nodes), "--pods", str(pods), "--seeds", "2"]
    args += ["--policies", "best-fit,katalyst,fgd", "--dump", str(dump)]
    assert bench.main(args) == 0
    first = capsys.readouterr().out.strip().splitlines()
    assert len(dump.read_text().splitlines()) == 6
    assert bench.main(["--nodes", str(nodes), "--pods", str(pods), "--merge", str(dump)]) == 0
    merged = capsys.readouterr().out.strip().splitlines()
    pattern = r"unallocated_vs_best_baseline: [0-9.]+ alloc_ratio: [0-9.]+ best_baseline: \S+"
    assert re.fullmatch(pattern, first[-1]) and merged[-1] == first[-1]
    assert "6 nodes, 18 GPUs" in merged[0]  # three 2-card and three 4-card nodes, not the CPU one
