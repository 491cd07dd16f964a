"""How fast the share pool follows a step in a shared pod's load, on real cgroups.

Real, on this machine (root, cgroup v1): a kubelet-like hierarchy under a unique prefix
(`CgroupTestbed`), the node agent over an in-memory cluster holding the pod
(`isolation.AgentWorld`), run as `katalyst agent` runs it: in a ComponentHost
(`runtime.agent.agent_host`), its reconcile every `period_s` and, unless `--no-watch`, the
share pools' fast watch (`reaction.period_s`) kicking an early reconcile.

One shared_cores pod requests `--request` cores (default 2) and runs one load process per
requested core, each busy a duty share of every 100 ms. The load steps from 20 % to 80 % of
the request and back, `--steps` times. Reaction = the time from a step up to the share
pool's cpuset, read back from the pod's container cgroup (cpuset.cpus) every 20 ms, growing.
Flaps = changes of that cpuset while the load is steady (after the pool followed a step,
before the next step), which a stable pool never makes.

The pool needs room to grow on this 2-cpu machine, so the agent is told (and only this
benchmark tells it): no reserve pool (`cpu.reserved_cpus: 0`), no reclaim pool of its own
(`cpu.min_reclaim_pool_cpus: 0`, `advisor.min_reclaimed_for_allocate_cpu: 0`), no burst
buffer (`advisor.reserved_for_allocate_cpu: 0`), a share pool of at least 1 cpu
(`advisor.min_share_cpu_requirement: 1`), no ramp-up (`cpu.ramp_up_period_s: 0`), reclaim on
(pools sized by usage). With a 2-core request, 20 % (0.4 cores) fits 1 cpu, 80 % (1.6
cores, capped at 1 core on 1 cpu: estimate 1.25) wants 2. Everything else keeps its
default, the regulator's limits included: a pool shrinks at most once per 30 s, which sets
the length of each low phase (`--low-s`).

The machine is shared: other load delays the load processes and the agent alike, and
kubepods gets the largest cpu.shares (`--shield`) so that it weighs as little as it can.

    sudo .venv/bin/python benchmarks/reaction.py [--steps 5] [--period 5s] [--no-watch]

Last line: `reaction_s: p50 <s> max <s> flaps: <n>`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the cgroup testbed is a test fixture, not in the wheel

from benchmarks.isolation import AgentWorld  # noqa: E402
from tests.fixtures.cgroup_testbed import CgroupTestbed, testbed_unavailable_reason  # noqa: E402

from pykatalyst.agent.config import AgentConfig  # noqa: E402
from pykatalyst.agent.plan import AgentPlan  # noqa: E402
from pykatalyst.api.duration import parse_duration  # noqa: E402
from pykatalyst.runtime.agent import agent_host  # noqa: E402
from pykatalyst.topology.cpuset import CPUSet  # noqa: E402

LOAD = r"""
import sys, time
control, slot = sys.argv[1], 0.1
duty = 0.0
while True:
    start = time.monotonic()
    try:
        with open(control) as f:
            duty = float(f.read() or duty)
    except (OSError, ValueError):
        pass
    while time.monotonic() - start < duty * slot:
        pass
    rest = slot - (time.monotonic() - start)
    if rest > 0:
        time.sleep(rest)
