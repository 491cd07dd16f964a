"""The simulator's latency model next to what `benchmarks/isolation_real.py` measured.

For each measured mode (nginx alone, then beside a stress-ng antagonist with the kubelet's
settings or under the agent) this feeds the same utilisation into the simulator's own
functions (`sim.physics.share_cpu` and `latency_p99`, with the model's constants) and
prints the predicted p99 / solo next to the measured one:

- cpus: the machine's; the service's p99 alone (`solo`) is the model's `L0`; its burst is
  `cpu_burst_fraction` (the scenario default, 0.2) of it;
- the service's cores: the pods' busy share of `solo` x cpus; the antagonist's: what the
  pods kept busy beyond that in the mode;
- `-kubelet` modes: the antagonist is a best-effort pod at the kubelet's 2 cpu shares
  beside the service's `--service-shares`; `-agent` modes: it runs under SCHED_IDLE;
- no hyperthread siblings (`--ht`, this machine's vCPUs have none); the antagonist's cache
  pressure `--cache-pressure` per kind (stress-ng's cpu workers stay in private caches,
  its vm workers stream through memory).

Only the cpu and memory antagonists are compared: the model has no terms for disk or
network contention.

    sudo .venv/bin/python benchmarks/isolation_real.py --json /tmp/iso.json
    .venv/bin/python benchmarks/calibrate_sim.py /tmp/iso.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pykatalyst.sim.physics import (
    MODEL_CONSTANTS,
    ModelConstants,
    latency_p99,
    share_cpu,
)

BURST_FRACTION = 0.2  # the scenario default cpu_burst_fraction
BESTEFFORT_SHARES = 2.0  # the kubelet's cpu.shares for a best-effort pod
PRESSURE = {"cpu": 0.0, "vm": 1.0}


@dataclass(frozen=True, slots=True)
class Comparison:
    mode: str
    measured: float  # p99 / solo
    model: float
    service_cores: float
    batch_cores: float


def model_ratio(
    cpus: int,
    solo_p99: float,
    service: float,
    batch: float,
    *,
    idle: bool,
    service_shares: float,
    pressure: float,
    ht: float,
    k: ModelConstants,
) -> float:
    """The model's p99 / solo for a service using `service` cores beside an antagonist that
    wants every cpu and gets `batch` of them, as the simulator's runner computes it."""
    domain = np.zeros(2, dtype=np.int64)
    demand = np.array([service, batch])
    granted = share_cpu(
        domain,
        np.array([float(cpus)]),
        demand,
        np.array([float(cpus), float(cpus)]),
        np.array([service_shares, BESTEFFORT_SHARES]),
        np.array([False, idle]),
    )
    used_batch = float(granted[1])
    light = not idle and k.light_weight_ratio * service_shares >= BESTEFFORT_SHARES
    queued_batch = 0.0 if idle or light else used_batch
    normal = float(granted[0]) + queued_batch
    rho = normal / cpus
    p99 = latency_p99(
        np.array([solo_p99]),
        np.array([solo_p99 * BURST_FRACTION]),
        np.array([cpus], dtype=np.int64),
        np.array([rho]),
        np.array([queued_batch / normal if normal > 0 else 0.0]),
        np.array([used_batch / cpus if idle else 0.0]),
        np.array([ht]),
        np.array([used_batch / cpus * pressure]),
        np.array([False]),
        np.array([np.inf]),
        k,
        light_busy=np.array([used_batch / cpus if light else 0.0]),
    )
    return float(p99[0]) / solo_p99


def compare(
    data: dict[str, Any], service_shares: float, ht: float, k: ModelConstants
) -> list[Comparison]:
    cpus = int(data["cpus"])
    modes = data["modes"]
    solo = modes["solo"]
    service = solo["pods_busy"] * cpus
    out = []
    for mode, m in modes.items():
        kind, _, how = mode.partition("-")
        if kind not in PRESSURE or how not in ("kubelet", "agent"):
            continue
        batch = max(m["pods_busy"] * cpus - service, 0.0)
        ratio = model_ratio(
            cpus,
            solo["p99_ms"],
            service,
            batch,
            idle=how == "agent",
            service_shares=service_shares,
            pressure=PRESSURE[kind],
            ht=ht,
            k=k,
        )
        out.append(Comparison(mode, m["p99_ms"] / solo["p99_ms"], ratio, service, batch))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="isolation_real.py --json output")
    ap.add_argument("--service-shares", type=float, default=1024.0)
    ap.add_argument("--ht", type=float, default=0.0, help="sibling batch busy share")
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    solo = data["modes"]["solo"]
    print(
        f"cpus {data['cpus']}  solo p99 {solo['p99_ms']:.2f} ms  service busy "
        f"{solo['pods_busy']:.2f}  background before the runs {data['background']:.2f}"
    )
    print(f"{'mode':<12} {'svc_cores':>9} {'batch_cores':>11} {'measured':>8} {'model':>7}")
    for c in compare(data, args.service_shares, args.ht, MODEL_CONSTANTS):
        print(
            f"{c.mode:<12} {c.service_cores:>9.2f} {c.batch_cores:>11.2f} "
            f"{c.measured:>8.2f} {c.model:>7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
