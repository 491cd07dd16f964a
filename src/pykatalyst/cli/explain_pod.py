"""`katalyst explain pod`: how a pod's QoS was read, where it runs and why, what was done
to it, and, while it is Pending, why no node took it. A JSON-ready report; the keys are
listed in docs/explain.md."""

from __future__ import annotations

import dataclasses
from typing import Any

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.node_watch import admin_qos_from_cnc
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS, QoSProblem, inspect_pod_qos
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cli.explain_cluster import (
    EVENT_LIMIT,
    ExplainError,
    get_object,
    numa_zones,
    published_pools,
    recent,
)
from pykatalyst.cli.explain_dra import dra_json
from pykatalyst.cli.explain_events import FAILED_SCHEDULING, OUR_COMPONENTS, component_of
from pykatalyst.cli.explain_gpu import gpu_json, pairing_json
from pykatalyst.cli.explain_nic import nic_json, sriov_json
from pykatalyst.cli.explain_recommend import resource_recommends_json
from pykatalyst.cli.explain_vertical import vertical_json
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.topology.cpuset import CPUSet

# Events about a pod worth showing beside pykatalyst's own: the scheduler's verdicts.
SCHEDULING_REASONS = (FAILED_SCHEDULING, "Scheduled", "Preempted")


def split_key(key: str) -> tuple[str, str]:
    namespace, sep, name = key.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ExplainError(f"pod {key!r}: give it as NAMESPACE/NAME")
    return namespace, name


def explain_pod(
    cluster: Cluster, namespace: str, name: str, now: float, limit: int = EVENT_LIMIT
) -> JSON:
    pod = get_object(cluster, names.POD, name, namespace)
    view = Pod(pod)
    problems: list[str] = []
    qos, found = inspect_pod_qos(pod)
    events = pod_events(cluster, view, limit, problems)
    return {
        "pod": view.key,
        "uid": view.uid,
        "time": rfc3339(now),
        "phase": view.phase,
        "deleting": view.deletion_timestamp,
        "node": view.node_name or None,
        "qos": qos_json(qos, found, cpu_burst_json(cluster, view, qos, problems)),
        "placement": placement_json(cluster, view, qos, found, problems),
        "resource_recommends": resource_recommends_json(cluster, view, problems),
        "gpu": (gpu := gpu_json(cluster, view, problems)),
        "nic": nic_json(cluster, view, problems, events),
        "sriov": (sriov := sriov_json(cluster, view, problems)),
        "pairing": pairing_json(view, gpu, sriov),
        "dra": dra_json(cluster, view, problems),
        "events": events,
        "scheduling": scheduling_json(view, events),
        "vertical": vertical_json(cluster, pod, now, problems),
        "problems": problems,
    }


def _problem_json(p: QoSProblem) -> JSON:
    return {
        "severity": p.severity,
        "field": p.field,
        "value": p.value,
        "accepted": p.accepted,
        "message": p.message,
        "text": str(p),
    }


def qos_json(qos: PodQoS, problems: list[QoSProblem], cpu_burst: JSON) -> JSON:
    """As `katalyst validate` reads it; `level` and `enhancements` mean nothing when
    `valid` is false (the agent then leaves the pod as the kubelet placed it); `cpu_burst`
    is `cpu_burst_json`'s."""
    errors = [_problem_json(p) for p in problems if p.severity == "error"]
    return {
        "valid": not errors,
        "level": qos.level,
        "enhancements": qos.enhancements.as_dict(),
        "cpu_burst": cpu_burst,
        "k8s_qos_class": qos.k8s_qos_class,
        "errors": errors,
        "warnings": [_problem_json(p) for p in problems if p.severity != "error"],
    }


BURST_DEFAULTS = "Katalyst's defaults (no AdminQoSConfiguration)"


