"""`katalyst explain`: why the system did what it did, from a cluster or from files.

- `katalyst explain node N` and `katalyst explain pod NS/NAME` read a running cluster
  (`--kubeconfig PATH`, `--in-cluster`, or kubectl's default kubeconfig): the node's
  CustomNodeResource, configuration, taints and Events; the pod's QoS, cpus and Events
  (explain_cluster.py, explain_pod.py).
- `katalyst explain --records FILE --events FILE` reads files: the JSON-lines decision
  records an agent or the backstop writes (`records_path`), with every term (signal,
  observed value, threshold, window, grace period, the ranking that chose the victim),
  and Kubernetes Events as JSON (`kubectl get events -o json`).

One typer group holds both: the file options belong to the group itself, which runs
when no subcommand is given, so the file form keeps working as it always did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from pykatalyst.api.records import DecisionRecord, filter_records, read_records
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cli.explain_cluster import EVENT_LIMIT, ExplainError, explain_node
from pykatalyst.cli.explain_events import records_from_event_items
from pykatalyst.cli.explain_pod import explain_pod, split_key
from pykatalyst.cli.explain_render import print_node, print_pod
from pykatalyst.cli.kubeopts import ContextArg, InClusterArg, KubeconfigArg, cluster_from_options
from pykatalyst.cli.output import OutputFormat, print_json, print_message, print_table
from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.cluster.protocol import ApiError, Cluster

FILE_OPTIONS_HELP = "File form (no subcommand): "
EXPLAIN_HELP = (
    "Show why pods were placed, evicted or left pending, and what a node publishes.\n\n"
    "On a cluster: `katalyst explain node NAME` and `katalyst explain pod NAMESPACE/NAME` "
    "(each with --kubeconfig PATH or --in-cluster; see their --help).\n\n"
    "From files, with no subcommand: `katalyst explain --records FILE --events FILE`, each "
    "eviction or condition with its plugin, signal, value, threshold, window and the "
    "ranking behind each victim.\n\n"
    "Both forms live under this one command: the file options belong to it and apply only "
    "when no subcommand is given, so scripts written for the file form keep working."
)
NODE_HELP = (
    "Explain a node: reclaimed capacity and its terms, NUMA zones, cpu pools, agent health, "
    "taints, configuration, Events.\n\n"
    "Read from the node's CustomNodeResource (as its agent wrote it), its CustomNodeConfig "
    "and the AdminQoSConfiguration that names, and the Events about the node or written "
    "from it by pykatalyst. Exits 1 when the node or its CustomNodeResource is missing."
)
POD_HELP = (
    "Explain a pod: its QoS, the node, pool and cpus it got and why, its Events, and why "
    "it is Pending.\n\n"
    "The QoS is read as `katalyst validate` reads it; the pool and cpus come from the "
    "node's CustomNodeResource; evictions come with their plugin; a Pending pod shows the "
    "scheduler's last FailedScheduling reasons (0/N nodes are available: ...). Exits 1 "
    "when the pod is missing."
)


@dataclass(frozen=True, slots=True)
class ExplainSource:
    """The cluster and clock `explain node|pod` read; given as the typer context's `obj`
    (tests pass one to CliRunner.invoke), else made from the cluster options."""

    cluster: Cluster
    clock: Clock


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
    return records_from_event_items(items)


def _value(r: DecisionRecord) -> str:
    if r.observed is None:
        return ""
    threshold = "" if r.threshold is None else f" {r.operator} {r.threshold:g}"
    return f"{r.observed:g}{threshold} {r.unit}".strip()


def explain(
    ctx: typer.Context,
    records: list[Path] = typer.Option(  # noqa: B008 - typer reads options from defaults
        [],
        "--records",
        help=FILE_OPTIONS_HELP + "JSON-lines decision records written by an agent or controller.",
    ),
    events: list[Path] = typer.Option(  # noqa: B008
        [],
        "--events",
        help=FILE_OPTIONS_HELP + "Events as JSON, e.g. from `kubectl get events -o json`.",
    ),
    pod: str | None = typer.Option(
        None, "--pod", help=FILE_OPTIONS_HELP + "only this pod (namespace/name or uid)."
    ),
    node: str | None = typer.Option(None, "--node", help=FILE_OPTIONS_HELP + "only this node."),
    plugin: str | None = typer.Option(
        None, "--plugin", help=FILE_OPTIONS_HELP + "only this eviction plugin."
    ),
    output: OutputFormat = typer.Option(  # noqa: B008
        OutputFormat.TABLE, "--output", "-o", help=FILE_OPTIONS_HELP + "table or json."
    ),
) -> None:
    """The group's own run: the file form, when no subcommand is given (EXPLAIN_HELP)."""
    if ctx.invoked_subcommand is not None:
        if records or events or pod or node or plugin:
            print_message(
                "error: --records/--events/--pod/--node/--plugin are the file form's options: "
                f"give them without the {ctx.invoked_subcommand!r} subcommand",
                stderr=True,
            )
            raise typer.Exit(code=2)
        return
    if not records and not events:
        print_message(
            "error: give --records FILE and/or --events FILE, or explain a live object: "
            "`katalyst explain node NAME` / `katalyst explain pod NAMESPACE/NAME`",
            stderr=True,
        )
        raise typer.Exit(code=2)
    explain_files(records, events, pod, node, plugin, output)


