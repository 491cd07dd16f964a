"""`katalyst agent`: run the node agent on this machine."""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from prometheus_client import CollectorRegistry

from pykatalyst.agent.config import AgentConfig, ConfigError, load_config, reclaim_setting
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.yamlio import load_yaml_all
from pykatalyst.cli.conventions import (
    LISTEN,
    NOT_SERVED,
    listen_from_old,
    listen_option,
    old_option,
)
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    EMBEDDED_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.output import OutputFormat, print_json, print_message
from pykatalyst.cluster.clock import RealClock
from pykatalyst.cluster.protocol import ApiError, Cluster, NotFound
from pykatalyst.runtime.agent import AGENT_PORT, build_agent, run_agent
from pykatalyst.runtime.host import Endpoint, ServeError
from pykatalyst.topology.machine import CPUTopology

NO_CGROUP_NOTE = (
    "pods declared with --pods have no cgroups on this machine unless the kubelet runs "
    "them: their pools and cpusets are planned but nothing is written for them"
)


def _fail(message: str, code: int = 2) -> typer.Exit:
    print_message(message, stderr=True)
    return typer.Exit(code)


def load_pods(path: Path) -> list[dict[str, Any]]:
    """Pods from a YAML file: documents that are Pods, or Lists of them."""
    try:
        docs = load_yaml_all(path.read_text(), str(path))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    pods: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: document {i} is not an object")
        items = doc.get("items") if doc.get("kind") == "List" else [doc]
        for item in items or []:
            if not isinstance(item, dict) or item.get("kind", "Pod") != "Pod":
                kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
                raise ValueError(f"{path}: document {i} is a {kind}, expected Pod")
            pods.append(item)
    return pods


def enforcing_view_problem(embedded: bool, pods: bool, dry_run: bool, host_root: bool) -> str:
    """Why an agent must not write this machine's cgroups from the view it was given ("":
    it may). Writing from a view that is not the kubelet's would treat every pod the
    kubelet runs here as unknown."""
    if dry_run or host_root:
        return ""
    if embedded:
        return (
            "--embedded without --dry-run would write this machine's cgroups from an "
            "in-memory cluster that knows none of the pods the kubelet runs here; add "
            "--dry-run, or run against the cluster this node belongs to"
        )
    if pods:
        return (
            "--pods without --dry-run would write this machine's cgroups for pods the "
            "kubelet does not run; add --dry-run (or --host-root DIR for a test tree)"
        )
    return ""


# Answers that say the API server is away or busy, not that the request is wrong: an
# agent started before its API server (a node rebooting with its control plane) waits.
UNAVAILABLE_CODES = frozenset({429, 500, 502, 503, 504})
START_RETRY_MAX_S = 30.0


def ensure_node(
    cluster: Cluster,
    node: str,
    topo: CPUTopology,
    create: bool,
    sleep: Callable[[float], None] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> None:
    """The Node must exist; `create`: make it from this machine's topology (a declared
    node: the embedded cluster, or pods given with --pods). With `sleep`, an API server
    that does not answer (or answers 429/5xx) is asked again, 1 s, 2 s, 4 s ... up to
    30 s apart, until it does; anything else it answers is final."""
    delay = 1.0
    while True:
        try:
            cluster.get(names.NODE, node)
            return
        except NotFound:
            if not create:
                raise ValueError(
                    f"node {node!r} is not in the cluster: --node names this node as its "
                    "kubelet registered it (default: $NODE_NAME, then the hostname)"
                ) from None
            break
        except ApiError as exc:
            if sleep is None or exc.code not in UNAVAILABLE_CODES:
                raise
            say(f"waiting for the API server ({exc}); asking again in {delay:g}s")
            sleep(delay)
            delay = min(delay * 2, START_RETRY_MAX_S)
    capacity = {
        names.RESOURCE_CPU: str(topo.num_cpus),
        names.RESOURCE_MEMORY: str(Quantity.from_bytes(topo.total_memory)),
        names.RESOURCE_PODS: "110",
    }
    cluster.create(
        names.NODE,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        },
    )


def create_pods(cluster: Cluster, node: str, pods: list[dict[str, Any]]) -> list[str]:
    created = []
    for pod in pods:
        meta = pod.setdefault("metadata", {})
        ns = meta.setdefault("namespace", names.DEFAULT_NAMESPACE)
        pod.setdefault("spec", {})["nodeName"] = node
        obj = cluster.create(names.POD, pod, ns)
        created.append(f"{ns}/{obj['metadata']['name']}")
    return created


def _summary(plan: AgentPlan) -> str:
    pools = ", ".join(f"{p.name}={p.cpuset} ({p.size})" for p in plan.pools)
    cpu = plan.reclaimed_cpu
    mem = plan.reclaimed_memory
    rep = "pending" if cpu.reported is None else f"{cpu.reported:.2f}"
    return (
        f"pools: {pools}; reclaimed cpu {cpu.value:.2f} cores (published: {rep}), "
        f"memory {mem.value / 2**30:.2f} GiB; pods {len(plan.pods)}; "
        f"enforce {plan.enforce.get('state')}"
    )


