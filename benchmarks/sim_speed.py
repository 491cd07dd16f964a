"""How fast the simulator runs: nodes x simulated hours per wall-clock second.

Scales the bundled demo cluster (services and batch arrivals grow with the node count) and
times each policy separately, since only `katalyst` runs the agents:

    python benchmarks/sim_speed.py                       # 10, 30 and 100 nodes, 6 h each
    python benchmarks/sim_speed.py --nodes 100 --hours 24
    python benchmarks/sim_speed.py --scenario examples/scenarios/cluster-100.yaml --hours 24

The last line is `100-node day: <seconds> s (all policies)` when 100 nodes x 24 h was run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pykatalyst.cli.sim import demo_scenario_path
from pykatalyst.sim.runner import PolicySim
from pykatalyst.sim.scenario import Scenario, load_scenario
from pykatalyst.sim.workload import build_workload


def scaled(base: Scenario, nodes: int, hours: float) -> Scenario:
    per_node = nodes / sum(g.count for g in base.nodes)
    groups = [g.model_copy(update={"count": max(1, round(g.count * per_node))}) for g in base.nodes]
    services = [
        s.model_copy(update={"replicas": max(1, round(s.replicas * per_node))})
        for s in base.services
    ]
    batch = base.batch
    if batch is not None:
        batch = batch.model_copy(
            update={
                "arrival": batch.arrival.model_copy(
                    update={"rate_per_hour": batch.arrival.rate_per_hour * per_node}
                ),
                "max_pending": max(5, round(batch.max_pending * per_node)),
            }
        )
    return base.model_copy(
        update={
            "name": f"{base.name}-{nodes}",
            "nodes": groups,
            "services": services,
            "batch": batch,
            "duration": hours * 3600.0,
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="*", default=[10, 30, 100])
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--scenario", type=Path, help="time this scenario as it is (no scaling)")
    args = ap.parse_args()
    base = load_scenario(args.scenario or demo_scenario_path())
    if args.scenario is not None:
        args.nodes = [sum(g.count for g in base.nodes)]
    print(f"step {base.step:g} s; katalyst agent period {base.policies[-1].agent.period:g} s")
    print(
        f"{'nodes':>5} {'policy':<18} {'pods':>6} {'wall s':>8} {'node-h/s':>9} {'reconciles':>10}"
    )
    day_total = None
    for n in args.nodes:
        sc = (
            base.model_copy(update={"duration": args.hours * 3600.0})
            if args.scenario is not None
            else scaled(base, n, args.hours)
        )
        wl = build_workload(sc)
        total = 0.0
        for policy in sc.policies:
            sim = PolicySim(sc, policy, wl)
            t0 = time.perf_counter()
            run = sim.run()
            wall = time.perf_counter() - t0
            total += wall
            pods = max(run.series.batch_running) + sum(s.replicas for s in sc.services)
            rate = n * args.hours / wall
            print(
                f"{n:>5} {policy.name:<18} {pods:>6} {wall:>8.1f} {rate:>9.1f} "
                f"{run.tally.agent_reconciles:>10}"
            )
        print(f"{n:>5} {'all policies':<18} {'':>6} {total:>8.1f} {n * args.hours / total:>9.1f}")
        if n == 100 and args.hours >= 24:
            day_total = total
    if day_total is not None:
        print(f"100-node day: {day_total:.1f} s (all policies)")


if __name__ == "__main__":
    main()
