"""Run a scenario: every policy on its own simulated cluster, over the identical workload.

The policies' runs share nothing but the workload, so with `workers` above 1 they run in
that many processes side by side; each run is the same as it would be alone.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import resource
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

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
    scenario: Scenario,
    progress: StepProgress | None = None,
    seed: int | None = None,
    workers: int = 1,
) -> SimulationResult:
    """Simulate `scenario` (with `seed` instead of its own, when given), its policies in up
    to `workers` processes at once."""
    if workers < 1:
        raise ValueError(f"workers: {workers} is not accepted (accepted: 1 or more)")
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    workload = build_workload(scenario)
    if workers > 1 and len(scenario.policies) > 1:
        runs = _run_side_by_side(scenario, workload, progress, workers)
    else:
        runs = [_run_policy(scenario, i, workload, progress) for i in range(len(scenario.policies))]
    return SimulationResult(scenario, workload, tuple(runs), scenario_warnings(scenario))


def _run_policy(
    scenario: Scenario, index: int, workload: Workload, progress: StepProgress | None
) -> PolicyRun:
    policy = scenario.policies[index]
    sim = PolicySim(scenario, policy, workload)
    cb = None
    if progress is not None:

        def cb(done: int, total: int, _name: str = policy.name) -> None:
            progress(_name, done, total)

    started, cpu = time.perf_counter(), time.process_time()
    run = sim.run(cb)
    run.wall_s = time.perf_counter() - started
    run.cpu_s = time.process_time() - cpu
    run.peak_rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB
    return run


# a worker process's queue for its runs' progress
_progress_queue: Any = None


def _worker_started(progress_queue: Any, parent: int) -> None:
    global _progress_queue
    _progress_queue = progress_queue
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()


def _end_with_parent(parent: int) -> None:
    """A worker whose caller is gone (killed) ends too: nobody would read its run, and
    an idle one would wait for work forever."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _worker_progress(policy: str, done: int, total: int) -> None:
    _progress_queue.put((policy, done, total))


class PolicyRunError(RuntimeError):
    """A policy's run failed in a worker process with an error that could not be sent
    back as it was; the message names the policy and the error."""


def _run_in_worker(scenario: Scenario, index: int, workload: Workload, report: bool) -> PolicyRun:
    try:
        return _run_policy(scenario, index, workload, _worker_progress if report else None)
    except Exception as exc:
        try:  # the error goes back pickled: send it as it is when it survives that
            intact = str(pickle.loads(pickle.dumps(exc))) == str(exc)
        except Exception:
            intact = False
        if intact:
            raise
        name = scenario.policies[index].name
        raise PolicyRunError(f"policy {name}: {type(exc).__name__}: {exc}") from None


def _run_side_by_side(
    scenario: Scenario, workload: Workload, progress: StepProgress | None, workers: int
) -> list[PolicyRun]:
    """Each policy in a process of its own (at most `workers` at once), those that run the
    agent first: they take longest. Processes are spawned, not forked: the caller may hold
    threads (a progress bar's, for one)."""
    ctx = multiprocessing.get_context("spawn")
    progress_queue = ctx.Queue()
    n = len(scenario.policies)
    order = sorted(range(n), key=lambda i: scenario.policies[i].name != "katalyst")
    with ProcessPoolExecutor(
        max_workers=min(workers, n),
        mp_context=ctx,
        initializer=_worker_started,
        initargs=(progress_queue, os.getpid()),
    ) as pool:
        futures: dict[int, Future[PolicyRun]] = {
            i: pool.submit(_run_in_worker, scenario, i, workload, progress is not None)
            for i in order
        }
        pending = set(futures.values())
        # the policies whose last step's report has not come (it may trail the result)
        unfinished = {p.name for p in scenario.policies} if progress is not None else set()
        while pending or unfinished:
            try:
                policy, done, total = progress_queue.get(timeout=0.1 if pending else 5.0)
            except queue.Empty:
                if not pending:
                    break
                pending = {f for f in pending if not f.done()}
                for i, f in futures.items():
                    if f.done() and f.exception() is not None:  # it reports no more
                        unfinished.discard(scenario.policies[i].name)
                continue
            if progress is not None:
                progress(policy, done, total)
                if done == total:
                    unfinished.discard(policy)
        runs = [futures[i].result() for i in range(n)]
    return runs
