"""`katalyst recommend`: what pykatalyst's and Katalyst's recommenders would set, offline."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from pykatalyst.cli.conventions import DURATION, old_option, parse_duration
from pykatalyst.cli.output import OutputFormat, print_json, print_message, print_table
from pykatalyst.recommend import (
    RecommendationNotReady,
    UsageSeries,
    get_recommender,
    recommender_names,
)
from pykatalyst.recommend.prometheus import PrometheusClient, PrometheusError, read_workload_usage
from pykatalyst.recommend.usage_csv import UsageFileError, read_usage_csv

DAY = 86400.0


def _row(workload: str, container: str, series: UsageSeries, name: str, now: float) -> Any:
    base: dict[str, Any] = {"workload": workload, "container": container}
    try:
        rec = get_recommender(name).recommend(series, now)
    except RecommendationNotReady as error:
        return base | {
            "cpu_request": None,
            "memory_request": None,
            "cpu_limit": None,
            "memory_limit": None,
            "terms": {},
            "not_ready": {"reason": error.reason, "message": error.message},
        }
    data = rec.to_json()
    return (
        base
        | {k: data[k] for k in ("cpu_request", "memory_request", "cpu_limit")}
        | {
            "memory_limit": data["memory_limit"],
            "terms": data["terms"],
        }
    )


def _fmt_cpu(value: float | None) -> str:
    return "-" if value is None else f"{round(value * 1000)}m"


def _fmt_mem(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024 / 1024:.0f}Mi"


def _why(row: dict[str, Any]) -> str:
    if "not_ready" in row:
        return f"not ready: {row['not_ready']['message']}"
    parts = []
    for resource, terms in row["terms"].items():
        model = terms.get("model") or (
            f"p{100 * terms['percentile']:g} half-life {terms['half_life_hours']:g}h"
            f" +{100 * terms['margin']:g}%"
        )
        text = f"{resource}: {model}, {terms['samples']} samples over {terms['span_hours']:.1f}h"
        if terms.get("oom_bump"):
            text += ", OOM bump"
        for note in terms.get("notes", []):
            text += f"; {note}"
        parts.append(text)
    return " | ".join(parts)


def _print(rows: list[dict[str, Any]], output: OutputFormat, name: str) -> None:
    if output == OutputFormat.JSON:
        print_json({"recommender": name, "recommendations": rows})
        return
    table = [
        [
            r["workload"],
            r["container"],
            _fmt_cpu(r["cpu_request"]),
            _fmt_mem(r["memory_request"]),
            _fmt_cpu(r["cpu_limit"]),
            _fmt_mem(r["memory_limit"]),
            _why(r),
        ]
        for r in rows
    ]
    columns = ["workload", "container", "cpu req", "mem req", "cpu lim", "mem lim", "why"]
    print_table(f"recommendations ({name})", columns, table)


def _history_s(history: str, old_days: float | None) -> float:
    """Seconds of usage history to read: `--history`, or the old `--history-days`."""
    if old_days is None:
        seconds, option = parse_duration(history, "--history"), "--history"
    else:
        seconds, option = old_days * DAY, "--history-days"
    if not 0 < seconds < math.inf:
        print_message(f"error: {option}: accepted: a duration above 0, e.g. 192h", stderr=True)
        raise typer.Exit(2)
    return seconds


def recommend(
    usage: Path | None = typer.Option(  # noqa: B008
        None, "--usage", help="Usage CSV (gzip accepted): workload,container,timestamp,cpu,memory."
    ),
    recommender: str = typer.Option(
        "pykatalyst", "--recommender", help="pykatalyst, or katalyst (ResourceRecommend's rule)."
    ),
    output: OutputFormat = typer.Option(  # noqa: B008
        OutputFormat.TABLE, "--output", "-o", help="table, or json for scripts."
    ),
    at: float | None = typer.Option(
        None, "--at", help="Recommend as of this Unix time (only samples before it count)."
    ),
    from_prometheus: str | None = typer.Option(
        None, "--from-prometheus", help="Prometheus URL to read the workload's usage from."
    ),
    namespace: str = typer.Option("default", "--namespace", help="With --from-prometheus."),
    workload: str | None = typer.Option(None, "--workload", help="With --from-prometheus."),
    kind: str = typer.Option("Deployment", "--kind", help="The workload's kind (pod pattern)."),
    history: str = typer.Option(
        "192h",
        "--history",
        metavar=DURATION,
        help="With --from-prometheus: how much usage history to read, e.g. 192h (8 days).",
    ),
    old_history_days: Annotated[float | None, old_option("recommend", "--history-days")] = None,
) -> None:
    """Print the cpu and memory requests (and limits) a recommender would set, and why."""
    try:
        get_recommender(recommender)
    except ValueError as error:
        print_message(f"error: --recommender: {error}", stderr=True)
        raise typer.Exit(2) from None
    history_s = _history_s(history, old_history_days)
    if (usage is None) == (from_prometheus is None):
        print_message(
            "error: give exactly one of --usage FILE or --from-prometheus URL", stderr=True
        )
        raise typer.Exit(2)
    if usage is not None:
        if not usage.is_file():
            print_message(f"error: --usage: {usage} is not a readable file", stderr=True)
            raise typer.Exit(2)
        try:
            data = read_usage_csv(usage, at=at)
        except UsageFileError as error:
            print_message(f"error: {error}", stderr=True)
            raise typer.Exit(2) from None
        series = {key: s for key, s in data.items() if len(s)}
        newest = max((float(s.timestamps[-1]) for s in series.values()), default=0.0)
        now = at if at is not None else newest
    else:
        if not workload:
            print_message("error: --from-prometheus needs --workload NAME", stderr=True)
            raise typer.Exit(2)
        now = at if at is not None else time.time()
        client = PrometheusClient(from_prometheus or "")
        try:
            found = read_workload_usage(
                client, namespace, workload, now - history_s, now, kind=kind
            )
        except PrometheusError as error:
            print_message(f"error: {error}", stderr=True)
            raise typer.Exit(1) from None
        series = {(workload, c): s for c, s in found.items()}
        if not series:
            print_message(f"error: Prometheus has no usage for {namespace}/{workload}", stderr=True)
            raise typer.Exit(1)
    rows = [_row(w, c, s, recommender, now) for (w, c), s in sorted(series.items())]
    _print(rows, output, recommender)


def register(app: typer.Typer) -> None:
    app.command("recommend", help=f"Recommend requests ({', '.join(recommender_names())}).")(
        recommend
    )