def agent(
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            envvar="NODE_NAME",
            help="This node's name (default: $NODE_NAME, then the hostname, as the kubelet's).",
        ),
    ] = None,
    pods: Annotated[
        Path | None,
        typer.Option(help="YAML file of pods to create on the embedded cluster, bound here."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Plan and log every cgroup write, write nothing.")
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="Run one reconcile and exit.")] = False,
    output: Annotated[
        OutputFormat,
        typer.Option("--output", "-o", help="table (a summary line) or json (the plan)."),
    ] = OutputFormat.TABLE,
    config: Annotated[
        Path | None, typer.Option("--config", help="Agent configuration (YAML).")
    ] = None,
    host_root: Annotated[
        Path | None,
        typer.Option("--host-root", help="Read sysfs, /proc and cgroups under this directory."),
    ] = None,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            metavar=LISTEN,
            help=f"Serve /healthz, /readyz and /metrics here (Katalyst's agent port is "
            f"{AGENT_PORT}; the DaemonSet passes the pod IP, where the kubelet's probes and "
            f"Prometheus reach it; 'none': not served). Not served with --once.",
        ),
    ] = f"127.0.0.1:{AGENT_PORT}",
    old_port: Annotated[int | None, old_option("agent", "--port")] = None,
    old_bind_address: Annotated[str | None, old_option("agent", "--bind-address")] = None,
    kubelet_config: Annotated[
        str | None,
        typer.Option(
            "--kubelet-config",
            help="The kubelet's config file, read for its cpu manager policy (default: the "
            "agent config's kubelet.config_path, /var/lib/kubelet/config.yaml; '': not read).",
        ),
    ] = None,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
    embedded: bool = EMBEDDED_OPTION,
) -> None:
    """Run the node agent: pools, cpusets, headroom and reporting for NODE.

    It refuses to write this machine's cgroups from a view that is not the kubelet's
    (--embedded or --pods without --dry-run)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    node = node or socket.gethostname().lower()
    cfg = _config(config, kubelet_config)
    from pykatalyst.agent.host.linux import LinuxHost

    clock = RealClock()
    cluster, source = daemon_cluster("agent", kubeconfig, in_cluster, context, embedded, clock)
    refusal = enforcing_view_problem(
        source.embedded, pods is not None, dry_run, host_root is not None
    )
    if refusal:
        raise _fail(f"error: {refusal}")
    try:
        host = LinuxHost(root=host_root) if host_root is not None else LinuxHost()
        topo = host.topology()
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read this machine: {exc}") from None
    notes = [reclaim_setting(cfg), *_prepare(cluster, node, topo, source.embedded, pods, once)]
    checkpoint = _checkpoint(cfg, dry_run)
    # One registry: the eviction stage's counters and the plans' figures on one /metrics.
    registry = CollectorRegistry()
    runner = build_agent(
        node,
        cluster,
        host,
        clock,
        cfg,
        checkpoint,
        dry_run=dry_run,
        registry=registry,
        config_path=config,
    )
    for note in notes:
        print_message(f"note: {note}", stderr=True)
    listen = listen_from_old(listen, old_bind_address, old_port) or NOT_SERVED
    address = listen_option(listen)
    endpoint = Endpoint("metrics", address[0], address[1]) if address is not None else None
    try:
        code = run_agent(
            runner,
            clock,
            period_s=cfg.period_s,
            once=once,
            show=lambda plan: _print_plan(plan, output, notes),
            endpoint=endpoint,
            registry=registry,
        )
    except ServeError as exc:
        raise _fail(f"--listen {listen}: {exc}") from None
    if code:
        raise typer.Exit(code)


def _prepare(
    cluster: Cluster,
    node: str,
    topo: CPUTopology,
    embedded: bool,
    pods: Path | None,
    once: bool,
) -> list[str]:
    """The Node made ready (created on the embedded cluster or with --pods, else waited
    for), and --pods' pods created; the notes to print."""
    try:
        ensure_node(
            cluster,
            node,
            topo,
            create=embedded or pods is not None,
            sleep=None if once else time.sleep,
            say=lambda line: print_message(f"note: {line}", stderr=True),
        )
        if pods is None:
            return []
        created = create_pods(cluster, node, load_pods(pods))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    except ApiError as exc:
        raise _fail(f"cluster: {exc}") from None
    return [f"created {len(created)} pods from {pods}: {', '.join(created)}", NO_CGROUP_NOTE]


def _config(config: Path | None, kubelet_config: str | None) -> AgentConfig:
    """The agent's configuration file read, --kubelet-config applied over it."""
    try:
        cfg: AgentConfig = load_config(config)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if kubelet_config is not None:
        kube = cfg.kubelet.model_copy(update={"config_path": kubelet_config})
        cfg = cfg.model_copy(update={"kubelet": kube})
    return cfg


def _checkpoint(cfg: AgentConfig, dry_run: bool) -> Path | None:
    """Where the cpu placement is checkpointed (its folder made), or None (a dry run)."""
    if not cfg.checkpoint_path or dry_run:
        return None
    checkpoint = Path(cfg.checkpoint_path)
    try:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(f"checkpoint_path {checkpoint}: {exc}") from None
    return checkpoint


def _print_plan(plan: AgentPlan, output: OutputFormat, notes: list[str]) -> None:
    if output is OutputFormat.JSON:
        data = plan.to_json()
        data["notes"] = notes
        print_json(data)
    else:
        print_message(_summary(plan))
        for w in plan.warnings:
            print_message(f"warning: {w}", stderr=True)
        for line in plan.enforce.get("would_write", []):
            print_message(f"would write {line}")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("agent")(agent)
