"""The scheduler's runner: scheduling (or, as an extender, cache syncing) as the ticker of
a ComponentHost, with the extender's aiohttp app among the host's servers.

With a LeaderElector, scheduling is a leader-only ticker: followers keep their informers
and caches synced (so a new leader schedules at once) but bind nothing, and a replica that
loses the lease exits, as kube-scheduler does, rather than bind from a cache built while
another replica was binding."""

from __future__ import annotations

import gc
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from pykatalyst.cluster.clock import Clock
from pykatalyst.runtime.host import ComponentHost, Endpoint, HostStep
from pykatalyst.runtime.leader import LeaderElector
from pykatalyst.scheduler.extender import DEFAULT_MAX_BODY_BYTES, ExtenderService, make_app
from pykatalyst.scheduler.metrics import SchedulerMetrics
from pykatalyst.scheduler.scheduler import REASON_BINDING, ScheduleOutcome, Scheduler

log = logging.getLogger(__name__)

SCHEDULE = "schedule"
SYNC = "sync"


@dataclass(frozen=True, slots=True)
class ServeSecurity:
    """How the extender's server admits callers: HTTPS (with client certificates when
    the context requires them), a bearer token, and the largest request body."""

    ssl_context: ssl.SSLContext | None = None
    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


def scheduler_host(
    sched: Scheduler,
    clock: Clock,
    *,
    interval_s: float,
    schedule: bool,
    report: Callable[[ScheduleOutcome], None],
    extender: ExtenderService | None = None,
    listen: tuple[str, int] | None = None,
    security: ServeSecurity = ServeSecurity(),
    elector: LeaderElector | None = None,
    delay_cache: bool = False,
    pass_budget_s: float | None = None,
) -> ComponentHost:
    """`delay_cache` (delayCacheUntilActive): with an elector, a follower keeps no caches;
    they are filled by the first scheduling pass once it leads.

    `pass_budget_s`: a scheduling pass that has run this long ends after its current pod
    and the next starts at the following step, so that over a long backlog the host still
    answers its servers and a SIGTERM between two pods. None: a pass runs until the queue
    has nothing ready."""
    # Ticks run on the loop thread: the extender's handlers use the same scheduler cache
    # on that thread, so the two never interleave.
    host = ComponentHost("scheduler", clock=clock, elector=elector)
    metrics = SchedulerMetrics(host.registry)
    binding: dict[str, float] = {}  # uid -> when the attempt whose bind is in flight began

    def tick(now: float) -> None:
        if not schedule:
            sched.sync(now)
            return
        until = None if pass_budget_s is None else time.perf_counter() + pass_budget_s
        while True:
            # Each attempt's wall time, for kube-scheduler's latency histogram: measured
            # here, around the pure cycle, on the process's monotonic clock; with the bind
            # sent from a binder thread, up to the bind's end, as kube-scheduler counts it.
            started = time.perf_counter()
            outcome = sched.schedule_one(now)
            if outcome is None:
                break
            if outcome.reason == REASON_BINDING:
                binding[outcome.uid] = started
            else:
                metrics.attempted(outcome, time.perf_counter() - started)
                report(outcome)
            finished(sched.finish_bindings(now))
            if until is not None and time.perf_counter() >= until:
                host.run_again(SCHEDULE)  # the rest at the next step
                break
        finished(sched.finish_bindings(now))
        metrics.queued(sched.queue.pending())

    def finished(outcomes: list[ScheduleOutcome]) -> None:
        for done in outcomes:
            began = binding.pop(done.uid, None)
            if began is not None:
                metrics.attempted(done, time.perf_counter() - began)
            report(done)

    host.every(SCHEDULE, interval_s, tick, leader_only=elector is not None)
    if elector is not None and not delay_cache:
        # A follower's caches follow the cluster, so that taking over costs no relist.
        host.every(SYNC, interval_s, sched.sync)
    if listen is not None:
        app = None
        if extender is not None:
            app = make_app(
                extender,
                clock.now,
                token=security.token,
                max_body_bytes=security.max_body_bytes,
            )
        name = "extender" if extender is not None else "health"
        host.serve(Endpoint(name, listen[0], listen[1], app, ssl_context=security.ssl_context))
    return host


# A running scheduler's pass over its queue yields to the event loop after this long.
PASS_BUDGET_S = 0.5

# `--once` found another replica leading: the controller's code for the same case
ONCE_NOT_LEADING = 3


def run_scheduler(
    sched: Scheduler,
    clock: Clock,
    *,
    interval_s: float,
    schedule: bool,
    report: Callable[[ScheduleOutcome], None],
    extender: ExtenderService | None = None,
    listen: tuple[str, int] | None = None,
    on_ready: Callable[[], None] | None = None,
    max_seconds: float | None = None,
    security: ServeSecurity = ServeSecurity(),
    elector: LeaderElector | None = None,
    once: bool = False,
    delay_cache: bool = False,
) -> int:
    """Serve and schedule until SIGTERM/SIGINT or `max_seconds` (exit code 0), or until
    this replica loses the lease (1). `once`: one scheduling pass over the pods pending
    at the start, then 0 (ONCE_NOT_LEADING when another replica holds the lease).
    `delay_cache`: see `scheduler_host`."""
    host = scheduler_host(
        sched,
        clock,
        interval_s=interval_s,
        schedule=schedule,
        report=report,
        extender=extender,
        listen=listen,
        security=security,
        elector=elector,
        delay_cache=delay_cache,
        pass_budget_s=None if once else PASS_BUDGET_S,
    )

    def ready() -> None:
        if on_ready is not None:
            on_ready()
        if elector is not None and delay_cache:
            return  # the caches wait for the lease
        sched.sync(clock.now())
        # The first sync built the long-lived caches: keep the collector from re-walking them.
        gc.collect()
        gc.freeze()

    def on_step(step: HostStep) -> int | None:
        st = step.leader
        if once and SCHEDULE in step.ran:
            return 0
        if once and st is not None and st.action == "error":
            log.error("leader election: %s", st.message)
            return 1
        if once and elector is not None and not step.leading:
            return ONCE_NOT_LEADING
        if st is not None and st.became_leader:
            log.info("leader election: leading (%s)", st.message)
        elif st is not None and st.lost_leadership:
            log.warning("leader election: lost the lease (%s)", st.message)
        return None

    return host.run_sync(on_ready=ready, on_step=on_step, max_seconds=max_seconds)
