"""The ComponentHost: the one event loop every long-running `katalyst` command runs in.

It owns the periodic tickers (drift-free: see `ticker.py`), the aiohttp servers of the
component (an extender, the embedded API server, or just health and metrics), optional
Lease leader election, and shutdown on SIGTERM/SIGINT: the tick in progress finishes, the
servers stop, the lease is handed back.

Every server it owns answers `/healthz` (the loop is alive: no tick has been running for
longer than the stall bound), `/readyz` (every ticker has run and its last run succeeded,
and every readiness check passes; leader-only tickers do not count on a follower, which is
a healthy standby) and `/metrics` (the component's Prometheus registry).

A reconcile that raises is caught here, logged, counted in
`katalyst_<component>_reconcile_errors_total{ticker}` and marks the component unready; the
next tick still runs on its deadline.

`step(now)` is the whole scheduling decision and is synchronous, so tests (and several
replicas on one virtual clock: the simulator's scheduler and agents, `sim/control.py`) can
drive a host without an event loop; `run()` wraps it in asyncio with the injected clock and
sleeper. A ticker may start on a phase (`every(..., first=)`), and an extra run
(`run_extra`) runs it once early without moving its grid, where a kick restarts the grid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import ApiError, Cluster
from pykatalyst.runtime.leader import LeaderElector, LeaderState
from pykatalyst.runtime.ticker import Ticker, next_deadline

if TYPE_CHECKING:
    # aiohttp is imported where the servers are made: a host driven by `step(now)` alone
    # (the simulator's) serves nothing and need not load it.
    from aiohttp import web

log = logging.getLogger("pykatalyst.runtime")

ReadinessCheck = Callable[[], str | None]
"""Returns None when ready, else the reason it is not."""


class ServeError(Exception):
    """A server of the host could not start (e.g. its port is taken)."""


class Sleeper(Protocol):
    async def sleep_until(self, deadline: float, stop: asyncio.Event) -> None:
        """Return at `deadline` on the host's clock, or as soon as `stop` is set."""
        ...


class RealSleeper:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def sleep_until(self, deadline: float, stop: asyncio.Event) -> None:
        timeout = deadline - self.clock.now()
        if timeout <= 0:
            await asyncio.sleep(0)  # an overrun tick still lets the servers answer
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout)


class VirtualSleeper:
    """Jumps a virtual clock to each deadline at once: a host on virtual time runs its
    ticks back to back while still yielding to the event loop between them."""

    def __init__(self, clock: _SettableClock) -> None:
        self.clock = clock

    async def sleep_until(self, deadline: float, stop: asyncio.Event) -> None:
        if deadline > self.clock.now():
            self.clock.set(deadline)
        await asyncio.sleep(0)


class _SettableClock(Clock, Protocol):
    def set(self, t: float) -> None: ...


class _StepTime:
    """The time of a host driven only by `step(now)`: the caller's `now`, so the work of a
    step takes no time of its own."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server the host runs. Without an `app` it serves only health and metrics; with
    one, the host adds `/healthz`, `/readyz` and `/metrics` to it unless `health` is off
    (the app then routes them itself, e.g. before a catch-all route). With `ssl_context`
    it serves HTTPS. A connection that sends nothing for `idle_timeout_s` (before its first
    request, or between requests) is closed, so silent sockets do not pile up."""

    name: str
    host: str
    port: int
    app: web.Application | None = None
    health: bool = True
    ssl_context: ssl.SSLContext | None = None
    idle_timeout_s: float = 75.0


@dataclass(frozen=True, slots=True)
class HostStep:
    """What one wake-up of the host did."""

    now: float
    leader: LeaderState | None
    leading: bool
    ran: tuple[str, ...]
    results: Mapping[str, object]
    errors: Mapping[str, Exception]
    next_wake: float

    @property
    def lost_leadership(self) -> bool:
        return self.leader is not None and self.leader.lost_leadership


# A reconcile takes milliseconds on a quiet node and seconds on a dense one or behind a
# slow API server.
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class _Metrics:
    ticks: Counter
    errors: Counter
    skipped: Counter
    kicked: Counter
    duration: Gauge
    last_success: Gauge
    histogram: Histogram
    leader: Gauge | None = field(default=None)