"""

POLL_S = 0.02


@dataclass
class Phase:
    duty: float
    start: float
    changes: list[tuple[float, int]] = field(default_factory=list)  # (time, pool size)


def agent_config(args: argparse.Namespace) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "period_s": args.period,
            "checkpoint_path": None,
            "cpu_state_path": None,
            "reclaimed_root": "",
            "cpu": {"reserved_cpus": 0, "min_reclaim_pool_cpus": 0, "ramp_up_period_s": 0},
            "advisor": {
                "enable_reclaim": True,
                "reserved_for_allocate_cpu": 0,
                "min_reclaimed_for_allocate_cpu": 0,
                "min_share_cpu_requirement": 1,
            },
            "reaction": {"enabled": args.watch},
        }
    )


def pool_size(tb: CgroupTestbed, cgroup: str) -> int:
    return len(CPUSet.parse(tb.read(cgroup, "cpuset.cpus")))


def wait_for_size(tb: CgroupTestbed, cgroup: str, size: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pool_size(tb, cgroup) == size:
            return True
        time.sleep(POLL_S)
    return False


def run_phase(tb: CgroupTestbed, cgroup: str, control: Path, duty: float, hold_s: float) -> Phase:
    """Set the load's duty share, then watch the pool's size for `hold_s`."""
    control.write_text(str(duty))
    phase = Phase(duty, time.monotonic())
    size = pool_size(tb, cgroup)
    end = phase.start + hold_s
    while time.monotonic() < end:
        now_size = pool_size(tb, cgroup)
        if now_size != size:
            phase.changes.append((time.monotonic(), now_size))
            size = now_size
        time.sleep(POLL_S)
    return phase


def measure(args: argparse.Namespace, tb: CgroupTestbed) -> tuple[list[float], int]:
    world = AgentWorld(tb, overlap=False, idle_root=False, config=agent_config(args))
    uid = world.add_pod("load", "load", world.names.QOS_SHARED_CORES, {"cpu": str(args.request)})
    cgroup = tb.container_cgroup(uid, "load")
    control = Path(tempfile.mkstemp(prefix="reaction-duty-")[1])
    control.write_text(str(args.low))
    for _ in range(round(args.request)):
        tb.spawn(uid, "load", [sys.executable, "-c", LOAD, str(control)])

    def show(plan: AgentPlan) -> None:
        return None

    host = agent_host(world.agent, world.clock, period_s=world.agent.config.period_s, show=show)
    runner = threading.Thread(target=host.run_sync, daemon=True)
    runner.start()
    reactions: list[float] = []
    flaps = 0
    try:
        if not wait_for_size(tb, cgroup, 1, 60.0 + args.period):
            cpus = tb.read(cgroup, "cpuset.cpus")
            raise SystemExit(f"the share pool did not settle at 1 cpu: it has {cpus}")
        run_phase(tb, cgroup, control, args.low, 2.0)
        for step in range(args.steps):
            high = run_phase(tb, cgroup, control, args.high, args.high_s)
            grown = next((t for t, s in high.changes if s > 1), None)
            if grown is None:
                print(f"step {step + 1}: the pool did not grow within {args.high_s:g} s")
                reactions.append(float("inf"))
            else:
                reactions.append(grown - high.start)
            low = run_phase(tb, cgroup, control, args.low, args.low_s)
            steady = max(len(high.changes) - 1, 0) + max(len(low.changes) - 1, 0)
            flaps += steady
            sizes = [s for _, s in high.changes] + ["|"] + [s for _, s in low.changes]
            print(
                f"step {step + 1}: reaction {reactions[-1]:.2f} s  pool sizes seen "
                f"{' '.join(map(str, sizes))}  flaps {steady}"
            )
    finally:
        host.request_stop()
        runner.join(timeout=30)
        control.unlink(missing_ok=True)
    reconcile = host.tickers[0]
    print(f"reconciles: {reconcile.runs}, of which early (kicked by the watch): {reconcile.kicked}")
    for t in host.tickers:
        total = host.registry.get_sample_value(
            "katalyst_agent_reconcile_duration_seconds_sum", {"ticker": t.name}
        )
        over_1s = host.registry.get_sample_value(
            "katalyst_agent_reconcile_duration_seconds_bucket", {"ticker": t.name, "le": "1.0"}
        )
        if total is not None and t.runs:
            print(
                f"{t.name}: {1000 * total / t.runs:.0f} ms a run on average, "
                f"{t.runs - (over_1s or 0):.0f} of {t.runs} over 1 s, {t.skipped} deadlines skipped"
            )
    return reactions, flaps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="load steps up (and back down)")
    ap.add_argument("--period", type=parse_duration, default=5.0, help="agent period_s")
    ap.add_argument(
        "--watch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the share pools' fast watch (reaction.enabled)",
    )
    ap.add_argument("--request", type=float, default=2.0, help="the pod's cpu request, cores")
    ap.add_argument("--low", type=float, default=0.2, help="low load, share of the request")
    ap.add_argument("--high", type=float, default=0.8, help="high load, share of the request")
    ap.add_argument("--high-s", type=float, default=10.0, help="length of each high phase")
    ap.add_argument(
        "--low-s", type=float, default=32.0, help="length of each low phase (one shrink per 30 s)"
    )
    ap.add_argument(
        "--shield",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give kubepods the maximum cpu.shares against other load on the machine",
    )
    args = ap.parse_args()
    reason = testbed_unavailable_reason()
    if reason is not None:
        print(f"reaction benchmark needs a writable cgroup v1 hierarchy: {reason}", file=sys.stderr)
        return 2
    print(
        f"request {args.request:g} cores, load {args.low:.0%} -> {args.high:.0%}, "
        f"{args.steps} steps, agent period {args.period:g} s, "
        f"fast watch: {'on' if args.watch else 'off'}"
    )
    with CgroupTestbed(kubepods_shares=262144 if args.shield else None) as tb:
        reactions, flaps = measure(args, tb)
    p50 = statistics.median(reactions)
    print(f"reaction_s: p50 {p50:.2f} max {max(reactions):.2f} flaps: {flaps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
