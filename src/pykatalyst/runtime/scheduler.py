"""The scheduler's runner: scheduling (or, as an extender, cache syncing) as the ticker of
a ComponentHost, with the extender's aiohttp app among the host's servers."""

from __future__ import annotations

import gc
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from pykatalyst.cluster.clock import Clock
from pykatalyst.runtime.host import ComponentHost, Endpoint
from pykatalyst.scheduler.extender import DEFAULT_MAX_BODY_BYTES, ExtenderService, make_app
from pykatalyst.scheduler.scheduler import ScheduleOutcome, Scheduler

SCHEDULE = "schedule"


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
) -> ComponentHost:
    # Ticks run on the loop thread: the extender's handlers use the same scheduler cache
    # on that thread, so the two never interleave.
    host = ComponentHost("scheduler", clock=clock)

    def tick(now: float) -> None:
        if schedule:
            for outcome in sched.run_until_idle(now):
                report(outcome)
        else:
            sched.sync(now)

    host.every(SCHEDULE, interval_s, tick)
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
) -> int:
    """Serve and schedule until SIGTERM/SIGINT or `max_seconds`; exit code 0."""
    host = scheduler_host(
        sched,
        clock,
        interval_s=interval_s,
        schedule=schedule,
        report=report,
        extender=extender,
        listen=listen,
        security=security,
    )

    def ready() -> None:
        if on_ready is not None:
            on_ready()
        sched.sync(clock.now())
        # The first sync built the long-lived caches: keep the collector from re-walking them.
        gc.collect()
        gc.freeze()

    return host.run_sync(on_ready=ready, max_seconds=max_seconds)