def _metrics(component: str, registry: CollectorRegistry, elected: bool) -> _Metrics:
    p = f"katalyst_{component}"
    labels = ["ticker"]
    m = _Metrics(
        Counter(f"{p}_ticks_total", "Ticks run, by ticker.", labels, registry=registry),
        Counter(
            f"{p}_reconcile_errors_total",
            "Ticks whose reconcile raised (the loop went on), by ticker.",
            labels,
            registry=registry,
        ),
        Counter(
            f"{p}_ticks_skipped_total",
            "Deadlines skipped because a tick overran them, by ticker.",
            labels,
            registry=registry,
        ),
        Counter(
            f"{p}_ticks_kicked_total",
            "Ticks run early because another ticker asked for them, by ticker.",
            labels,
            registry=registry,
        ),
        Gauge(
            f"{p}_tick_duration_seconds", "How long the last tick took.", labels, registry=registry
        ),
        Gauge(
            f"{p}_last_tick_success_timestamp_seconds",
            "When a tick last succeeded (seconds on the component's clock).",
            labels,
            registry=registry,
        ),
        Histogram(
            f"{p}_reconcile_duration_seconds",
            "How long each tick's reconcile took, by ticker.",
            labels,
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        ),
    )
    if elected:
        m.leader = Gauge(
            f"{p}_leader",
            f"1 while this replica holds the {component} lease and acts, else 0.",
            registry=registry,
        )
    return m


