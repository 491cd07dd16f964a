"""The ComponentHost: drift-free ticks, skipped deadlines, crash containment, shutdown and
the health endpoints every daemon serves."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import RealClock, VirtualClock
from pykatalyst.runtime.host import ComponentHost, Endpoint, HostStep, ServeError, VirtualSleeper
from pykatalyst.runtime.leader import LeaderConfig, LeaderElector
from pykatalyst.runtime.ticker import next_deadline


def _virtual(start: float = 1000.0, **kw: Any) -> tuple[ComponentHost, VirtualClock]:
    clock = VirtualClock(start)
    return ComponentHost("demo", clock=clock, sleeper=VirtualSleeper(clock), **kw), clock


def _stop_after(n: int) -> Any:
    steps: list[HostStep] = []

    def on_step(step: HostStep) -> int | None:
        steps.append(step)
        return 0 if len(steps) >= n else None

    return steps, on_step


def test_ticks_stay_on_their_grid_however_long_the_work_takes() -> None:
    host, clock = _virtual()
    starts: list[float] = []

    def work(now: float) -> None:
        starts.append(now)
        clock.advance(3.7)  # a slow reconcile, well under the period

    host.every("reconcile", 10.0, work)
    _, on_step = _stop_after(200)
    assert host.run_sync(on_step=on_step) == 0
    # A sleep(period) after the work would have drifted 3.7s per tick: 740s by now.
    assert starts == [1000.0 + 10.0 * k for k in range(200)]


def test_an_overrun_skips_the_missed_deadlines_and_counts_them() -> None:
    host, clock = _virtual(0.0)
    starts: list[float] = []

    def work(now: float) -> None:
        starts.append(now)
        if len(starts) == 2:
            clock.advance(25.0)  # overruns the deadlines at 20 and 30

    host.every("reconcile", 10.0, work)
    _, on_step = _stop_after(4)
    host.run_sync(on_step=on_step)
    assert starts == [0.0, 10.0, 40.0, 50.0]
    assert (
        host.registry.get_sample_value("katalyst_demo_ticks_skipped_total", {"ticker": "reconcile"})
        == 2
    )


def test_a_raising_reconcile_is_counted_and_the_next_tick_runs_on_time() -> None:
    host, _ = _virtual(0.0)
    starts: list[float] = []

    def work(now: float) -> None:
        starts.append(now)
        if len(starts) in (2, 3):
            raise RuntimeError("boom")

    host.every("reconcile", 5.0, work)
    steps, on_step = _stop_after(5)
    assert host.run_sync(on_step=on_step) == 0
    assert starts == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert [sorted(s.errors) for s in steps] == [[], ["reconcile"], ["reconcile"], [], []]
    errors = host.registry.get_sample_value(
        "katalyst_demo_reconcile_errors_total", {"ticker": "reconcile"}
    )
    assert errors == 2
    assert host.not_ready() == []  # the last tick succeeded again


def test_readiness_follows_the_last_tick() -> None:
    host = ComponentHost("demo")
    fail = [False]

    def work(now: float) -> None:
        if fail[0]:
            raise ValueError("cannot read the node")

    host.every("reconcile", 1.0, work)
    assert host.not_ready() == ["reconcile: has not run yet"]
    host.step(0.0)
    assert host.not_ready() == []
    fail[0] = True
    host.step(1.0)
    assert host.not_ready() == ["reconcile: last run failed: ValueError: cannot read the node"]
    synced = [False]
    host.ready_when("informers", lambda: None if synced[0] else "not synced")
    fail[0] = False
    host.step(2.0)
    assert host.not_ready() == ["informers: not synced"]
    synced[0] = True
    assert host.not_ready() == []


@given(
    previous=st.floats(-1e6, 1e6),
    period=st.floats(0.01, 1e4),
    late=st.floats(0, 1e5),
)
def test_the_next_deadline_is_the_first_grid_point_after_now(
    previous: float, period: float, late: float
) -> None:
    now = previous + late
    deadline, missed = next_deadline(previous, period, now)
    assert deadline > now
    assert missed >= 0
    assert deadline == pytest.approx(previous + (missed + 1) * period, rel=1e-9, abs=1e-6)
    # the grid point before it was not after now (nothing later was skipped)
    assert deadline - period <= now + 1e-6 * max(1.0, abs(now))


def test_only_the_lease_holder_runs_leader_only_tickers() -> None:
    clock = VirtualClock(0.0)
    cluster = MemoryCluster(clock=clock)
    cfg = LeaderConfig(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
    hosts = [ComponentHost("demo", elector=LeaderElector(cluster, who, config=cfg)) for who in "ab"]
    runs = {"a": 0, "b": 0}
    for host, who in zip(hosts, "ab", strict=True):
        host.every(
            "work",
            10.0,
            lambda now, who=who: runs.__setitem__(who, runs[who] + 1),
            leader_only=True,
        )
    for _ in range(30):
        for host in hosts:
            host.step(clock.now())
        clock.advance(2)
    assert runs == {"a": 6, "b": 0}
    assert hosts[1].not_ready() == []  # a follower is a ready standby
    assert hosts[0].registry.get_sample_value("katalyst_demo_leader") == 1
    assert hosts[1].registry.get_sample_value("katalyst_demo_leader") == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_health_readiness_and_metrics_are_served_and_parse() -> None:
    host = ComponentHost("demo", clock=RealClock())
    fail = threading.Event()

    def work(now: float) -> None:
        if fail.is_set():
            raise RuntimeError("broken")

    host.every("reconcile", 0.05, work)
    host.serve(Endpoint("health", "127.0.0.1", 0))
    seen: dict[str, Any] = {}

    def probe() -> None:
        base = f"http://127.0.0.1:{host.bound['health'][1]}"
        seen["healthz"] = _get(base + "/healthz")
        seen["ready"] = _get(base + "/readyz")
        fail.set()
        time.sleep(0.3)
        seen["unready"] = _get(base + "/readyz")
        seen["metrics"] = _get(base + "/metrics")
        host.request_stop()

    def on_step(step: HostStep) -> None:
        if "thread" not in seen and not host.not_ready():
            seen["thread"] = threading.Thread(target=probe)
            seen["thread"].start()

    code = host.run_sync(on_step=on_step, max_seconds=20)
    seen["thread"].join()
    assert code == 0
    assert seen["healthz"] == (200, "ok")
    assert seen["ready"] == (200, "ok")
    assert seen["unready"][0] == 503 and "RuntimeError: broken" in seen["unready"][1]
    status, text = seen["metrics"]
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    errors = families["katalyst_demo_reconcile_errors"].samples
    assert any(s.name.endswith("_total") and s.value >= 1 for s in errors)


def test_a_taken_port_is_reported_naming_the_server() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        host = ComponentHost("demo", clock=RealClock())
        host.every("reconcile", 1.0, lambda now: None)
        host.serve(Endpoint("metrics", "127.0.0.1", port))
        with pytest.raises(ServeError, match=f"metrics on 127.0.0.1:{port}"):
            host.run_sync()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_sigterm_finishes_the_tick_then_stops_within_a_bound() -> None:
    host = ComponentHost("demo", clock=RealClock())
    finished: list[float] = []
    stopped: list[float] = []

    def work(now: float) -> None:
        if not finished:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of the tick
            time.sleep(0.2)
        finished.append(now)

    host.every("reconcile", 60.0, work)
    host.serve(Endpoint("health", "127.0.0.1", 0))
    host.on_stop(lambda: stopped.append(time.monotonic()))
    began = time.monotonic()
    assert host.run_sync() == 0
    assert len(finished) == 1  # the tick in progress ran to its end, no other began
    assert stopped[0] - began < 5.0  # not the 60s period
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_run_needs_a_clock() -> None:
    with pytest.raises(RuntimeError, match="step"):
        asyncio.run(ComponentHost("demo").run())


def test_a_tick_stuck_past_the_bound_fails_liveness() -> None:
    host, clock = _virtual(0.0, stall_after_s=300.0)
    seen: list[str | None] = []

    def work(now: float) -> None:
        seen.append(host.alive())
        clock.advance(301.0)
        seen.append(host.alive())

    host.every("reconcile", 10.0, work)
    host.step(clock.now())
    assert seen[0] is None
    assert seen[1] is not None and "running for 301s" in seen[1]
    assert host.alive() is None  # the tick ended: alive again


def test_a_kick_runs_another_ticker_in_the_same_step_and_restarts_its_grid() -> None:
    host = ComponentHost("demo")
    runs: list[tuple[str, float]] = []
    host.every("slow", 5.0, lambda now: runs.append(("slow", now)))

    def fast(now: float) -> None:
        runs.append(("fast", now))
        if now == 1.5:
            assert host.kick("slow", now)

    host.every("fast", 0.5, fast)
    for i in range(13):
        host.step(i * 0.5)
    slow = [t for name, t in runs if name == "slow"]
    # 0 on its grid, 1.5 on the kick, then a whole period after the early run
    assert slow == [0.0, 1.5]
    host.step(6.0)
    assert [t for name, t in runs if name == "slow"] == [0.0, 1.5]
    host.step(6.5)
    assert [t for name, t in runs if name == "slow"] == [0.0, 1.5, 6.5]
    assert host.tickers[0].kicked == 1
    assert host.tickers[0].skipped == 0
    families = {f.name: f for f in text_string_to_metric_families(_exposition(host))}
    kicked = families["katalyst_demo_ticks_kicked"].samples
    assert [(s.labels["ticker"], s.value) for s in kicked if s.name.endswith("_total")] == [
        ("slow", 1.0)
    ]


@given(
    period=st.integers(1, 7),
    first=st.integers(0, 6),
    extras=st.sets(st.integers(0, 40), max_size=10),
)
def test_a_phased_ticker_runs_on_its_grid_plus_extra_runs_that_leave_the_grid(
    period: int, first: int, extras: set[int]
) -> None:
    # Replicas on one virtual clock (the simulator's agents): each on its own phase, with
    # extra runs (a new pod on the node) that do not move the grid.
    host = ComponentHost("demo")
    runs: list[float] = []
    host.every("reconcile", float(period), runs.append, first=float(first))
    for step in range(41):
        if step in extras:
            host.run_extra("reconcile", float(step))
        host.step(float(step))
    grid = {s for s in range(first, 41) if (s - first) % period == 0}
    assert runs == sorted(float(s) for s in grid | extras)
    assert host.tickers[0].skipped == 0 and host.tickers[0].kicked == 0


def test_an_extra_run_asked_after_the_step_ran_comes_at_the_next_step() -> None:
    host = ComponentHost("demo")
    runs: list[float] = []
    host.every("reconcile", 10.0, runs.append)
    host.step(0.0)
    assert host.run_extra("reconcile", 0.0)  # after this step's run: the next step runs it
    assert host.step(1.0).next_wake == 10.0  # the grid did not move
    assert not host.run_extra("reconcile", 10.0)  # due then anyway
    assert host.step(2.0).ran == ()
    host.step(10.0)
    assert runs == [0.0, 1.0, 10.0]
    with pytest.raises(ValueError, match="no ticker 'nope'"):
        host.run_extra("nope", 1.0)


def test_kicking_a_ticker_that_is_due_anyway_or_unknown() -> None:
    host = ComponentHost("demo")
    host.every("slow", 5.0, lambda now: None)
    assert not host.kick("slow", 0.0)  # has not run yet: due at once
    host.step(0.0)
    assert not host.kick("slow", 7.0)  # past its deadline already
    with pytest.raises(ValueError, match="no ticker 'nope'"):
        host.kick("nope", 1.0)


def _exposition(host: ComponentHost) -> str:
    from prometheus_client import generate_latest

    return generate_latest(host.registry).decode()
