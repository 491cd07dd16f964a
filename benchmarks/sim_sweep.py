"""How much a sweep gains from Ray: the same runs one after another and on a local Ray.

Sixteen runs of a scenario (by default the bundled small.yaml under the katalyst policy,
seeds 1-16), timed one after another in this process and on a local Ray of `--workers`
cpus, the two modes interleaved `--rounds` times so background load hits each alike. The
Ray figure includes starting and stopping Ray, as a user's `katalyst sim --sweep` pays it.
Both modes must give identical figures (checked).

    python benchmarks/sim_sweep.py
    python benchmarks/sim_sweep.py --scenario examples/scenarios/small.yaml --runs 16 --workers 2
    python benchmarks/sim_sweep.py --hours 24     # the same cluster over a day: longer runs

Ray's start and stop cost a few seconds whatever the runs, so the ratio depends on how
long each run is: `--hours` sets the scenario's duration to see it with longer runs.

The last line is `ray_over_sequential: <ratio>` (the median over rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from pykatalyst.sim.scenario import load_scenario
from pykatalyst.sim.sweep import parse_sweep, plan_sweep, run_sweep

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenario", type=Path, default=ROOT / "examples/scenarios/small.yaml")
    ap.add_argument("--policy", default="katalyst")
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hours", type=float, default=None, help="the scenario's duration")
    args = ap.parse_args()
    scenario = load_scenario(args.scenario)
    if args.hours is not None:
        scenario = scenario.model_copy(update={"duration": args.hours * 3600.0})
    spec = parse_sweep({"axes": {"seed": list(range(1, args.runs + 1))}, "policies": [args.policy]})
    runs = plan_sweep(scenario, spec)
    hours = scenario.duration / 3600
    print(
        f"{len(runs)} runs of {scenario.name} ({args.policy}, {hours:g} h); "
        f"Ray with {args.workers} cpus"
    )
    ratios = []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        alone, _ = run_sweep(runs, use_ray=False)
        t_alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        on_ray, how = run_sweep(runs, workers=args.workers)
        t_ray = time.perf_counter() - t0
        same = [o.figures for o in alone] == [o.figures for o in on_ray]
        failed = sum(o.error is not None for o in alone + on_ray)
        per_run = statistics.median(o.wall_s for o in alone)
        print(
            f"round {r + 1}: one after another {t_alone:6.1f} s ({per_run:.1f} s per run), "
            f"{how} {t_ray:6.1f} s, ratio {t_ray / t_alone:.2f}, identical figures: {same}, "
            f"failed runs: {failed}"
        )
        if not same or failed:
            raise SystemExit("the two modes disagree or a run failed")
        ratios.append(t_ray / t_alone)
    print(f"ray_over_sequential: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