def explain_files(
    records: list[Path],
    events: list[Path],
    pod: str | None,
    node: str | None,
    plugin: str | None,
    output: OutputFormat,
) -> None:
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


def _source(
    ctx: typer.Context, kubeconfig: Path | None, in_cluster: bool, context: str | None
) -> ExplainSource:
    if isinstance(ctx.obj, ExplainSource):
        return ctx.obj
    clock = RealClock()
    return ExplainSource(cluster_from_options(kubeconfig, in_cluster, context, clock), clock)


OutputArg = Annotated[
    OutputFormat, typer.Option("--output", "-o", help="table or json (keys: docs/explain.md).")
]
LimitArg = Annotated[
    int, typer.Option("--events-limit", min=0, help="Show this many recent Events (0: all).")
]


def explain_node_command(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NODE", help="The node's name."),
    kubeconfig: KubeconfigArg = None,
    in_cluster: InClusterArg = False,
    context: ContextArg = None,
    output: OutputArg = OutputFormat.TABLE,
    limit: LimitArg = EVENT_LIMIT,
) -> None:
    """`katalyst explain node NAME` (NODE_HELP)."""
    src = _source(ctx, kubeconfig, in_cluster, context)
    try:
        report = explain_node(src.cluster, name, src.clock.now(), limit)
    except (ExplainError, ApiError) as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None
    if output == OutputFormat.JSON:
        print_json(report)
    else:
        print_node(report)


def explain_pod_command(
    ctx: typer.Context,
    key: str = typer.Argument(..., metavar="NAMESPACE/NAME", help="The pod."),
    kubeconfig: KubeconfigArg = None,
    in_cluster: InClusterArg = False,
    context: ContextArg = None,
    output: OutputArg = OutputFormat.TABLE,
    limit: LimitArg = EVENT_LIMIT,
) -> None:
    """`katalyst explain pod NAMESPACE/NAME` (POD_HELP)."""
    src = _source(ctx, kubeconfig, in_cluster, context)
    try:
        namespace, name = split_key(key)
        report = explain_pod(src.cluster, namespace, name, src.clock.now(), limit)
    except (ExplainError, ApiError) as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None
    if output == OutputFormat.JSON:
        print_json(report)
    else:
        print_pod(report)


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="explain", invoke_without_command=True, pretty_exceptions_enable=False)
    group.callback(help=EXPLAIN_HELP)(explain)
    group.command("node", help=NODE_HELP)(explain_node_command)
    group.command("pod", help=POD_HELP)(explain_pod_command)
    app.add_typer(group, name="explain")