def cpu_burst_json(cluster: Cluster, pod: Pod, qos: PodQoS, problems: list[str]) -> JSON:
    """What Katalyst's cpu plugin would burst the pod by (pykatalyst writes no cpu burst,
    as Katalyst's default --enable-cpu-burst=false): the pod's cpu_enhancement, else the
    cpu burst defaults of the AdminQoSConfiguration in force on its node (the same
    overlay as the agent's, `AgentConfig.with_admin_qos`); a shared pod's default burst
    depends on whether it is the node's only active shared pod."""
    cpu, source, shared = AgentConfig().cpu, BURST_DEFAULTS, 0
    node = pod.node_name
    if node:
        warnings: list[str] = []
        ref = admin_qos_from_cnc(cluster, node, warnings)
        problems.extend(warnings)
        if ref is not None:
            ns, _, name = ref.partition("/")
            try:
                aqc = AdminQoSConfiguration.from_json(
                    cluster.get(names.ADMIN_QOS_CONFIGURATION, name, ns)
                )
                cpu, source = AgentConfig().with_admin_qos(aqc).cpu, ref
            except (ApiError, ValueError) as exc:
                problems.append(f"cpu burst: AdminQoSConfiguration {ref} unusable: {exc}")
        shared = _active_shared_pods(cluster, node, problems)
    return {**dataclasses.asdict(cpu.cpu_burst(qos, shared)), "source": source}


def _active_shared_pods(cluster: Cluster, node: str, problems: list[str]) -> int:
    try:
        pods = cluster.list(names.POD, None, field_selector=f"spec.nodeName={node}").items
    except ApiError as exc:
        problems.append(f"cannot list the pods of node {node}: {exc}")
        return 0
    active = (p for p in pods if Pod(p).phase not in ("Succeeded", "Failed"))
    return sum(1 for p in active if inspect_pod_qos(p)[0].is_shared)


def placement_json(
    cluster: Cluster, pod: Pod, qos: PodQoS, found: list[QoSProblem], problems: list[str]
) -> JSON | None:
    """The pool and cpus the node's agent gave the pod (from its CNR), and why."""
    node = pod.node_name
    if not node:
        return None
    out: JSON = {
        "node": node,
        "pool": None,
        "cpuset": None,
        "pool_cpuset": None,
        "ramping_up": False,
        "note": None,
        "reclaim": None,
        "numa": [],
        "why": None,
    }
    try:
        cnr = cluster.get(names.CUSTOM_NODE_RESOURCE, node)
    except NotFound:
        problems.append(f"node {node} has no {names.CUSTOM_NODE_RESOURCE.kind}: no agent reports")
        return out
    except ApiError as exc:
        problems.append(f"cannot read the {names.CUSTOM_NODE_RESOURCE.kind} {node}: {exc}")
        return out
    pools, pods, error = published_pools(cnr)
    if error:
        problems.append(error)
    entry = next((p for p in pods if p.get("uid") == pod.uid), None)
    numa = _numa_allocations(cnr, pod.uid, problems)
    if entry is None:
        if pools:
            out["why"] = "the agent has not placed this pod (yet)"
        elif error is None:
            out["why"] = (
                f"the agent on {node} publishes no {names.CPU_POOLS_ANNOTATION} annotation "
                "(an older version?)"
            )
        out["numa"] = numa
        return out
    pool = str(entry.get("pool", ""))
    out.update(
        pool=pool,
        cpuset=entry.get("cpuset"),
        pool_cpuset=pools.get(pool),
        ramping_up=bool(entry.get("ramping_up", False)),
        note=entry.get("note") or None,
        reclaim=reclaim_rule(pod, entry),
        numa=numa,
        why=placement_why(qos, found, entry, pools.get(pool)),
    )
    return out


def reclaim_rule(pod: Pod, entry: dict[str, Any]) -> str | None:
    """Whether the pod lends its idle capacity to reclaimed pods, as the agent decided
    (None for a pod without an SPD, which lends by default)."""
    off = entry.get("reclaim_off")
    if off:
        return f"lends nothing to reclaimed pods (counted at its requests): {off}"
    spd_name = pod.annotations.get(names.SPD_NAME_ANNOTATION)
    if spd_name:
        return f"lends its idle capacity: its SPD {spd_name} is neither Poor nor baseline"
    return None