class ComponentHost:
    """Runs one component: its tickers, servers, lease and shutdown.

    `clock` None makes a host driven only by `step(now)` (tests, several replicas on one
    virtual clock); `run()` needs a clock."""

    def __init__(
        self,
        component: str,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        elector: LeaderElector | None = None,
        reconcile_in_thread: bool = False,
        sleeper: Sleeper | None = None,
        stall_after_s: float | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        """With a `cluster`, the host owns the process's shared informers (`informers`):
        one per kind, handed to every component it runs."""
        self.component = component
        self.informers = InformerFactory(cluster) if cluster is not None else None
        self._step_time = _StepTime() if clock is None else None
        self.clock: Clock = clock if clock is not None else self._step_time  # type: ignore[assignment]
        self.registry = registry if registry is not None else CollectorRegistry()
        self.elector = elector
        self.reconcile_in_thread = reconcile_in_thread
        self.sleeper: Sleeper = sleeper if sleeper is not None else RealSleeper(self.clock)
        self.stall_after_s = stall_after_s
        self.tickers: list[Ticker] = []
        self.endpoints: list[Endpoint] = []
        self.bound: dict[str, tuple[str, int]] = {}
        self.lease_released = False
        self._checks: list[tuple[str, ReadinessCheck]] = []
        self._on_stop: list[Callable[[], None]] = []
        self._metrics = _metrics(component, self.registry, elector is not None)
        self._lease_deadline: float | None = None
        self._leader_state: LeaderState | None = None
        self._leading = elector is None
        self._tick_started: float | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- building -------------------------------------------------------------------------

    def every(
        self,
        name: str,
        period_s: float,
        fn: Callable[[float], object],
        *,
        leader_only: bool = False,
        first: float | None = None,
    ) -> Ticker:
        """Call `fn(now)` every `period_s` from the first step on (from `first` on when it is
        given: a phase, so that replicas on one clock need not all run at once);
        `leader_only` tickers run only while this replica holds the lease."""
        if any(t.name == name for t in self.tickers):
            raise ValueError(f"ticker {name!r} is already registered")
        ticker = Ticker(name, period_s, fn, leader_only=leader_only, deadline=first)
        self.tickers.append(ticker)
        return ticker

    def kick(self, name: str, now: float) -> bool:
        """Run the ticker `name` early: in this step when called from another ticker's run,
        else at the next; its grid restarts from that run. False when it was due anyway."""
        ticker = next((t for t in self.tickers if t.name == name), None)
        if ticker is None:
            raise ValueError(f"no ticker {name!r}")
        if not ticker.kick(now):
            return False
        self._metrics.kicked.labels(name).inc()
        return True

    def run_extra(self, name: str, now: float) -> bool:
        """Run the ticker `name` once more at the first step at or after `now`, leaving its
        grid where it is (a kick moves the grid). False when a run is due by then anyway."""
        ticker = next((t for t in self.tickers if t.name == name), None)
        if ticker is None:
            raise ValueError(f"no ticker {name!r}")
        return ticker.extra(now)

    def run_again(self, name: str) -> None:
        """From inside the ticker `name`'s own run: run it once more at the next step (after
        the loop has served its servers and signals), leaving its grid where it is."""
        ticker = next((t for t in self.tickers if t.name == name), None)
        if ticker is None:
            raise ValueError(f"no ticker {name!r}")
        ticker.again = True

    def serve(self, endpoint: Endpoint) -> None:
        if not 0 <= endpoint.port <= 65535:
            raise ValueError(f"{endpoint.name}: port {endpoint.port} is outside 0-65535")
        self.endpoints.append(endpoint)

    def ready_when(self, name: str, check: ReadinessCheck) -> None:
        """An extra readiness condition, e.g. informers synced."""
        self._checks.append((name, check))

    def on_stop(self, fn: Callable[[], None]) -> None:
        """Called once the loop has stopped, before the servers close."""
        self._on_stop.append(fn)

    # --- one wake-up ----------------------------------------------------------------------

    def step(self, now: float) -> HostStep:
        """Run the lease round and every ticker that is due at `now`."""
        if self._step_time is not None:
            self._step_time.t = now
        leader = self._elect(now)
        ran: list[str] = []
        results: dict[str, object] = {}
        errors: dict[str, Exception] = {}
        # A second pass runs what a ticker of the first kicked (each ticker once a step).
        for _ in range(2):
            for t in self.tickers:
                if t.leader_only and not self._leading:
                    t.deadline = None  # a new leader acts at once, then on its own grid
                    continue
                if t.name in ran or not t.due(now):
                    continue
                ran.append(t.name)
                self._run_ticker(t, now, results, errors)
        return HostStep(
            now, leader, self._leading, tuple(ran), results, errors, self._next_wake(now)
        )

    def _run_ticker(
        self,
        t: Ticker,
        now: float,
        results: dict[str, object],
        errors: dict[str, Exception],
    ) -> None:
        on_grid = t.on_grid(now)
        t.extra_at = None
        t.again = False
        scheduled = t.deadline if t.deadline is not None else now
        started = self.clock.now()
        self._tick_started = started
        try:
            results[t.name] = t.fn(now)
        except Exception as exc:  # the host boundary: one bad tick must not end the loop
            errors[t.name] = exc
            t.last_ok, t.last_error = False, f"{type(exc).__name__}: {exc}"
            self._metrics.errors.labels(t.name).inc()
            if isinstance(exc, ApiError):
                log.error("%s: %s failed: %s", self.component, t.name, exc)
            else:
                log.exception("%s: %s failed", self.component, t.name)
        else:
            t.last_ok, t.last_error = True, None
            self._metrics.last_success.labels(t.name).set(now)
        finally:
            self._tick_started = None
        finished = max(self.clock.now(), now)
        t.runs += 1
        self._metrics.ticks.labels(t.name).inc()
        self._metrics.duration.labels(t.name).set(max(0.0, finished - started))
        self._metrics.histogram.labels(t.name).observe(max(0.0, finished - started))
        missed = t.advance(scheduled, finished) if on_grid else 0
        if t.again:
            t.again = False
            t.extra_at = now
        if missed:
            self._metrics.skipped.labels(t.name).inc(missed)
            log.warning(
                "%s: %s overran %d deadline(s) of its %gs period; skipped them",
                self.component,
                t.name,
                missed,
                t.period_s,
            )

    def _elect(self, now: float) -> LeaderState | None:
        el = self.elector
        if el is None:
            return None
        state: LeaderState | None = None
        if self._lease_deadline is None or now >= self._lease_deadline:
            state = el.tick(now)
            scheduled = self._lease_deadline if self._lease_deadline is not None else now
            self._lease_deadline, _ = next_deadline(scheduled, el.config.retry_period_s, now)
            self._leader_state = state
        leading = el.leading(now)
        last = self._leader_state
        if not leading and state is None and last is not None and last.leading:
            # The renew deadline passed between rounds: say so now, not at the next.
            state = LeaderState(
                now,
                False,
                el.holder,
                "error",
                "renew deadline passed without a successful renewal",
                lost_leadership=True,
            )
            self._leader_state = state
        self._leading = leading
        if self._metrics.leader is not None:
            self._metrics.leader.set(1 if leading else 0)
        return state

    def _next_wake(self, now: float) -> float:
        wakes = [t.next_run(now) for t in self.tickers if self._leading or not t.leader_only]
        if self._lease_deadline is not None:
            wakes.append(self._lease_deadline)
        if not wakes:
            return now + min((t.period_s for t in self.tickers), default=1.0)
        return max(min(wakes), now)

    # --- health ---------------------------------------------------------------------------

    def alive(self) -> str | None:
        """None while the loop is alive, else why not (a tick stuck past the bound)."""
        started = self._tick_started
        if started is None or self.stall_after_s is None:
            return None
        running = self.clock.now() - started
        if running > self.stall_after_s:
            return f"a tick has been running for {running:.0f}s (bound {self.stall_after_s:g}s)"
        return None

    def not_ready(self) -> list[str]:
        """Why the component is not ready; empty when it is."""
        reasons = []
        for t in self.tickers:
            if t.leader_only and not self._leading:
                continue
            if t.last_ok is None:
                reasons.append(f"{t.name}: has not run yet")
            elif not t.last_ok:
                reasons.append(f"{t.name}: last run failed: {t.last_error}")
        for name, check in self._checks:
            why = check()
            if why is not None:
                reasons.append(f"{name}: {why}")
        return reasons

    def health_routes(self) -> list[web.RouteDef]:
        from aiohttp import web

        async def healthz(request: web.Request) -> web.Response:
            why = self.alive()
            return web.Response(
                text="ok" if why is None else why, status=200 if why is None else 500
            )

        async def readyz(request: web.Request) -> web.Response:
            reasons = self.not_ready()
            if not reasons:
                return web.Response(text="ok")
            return web.Response(text="\n".join(reasons), status=503)

        async def metrics(request: web.Request) -> web.Response:
            body = generate_latest(self.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        return [
            web.get("/healthz", healthz),
            web.get("/livez", healthz),
            web.get("/readyz", readyz),
            web.get("/metrics", metrics),
        ]

    # --- running --------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask `run()` to return after the tick in progress; callable from any thread."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run(
        self,
        *,
        on_ready: Callable[[], None] | None = None,
        on_step: Callable[[HostStep], int | None] | None = None,
        max_seconds: float | None = None,
    ) -> int:
        """Serve and tick until stopped; returns the exit code: what `on_step` returned to
        stop, 1 when the lease was lost, else 0 (stopped by a signal or `max_seconds`)."""
        if self._step_time is not None:
            raise RuntimeError("a host without a clock is driven by step(now), not run()")
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        handled = self._install_signals()
        runners: list[web.AppRunner] = []
        try:
            runners = await self._start_servers()
            if on_ready is not None:
                on_ready()
            return await self._loop_until_stopped(on_step, max_seconds)
        finally:
            for sig in handled:
                self._loop.remove_signal_handler(sig)
            for fn in self._on_stop:
                fn()
            for runner in runners:
                await runner.cleanup()
            self._release()

    async def _loop_until_stopped(
        self, on_step: Callable[[HostStep], int | None] | None, max_seconds: float | None
    ) -> int:
        assert self._stop is not None
        start = self.clock.now()
        while not self._stop.is_set():
            now = self.clock.now()
            if self.reconcile_in_thread:
                step = await asyncio.to_thread(self.step, now)
            else:
                step = self.step(now)
            code = on_step(step) if on_step is not None else None
            if code is None and step.lost_leadership:
                code = 1
            if code is not None:
                return code
            if max_seconds is not None and self.clock.now() - start >= max_seconds:
                break
            await self.sleeper.sleep_until(step.next_wake, self._stop)
        return 0

    def _install_signals(self) -> list[signal.Signals]:
        assert self._loop is not None
        handled = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread (a test's background host): no signals
            handled.append(sig)
        return handled

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s: %s: stopping after the current tick", self.component, sig.name)
        if self._stop is not None:
            self._stop.set()

    async def _start_servers(self) -> list[web.AppRunner]:
        from aiohttp import web

        runners: list[web.AppRunner] = []
        try:
            for ep in self.endpoints:
                app = ep.app if ep.app is not None else web.Application()
                if ep.health:
                    app.router.add_routes(self.health_routes())
                runner = web.AppRunner(
                    app,
                    handle_signals=False,
                    shutdown_timeout=2.0,
                    access_log=None,
                    keepalive_timeout=ep.idle_timeout_s,
                )
                await runner.setup()
                runners.append(runner)
                site = web.TCPSite(runner, ep.host, ep.port, ssl_context=ep.ssl_context)
                try:
                    await site.start()
                except OSError as exc:
                    raise ServeError(
                        f"cannot serve {ep.name} on {ep.host}:{ep.port}: {exc}"
                    ) from exc
                port = ep.port
                for addr in runner.addresses:
                    if isinstance(addr, tuple) and len(addr) >= 2:
                        port = int(addr[1])
                        break
                self.bound[ep.name] = (ep.host, port)
        except BaseException:
            for runner in runners:
                await runner.cleanup()
            raise
        return runners

    def _release(self) -> None:
        if self.elector is None:
            return
        try:
            self.lease_released = self.elector.release(self.clock.now())
        except ApiError as exc:
            log.error("%s: could not release the lease: %s", self.component, exc)

    def run_sync(
        self,
        *,
        on_ready: Callable[[], None] | None = None,
        on_step: Callable[[HostStep], int | None] | None = None,
        max_seconds: float | None = None,
    ) -> int:
        """`run()` on a fresh event loop (the one a command's process has)."""
        return asyncio.run(self.run(on_ready=on_ready, on_step=on_step, max_seconds=max_seconds))
