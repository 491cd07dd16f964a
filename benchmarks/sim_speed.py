"""How fast the simulator runs: nodes x simulated hours per wall-clock second.

Scales the bundled demo cluster (services and batch arrivals grow with the node count) and
times each policy separately, since only `katalyst` runs the agents:

    python benchmarks/sim_speed.py                       # 10, 30 and 100 nodes, 6 h each
    python benchmarks/sim_speed.py --nodes 100 --hours 24
    python benchmarks/sim_speed.py --scenario examples/scenarios/cluster-100.yaml --hours 24
    python benchmarks/sim_speed.py --nodes 1000 --hours 24 --policies katalyst
    python benchmarks/sim_speed.py --nodes 100 --hours 24 --workers 1   # one after another

The policies run side by side in processes as `katalyst sim` runs them (`--workers`, by
default one per cpu for runs of 100 node-hours or more). Each policy's line gives the wall
and CPU seconds of its own run; `together` gives the wall seconds of the whole simulation
(start-up of the processes included) and the CPU seconds of all its runs.

The last lines are `100-node day: <seconds> s (...)` and `1000-node day: <seconds> s (...)`
when 100 or 1,000 nodes x 24 h were run (naming the policies timed). CPU seconds and the
peak resident memory are printed beside wall time: on a machine shared with other work,
wall time moves with its load.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pykatalyst.cli.sim import demo_scenario_path, policy_workers
from pykatalyst.sim.scenario import Scenario, load_scenario
from pykatalyst.sim.simulate import simulate


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


def time_policies(
    sc: Scenario, nodes: int, hours: float, only: list[str] | None, workers: int | None
) -> tuple[float, int]:
    """Simulate (the chosen policies of) `sc`, print a line per policy and one for the
    whole, and return the whole's wall seconds and the processes it ran in."""
    if only:
        sc = sc.model_copy(update={"policies": [p for p in sc.policies if p.name in only]})
    procs = policy_workers(sc, workers)
    t0 = time.perf_counter()
    result = simulate(sc, workers=procs)
    total = time.perf_counter() - t0
    for run in result.runs:
        pods = max(run.series.batch_running) + sum(s.replicas for s in sc.services)
        print(
            f"{nodes:>5} {run.policy.name:<18} {pods:>6} {run.wall_s:>8.1f} {run.cpu_s:>7.1f} "
            f"{nodes * hours / run.wall_s:>9.1f} {run.tally.agent_reconciles:>10}"
        )
    cpu_total = sum(run.cpu_s for run in result.runs)
    rate = nodes * hours / total if total else 0.0
    print(
        f"{nodes:>5} {'together':<18} {'':>6} {total:>8.1f} {cpu_total:>7.1f} {rate:>9.1f} "
        f"{'':>10} ({procs} process{'es' if procs > 1 else ''})"
    )
    peak = max(run.peak_rss_gib for run in result.runs)
    if procs > 1:
        summed = sum(run.peak_rss_gib for run in result.runs)
        print(f"peak resident memory: {peak:.2f} GiB the largest process, {summed:.2f} GiB summed")
    else:
        print(f"peak resident memory: {peak:.2f} GiB")
    return total, procs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="*", default=[10, 30, 100])
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--scenario", type=Path, help="time this scenario as it is (no scaling)")
    ap.add_argument(
        "--policies", nargs="*", help="time only these policies (default: all of the scenario's)"
    )
    ap.add_argument(
        "--workers",
        type=int,
        help="processes running the policies side by side (default: as `katalyst sim`)",
    )
    args = ap.parse_args()
    base = load_scenario(args.scenario or demo_scenario_path())
    if args.scenario is not None:
        args.nodes = [sum(g.count for g in base.nodes)]
    print(f"step {base.step:g} s; katalyst agent period {base.policies[-1].agent.period:g} s")
    print(
        f"{'nodes':>5} {'policy':<18} {'pods':>6} {'wall s':>8} {'cpu s':>7} "
        f"{'node-h/s':>9} {'reconciles':>10}"
    )
    which = ", ".join(args.policies) if args.policies else "all policies"
    days: list[str] = []
    for n in args.nodes:
        sc = (
            base.model_copy(update={"duration": args.hours * 3600.0})
            if args.scenario is not None
            else scaled(base, n, args.hours)
        )
        total, procs = time_policies(sc, n, args.hours, args.policies, args.workers)
        if n in (100, 1000) and args.hours >= 24:
            side = f", {procs} processes side by side" if procs > 1 else ""
            days.append(f"{n}-node day: {total:.1f} s ({which}{side})")
    for line in days:
        print(line)


if __name__ == "__main__":
    main()
