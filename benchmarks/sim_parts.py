"""Where a simulated `katalyst` run spends its CPU, part by part, without a profiler.

cProfile charges every Python call, and the agent's pipeline is made of many small ones:
it overstates them several times over. This script instead wraps each part (the agent's
gather, decide and execute and their steps, the scheduler, MemoryCluster's writes, the
runner's per-step rebuild) with a CPU-clock timer, runs the demo cluster scaled to
`--nodes` under the `katalyst` policy, and prints each part's CPU seconds, calls and
microseconds a call. Parts nest (a step's time is inside its stage's), so the lines do
not add up to the total. `--hours-lines` adds one line per simulated hour: CPU seconds,
reconciles, milliseconds a reconcile, running pods and the cyclic garbage collector's
share, to tell a cost that grows with the load from one that grows with time. The
timers cost about a microsecond a call, counted in the parts that hold them.

    python benchmarks/sim_parts.py --nodes 100 --hours 1.5
    python benchmarks/sim_parts.py --nodes 20 --hours 24 --hours-lines
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from pykatalyst.cli.sim import demo_scenario_path
from pykatalyst.sim.runner import PolicySim
from pykatalyst.sim.scenario import load_scenario
from pykatalyst.sim.workload import build_workload
from sim_speed import scaled

# (module, class or None for a module function, attribute, label)
PARTS: tuple[tuple[str, str | None, str, str], ...] = (
    ("pykatalyst.agent.agent", "Agent", "gather", "agent: gather"),
    ("pykatalyst.sim.host", "SimHost", "sample", "  the simulated host's sample"),
    ("pykatalyst.agent.gather.gatherer", "Gatherer", "_parse_pods", "  pod parse"),
    ("pykatalyst.agent.node_watch", "NodeState", "refresh", "  pod watch and config"),
    ("pykatalyst.agent.agent", "Agent", "decide", "agent: decide"),
    ("pykatalyst.agent.decide", None, "_layout", "  layout"),
    ("pykatalyst.agent.sizing", None, "advise", "  sizing"),
    ("pykatalyst.agent.decide", None, "_cut", "  the cut"),
    ("pykatalyst.agent.headroom", None, "headroom", "  headroom"),
    ("pykatalyst.agent.decide", "PodPlacing", "plans", "  pod plans"),
    ("pykatalyst.agent.decide", None, "isolate", "  isolation"),
    ("pykatalyst.agent.decide", None, "_with_report", "  the report input"),
    ("pykatalyst.agent.decide", None, "_with_evictions", "  eviction stages"),
    ("pykatalyst.agent.agent", "Agent", "execute", "agent: execute"),
    ("pykatalyst.agent.reporter", "Reporter", "report", "  reporting"),
    ("pykatalyst.agent.reporter", "Reporter", "publish_overcommit", "  overcommit advice"),
    ("pykatalyst.agent.enforcer", "Enforcer", "apply", "  the enforcer"),
    ("pykatalyst.scheduler.scheduler", "Scheduler", "run_until_idle", "scheduler"),
    ("pykatalyst.apiserver.memory", "MemoryCluster", "patch", "MemoryCluster: patch"),
    ("pykatalyst.apiserver.memory", "MemoryCluster", "get", "MemoryCluster: get"),
    ("pykatalyst.sim.machines", "Machines", "rebuild", "runner: per-step rebuild"),
)


@contextlib.contextmanager
def timed_parts(acc: dict[str, float], calls: dict[str, int]) -> Iterator[None]:
    """Wrap each of PARTS with a CPU-clock timer while the block runs."""
    undo: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, attr: str, label: str) -> None:
        f = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        inner: Callable[..., Any] = getattr(owner, attr)

        def timed(*a: Any, **k: Any) -> Any:
            t = time.process_time()
            try:
                return inner(*a, **k)
            finally:
                acc[label] += time.process_time() - t
                calls[label] += 1

        undo.append((owner, attr, f))
        setattr(owner, attr, timed)

    for mod, cls, attr, label in PARTS:
        m = importlib.import_module(mod)
        wrap(getattr(m, cls) if cls else m, attr, label)
    try:
        yield
    finally:
        for owner, attr, f in reversed(undo):
            setattr(owner, attr, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--hours", type=float, default=1.5)
    ap.add_argument("--hours-lines", action="store_true", help="a line per simulated hour")
    args = ap.parse_args()
    sc = scaled(load_scenario(demo_scenario_path()), args.nodes, args.hours)
    index = next(i for i, p in enumerate(sc.policies) if p.name == "katalyst")
    workload = build_workload(sc)
    acc: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    gc_s = [0.0, 0.0]  # total, start of the collection under way

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            gc_s[1] = time.process_time()
        else:
            gc_s[0] += time.process_time() - gc_s[1]

    gc.callbacks.append(on_gc)
    per_hour = max(1, round(3600 / sc.step))
    with timed_parts(acc, calls):
        started = time.process_time()
        sim = PolicySim(sc, sc.policies[index], workload)
        last = [time.process_time(), 0.0, 0]

        def progress(done: int, _total: int) -> None:
            if not args.hours_lines or done % per_hour:
                return
            now, rec = time.process_time(), sim.tally.agent_reconciles
            n = rec - last[2]
            print(
                f"hour {done // per_hour:>3}: {now - last[0]:6.2f} CPU s, {n:6d} reconciles, "
                f"{(now - last[0]) / max(n, 1) * 1000:5.2f} ms each, "
                f"{len(sim.kubelet.running()):5d} pods running, GC {gc_s[0] - last[1]:5.2f} s"
            )
            last[:] = [now, gc_s[0], rec]

        sim.run(progress)
        total = time.process_time() - started
    gc.callbacks.remove(on_gc)
    reconciles = sim.tally.agent_reconciles
    print(f"{'part':<34} {'CPU s':>7} {'calls':>8} {'us a call':>10} {'us a reconcile':>15}")
    for _mod, _cls, _attr, label in PARTS:
        n = calls[label]
        if not n:
            continue
        print(
            f"{label:<34} {acc[label]:7.2f} {n:8d} {acc[label] / n * 1e6:10.1f} "
            f"{acc[label] / max(reconciles, 1) * 1e6:15.1f}"
        )
    print(
        f"{args.nodes} nodes x {args.hours:g} h, katalyst: {total:.2f} CPU s, "
        f"{reconciles} reconciles, GC {gc_s[0]:.2f} s"
    )
    print(f"ms_per_reconcile: {total / max(reconciles, 1) * 1000:.2f} (everything included)")


if __name__ == "__main__":
    main()