def _numa_allocations(cnr: JSON, uid: str, problems: list[str]) -> list[JSON]:
    return [
        {"numa": z.name, "requests": {k: str(v) for k, v in sorted(r.items())}}
        for z in numa_zones(cnr, problems)
        for consumer, r in z.allocations
        if consumer.rsplit("/", 1)[-1] == uid
    ]


def placement_why(
    qos: PodQoS, found: list[QoSProblem], entry: dict[str, Any], pool_cpuset: str | None
) -> str:
    """The rule that put the pod where the agent says it is."""
    if any(p.severity == "error" for p in found) or entry.get("note"):
        return str(entry.get("note") or "invalid QoS: left as the kubelet placed it")
    pool = str(entry.get("pool", ""))
    if entry.get("ramping_up"):
        return (
            "ramping up: runs on every pooled cpu until cpu.ramp_up_period_s after its start, "
            f"then on pool {pool}"
        )
    e = qos.enhancements
    level = qos.level
    if level == names.QOS_DEDICATED_CORES:
        how = "exclusive cpus"
        if e.numa_binding:
            how += " on its NUMA node(s), memory bound there (numa_binding)"
        if e.numa_exclusive:
            how += ", NUMA node(s) of its own (numa_exclusive)"
        return f"{level}: {how}"
    if level == names.QOS_RECLAIMED_CORES:
        extra = ""
        if pool_cpuset is not None and entry.get("cpuset") != pool_cpuset:
            extra = " and the share pools' cpus (cpu.overlap_reclaim_with_share), at SCHED_IDLE"
        size = _size(pool_cpuset)
        now = f" ({size} cpus now)" if size is not None else ""
        return (
            f"{level}: the reclaim pool{now}{extra}; the agent shrinks that pool when shared "
            "pods need the cpus, which throttles reclaimed pods before any eviction"
        )
    if level == names.QOS_SYSTEM_CORES:
        if e.cpuset_pool:
            return f"{level}: the pools named by cpuset_pool={e.cpuset_pool}"
        return f"{level}: every cpu but the dedicated ones (no cpuset_pool)"
    chosen = f"cpuset_pool={e.cpuset_pool}" if e.cpuset_pool else "the default pool"
    if e.numa_binding:
        return f"{level}: pool {pool}, {chosen} on one NUMA node (numa_binding)"
    return f"{level}: pool {pool} ({chosen})"


def _size(cpuset: str | None) -> int | None:
    try:
        return None if cpuset is None else len(CPUSet.parse(cpuset))
    except ValueError:
        return None


def pod_events(cluster: Cluster, pod: Pod, limit: int, problems: list[str]) -> list[JSON]:
    """pykatalyst's Events about the pod (evictions, invalid QoS, failed placements...)
    and the scheduler's verdicts; Events of an earlier pod of the same name are left out."""
    selector = f"involvedObject.kind={names.POD.kind},involvedObject.name={pod.name}"
    try:
        items = cluster.list(names.EVENT, pod.namespace, field_selector=selector).items
    except ApiError as exc:
        problems.append(f"cannot list Events: {exc}")
        return []
    mine = []
    for ev in items:
        uid = (ev.get("involvedObject") or {}).get("uid")
        if uid and pod.uid and uid != pod.uid:
            continue
        if component_of(ev) in OUR_COMPONENTS or ev.get("reason") in SCHEDULING_REASONS:
            mine.append(ev)
    return recent(mine, limit)


def scheduling_json(pod: Pod, events: list[JSON]) -> JSON | None:
    """While the pod waits for a node: the scheduler's last "0/N nodes are available"."""
    if pod.node_name or pod.phase not in ("", "Pending"):
        return None
    failed = [e for e in events if e["reason"] == FAILED_SCHEDULING]
    if not failed:
        return {
            "pending": True,
            "scheduler": pod.scheduler_name,
            "message": None,
            "why": (
                f"no {FAILED_SCHEDULING} Event: scheduler {pod.scheduler_name!r} has not "
                "tried the pod yet, or is not running, or its Events expired"
            ),
        }
    last = failed[-1]
    return {
        "pending": True,
        "scheduler": pod.scheduler_name,
        "message": last["message"],
        "time": last["time"],
        "count": last["count"],
        "component": last["component"],
    }
