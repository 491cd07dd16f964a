"""Run a scenario: every policy on its own simulated cluster, over the identical workload."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pykatalyst.sim.checks import scenario_warnings
from pykatalyst.sim.recording import PolicyRun
from pykatalyst.sim.runner import PolicySim
from pykatalyst.sim.scenario import Scenario
from pykatalyst.sim.workload import Workload, build_workload

# policy name, steps done, steps in all
StepProgress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class SimulationResult:
    scenario: Scenario
    workload: Workload
    runs: tuple[PolicyRun, ...]
    # settings that keep a class of the scenario's pods from ever running (sim/checks.py)
    warnings: tuple[str, ...] = ()

    def run(self, policy: str) -> PolicyRun:
        for r in self.runs:
            if r.policy.name == policy:
                return r
        raise KeyError(policy)


def simulate(
    scenario: Scenario, progress: StepProgress | None = None, seed: int | None = None
) -> SimulationResult:
    """Simulate `scenario` (with `seed` instead of its own, when given)."""
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    workload = build_workload(scenario)
    runs = []
    for policy in scenario.policies:
        sim = PolicySim(scenario, policy, workload)
        cb = None
        if progress is not None:

            def cb(done: int, total: int, _name: str = policy.name) -> None:
                progress(_name, done, total)

        started = time.perf_counter()
        run = sim.run(cb)
        run.wall_s = time.perf_counter() - started
        runs.append(run)
    return SimulationResult(scenario, workload, tuple(runs), scenario_warnings(scenario))
