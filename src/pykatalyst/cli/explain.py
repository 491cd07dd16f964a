"""`katalyst explain`: why a pod was evicted (or a node tainted), from the decision records.

Two sources, usable together:
- `--records FILE`: the JSON-lines records an agent or the backstop controller writes
  (their `records_path`), with every term: signal, observed value, threshold, window,
  grace period and the ranking that chose the victim;
- `--events FILE`: Kubernetes Events as JSON (`kubectl get events -o json`), for a
  cluster where only the Events are at hand; their messages carry the same explanation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from pykatalyst.api import names
from pykatalyst.api.records import DecisionRecord, filter_records, read_records
from pykatalyst.cli.output import OutputFormat, print_json, print_message, print_table
from pykatalyst.cluster.memory import parse_rfc3339, rfc3339

# Event reasons written by the eviction manager and the backstop.
EXPLAINED_REASONS = {
    names.EVENT_REASON_EVICT_CREATED: "eviction",
    names.EVENT_REASON_EVICT_SUCCEEDED: "eviction-succeeded",
    names.EVENT_REASON_EVICT_FAILED: "eviction-failed",
    "ConditionSet": "condition-set",
    "ConditionCleared": "condition-cleared",
    "AgentSilent": "backstop-taint",
    "AgentBack": "backstop-untaint",
}
PLUGIN_MARK = "from plugin: "


def records_from_events(path: Path) -> list[DecisionRecord]:
    """Records rebuilt from Events (a List, a JSON array, one Event, or JSON lines)."""
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = json.loads(text)
        items = data.get("items", [data]) if isinstance(data, dict) else data
    except json.JSONDecodeError:
        try:
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: neither JSON nor JSON lines: {exc.msg}") from None
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a list of Events")
    out = []
    for ev in items:
        if not isinstance(ev, dict):
            continue
        reason = str(ev.get("reason", ""))
        kind = EXPLAINED_REASONS.get(reason)
        source = ev.get("source") or {}
        component = str(source.get("component", ""))
        if kind is None or component not in (names.AGENT_COMPONENT, names.CONTROLLER_COMPONENT):
            continue
        obj = ev.get("involvedObject") or {}
        message = str(ev.get("message", ""))
        if component == names.CONTROLLER_COMPONENT and kind == "eviction":
            kind = "backstop-eviction"
        plugin = "backstop" if kind.startswith("backstop") else ""
        if PLUGIN_MARK in message:
            plugin = message.split(PLUGIN_MARK, 1)[1].split(".", 1)[0].split()[0]
        elif " set by " in message:
            plugin = message.split(" set by ", 1)[1].split(":", 1)[0]
        stamp = ev.get("lastTimestamp") or ev.get("firstTimestamp") or ev.get("eventTime")
        try:
            when = parse_rfc3339(str(stamp)) if stamp else 0.0
        except ValueError:
            when = 0.0
        obj_kind = str(obj.get("kind", ""))
        key = str(obj.get("name", ""))
        if obj_kind == names.POD.kind and obj.get("namespace"):
            key = f"{obj['namespace']}/{key}"
        node = str(source.get("host", "")) or (key if obj_kind == names.NODE.kind else "")
        out.append(
            DecisionRecord(
                time=when,
                node=node,
                kind=kind,
                plugin=plugin,
                reason=reason,
                message=message,
                object_kind=obj_kind,
                object_key=key,
                object_uid=str(obj.get("uid", "")),
            )
        )
    return out


def _value(r: DecisionRecord) -> str:
    if r.observed is None:
        return ""
    threshold = "" if r.threshold is None else f" {r.operator} {r.threshold:g}"
    return f"{r.observed:g}{threshold} {r.unit}".strip()


def explain(
    records: list[Path] = typer.Option(  # noqa: B008 - typer reads options from defaults
        [], "--records", help="JSON-lines decision records written by an agent or controller."
    ),
    events: list[Path] = typer.Option(  # noqa: B008
        [], "--events", help="Events as JSON, e.g. from `kubectl get events -o json`."
    ),
    pod: str | None = typer.Option(None, "--pod", help="Only this pod (namespace/name or uid)."),
    node: str | None = typer.Option(None, "--node", help="Only this node."),
    plugin: str | None = typer.Option(None, "--plugin", help="Only this eviction plugin."),
    output: OutputFormat = typer.Option(  # noqa: B008
        OutputFormat.TABLE, "--output", "-o", help="table or json."
    ),
) -> None:
    """Show why pods were evicted and nodes tainted.

    For each decision: plugin, signal, value, threshold, window and the ranking behind
    each victim."""
    if not records and not events:
        print_message("error: give --records FILE and/or --events FILE", stderr=True)
        raise typer.Exit(code=2)
    found: list[DecisionRecord] = []
    try:
        for path in records:
            found.extend(read_records(path))
        for path in events:
            found.extend(records_from_events(path))
    except OSError as exc:
        print_message(f"error: cannot read {exc.filename}: {exc.strerror}", stderr=True)
        raise typer.Exit(code=1) from None
    except ValueError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None
    chosen = filter_records(found, pod=pod, node=node, plugin=plugin)
    chosen.sort(key=lambda r: r.time)
    if output == OutputFormat.JSON:
        print_json([r.to_json() for r in chosen])
        return
    if not chosen:
        print_message("no matching eviction or condition records")
        return
    rows = [
        [
            rfc3339(r.time),
            r.node,
            r.kind + (" (dry run)" if r.dry_run else ""),
            r.plugin,
            f"{r.object_kind}/{r.object_key}",
            _value(r),
            r.message,
        ]
        for r in chosen
    ]
    print_table(
        "Eviction and condition records",
        ["time", "node", "what", "plugin", "object", "value", "why"],
        rows,
    )


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
