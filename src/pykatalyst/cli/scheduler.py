"""`katalyst scheduler`: schedule pending pods, or serve kube-scheduler's extender protocol."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from pathlib import Path
from typing import Any

import typer

from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    cluster_from_options,
)
from pykatalyst.cli.output import print_message
from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.scheduler.config import (
    SchedulerConfig,
    SchedulerConfigError,
    default_config,
    load_config,
)
from pykatalyst.scheduler.scheduler import ScheduleOutcome, Scheduler

log = logging.getLogger("pykatalyst.scheduler")


def _load(config: Path | None) -> SchedulerConfig:
    try:
        return load_config(config) if config is not None else default_config()
    except SchedulerConfigError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None


def _report(outcome: ScheduleOutcome) -> None:
    if outcome.node is not None:
        numa = f" numa {list(outcome.numa.numa_ids)}" if outcome.numa is not None else ""
        print_message(f"bound {outcome.pod} -> {outcome.node}{numa}")
    else:
        print_message(f"pending {outcome.pod}: {outcome.message or outcome.reason}")


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        print_message(
            f"error: --listen {listen!r}: expected HOST:PORT (e.g. 0.0.0.0:8888)", stderr=True
        )
        raise typer.Exit(code=2)
    return host or "0.0.0.0", int(port)


async def _serve(
    sched: Scheduler,
    clock: Clock,
    *,
    schedule: bool,
    listen: str | None,
    profile: str | None,
    interval: float,
    max_seconds: float | None,
) -> None:
    runner: Any = None
    if listen is not None:
        from aiohttp import web

        from pykatalyst.scheduler.extender import ExtenderService, make_app

        try:
            service = ExtenderService(sched, profile)
        except ValueError as exc:
            print_message(f"error: {exc}", stderr=True)
            raise typer.Exit(code=1) from None
        host, port = _parse_listen(listen)
        runner = web.AppRunner(make_app(service, clock.now))
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        print_message(f"extender listening on http://{host}:{port} (filter, prioritize, bind)")
    start = clock.now()
    sched.sync(start)
    # The first sync built the long-lived caches: keep the collector from re-walking them.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off the main thread
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        while not stop.is_set():
            now = clock.now()
            if schedule:
                for outcome in sched.run_until_idle(now):
                    _report(outcome)
            else:
                sched.sync(now)
            if max_seconds is not None and clock.now() - start >= max_seconds:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
    finally:
        if runner is not None:
            await runner.cleanup()


def scheduler(
    config: Path | None = typer.Option(  # noqa: B008 - typer reads options from defaults
        None,
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration (v1beta3 or v1), bare or inside a ConfigMap.",
    ),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved profiles and exit."
    ),
    extender: bool = typer.Option(
        False, "--extender", help="Serve the kube-scheduler extender protocol instead."
    ),
    listen: str = typer.Option(
        "0.0.0.0:8888", "--listen", metavar="HOST:PORT", help="Where the extender listens."
    ),
    profile: str | None = typer.Option(
        None, "--profile", help="The profile (schedulerName) the extender uses."
    ),
    interval: float = typer.Option(0.1, "--interval", help="Seconds between scheduling loops."),
    max_seconds: float | None = typer.Option(
        None, "--max-seconds", help="Stop after this many seconds (default: run until stopped)."
    ),
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Place pending pods with Katalyst's QoS- and NUMA-aware plugins.

    Schedules every pod whose schedulerName matches a profile, binding it through
    pods/binding."""
    cfg = _load(config)
    if print_config:
        print_message(cfg.to_yaml().rstrip("\n"))
        return
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    clock = RealClock()
    cluster = cluster_from_options(kubeconfig, in_cluster, context, clock)
    if kubeconfig is None and not in_cluster:
        print_message(
            "note: no --kubeconfig/--in-cluster: running against the embedded in-memory "
            "cluster, which starts empty",
            stderr=True,
        )
    sched = Scheduler(cluster, cfg)
    names_ = ", ".join(p.scheduler_name for p in cfg.profiles)
    mode = "extender" if extender else f"scheduling pods of {names_}"
    print_message(f"katalyst scheduler: {mode}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            _serve(
                sched,
                clock,
                schedule=not extender,
                listen=listen if extender else None,
                profile=profile,
                interval=interval,
                max_seconds=max_seconds,
            )
        )


def register(app: typer.Typer) -> None:
    app.command(name="scheduler")(scheduler)
