"""Tables for people from the reports of `katalyst explain node|pod` (JSON: `-o json`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykatalyst.api import names
from pykatalyst.cli.explain_dra import dra_rows
from pykatalyst.cli.explain_recommend import print_recommends
from pykatalyst.cli.explain_vertical import render_vertical
from pykatalyst.cli.output import print_message, print_table
from pykatalyst.cluster.protocol import JSON

MIB = 1 << 20
GIB = 1 << 30


def fmt(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.3f}".rstrip("0")
    if isinstance(value, list):
        return ", ".join(fmt(v) for v in value) or "-"
    return str(value)


def flatten(terms: Mapping[str, Any], prefix: str = "", *, in_bytes: bool = False) -> list[str]:
    """Nested terms as `a.b = value` lines, in key order. With `in_bytes` (the memory
    figure's terms), amounts of a MiB or more also show in GiB."""
    lines = []
    for key in sorted(terms):
        value = terms[key]
        if isinstance(value, Mapping):
            lines.extend(flatten(value, f"{prefix}{key}.", in_bytes=in_bytes))
            continue
        text = fmt(value)
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if in_bytes and is_number and value >= MIB:
            text += f" ({value / GIB:.2f}Gi)"
        lines.append(f"{prefix}{key} = {text}")
    return lines


def _resources(values: Mapping[str, str]) -> str:
    return "\n".join(f"{k}={v}" for k, v in values.items()) or "-"


def print_problems(problems: Sequence[str]) -> None:
    for problem in problems:
        print_message(f"warning: {problem}", stderr=True, style="yellow")


def print_events(title: str, events: Sequence[JSON]) -> None:
    if not events:
        print_message(f"{title}: none")
        return
    rows = [
        [
            fmt(e["time"]),
            e["type"],
            e["reason"] + (f" (x{e['count']})" if e["count"] > 1 else ""),
            e["object"],
            e["component"],
            (e["record"] or {}).get("plugin", "") or "",
            e["message"],
        ]
        for e in events
    ]
    print_table(title, ["time", "type", "reason", "object", "from", "plugin", "message"], rows)


# --- node -----------------------------------------------------------------------------------


def print_node(report: JSON) -> None:
    name = report["node"]
    _print_reclaimed(name, report["reclaimed"])
    _print_numa(report["numa"])
    if report["pools"]:
        rows = [
            [
                p["name"],
                p["cpuset"],
                fmt(p["size"]),
                "\n".join(p["pods"]) or "-",
                "\n".join(flatten(p["sizing"])) if p.get("sizing") else "-",
            ]
            for p in report["pools"]
        ]
        print_table(
            "CPU pools (as the agent set them)",
            ["pool", "cpuset", "cpus", "pods", "last sizing step"],
            rows,
        )
    _print_health(report["health"])
    _print_taints(report["taints"])
    _print_config(report["config"])
    print_events(f"Recent pykatalyst Events of node {name}", report["events"])
    print_problems(report["problems"])


def _print_reclaimed(node: str, reclaimed: JSON) -> None:
    rows = []
    for short in ("cpu", "memory"):
        r = reclaimed[short]
        terms = r["terms"]
        why = "\n".join(flatten(terms, in_bytes=short == "memory")) if terms else "-"
        rows.append([r["resource"], fmt(r["allocatable"]), fmt(r["capacity"]), why])
    title = f"Reclaimed capacity of node {node}"
    if reclaimed["terms_time"]:
        title += f" (terms of {reclaimed['terms_time']})"
    print_table(title, ["resource", "allocatable", "capacity", "terms"], rows)


def _print_numa(zones: Sequence[JSON]) -> None:
    if not zones:
        print_message("NUMA zones: none published")
        return
    rows = [
        [
            z["numa"],
            z["socket"],
            _resources(z["allocatable"]),
            _resources(z["capacity"]),
            "\n".join(f"{a['consumer']}: {_inline(a['requests'])}" for a in z["allocations"])
            or "-",
        ]
        for z in zones
    ]
    print_table("NUMA zones", ["numa", "socket", "allocatable", "capacity", "allocations"], rows)


def _inline(values: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _print_health(h: JSON) -> None:
    if h["age_s"] is None:
        verdict = "never heard from"
    elif h["silent"]:
        verdict = f"silent (>= {fmt(h['silent_after_s'])}s: the backstop taints the CNR)"
    else:
        verdict = "reporting"
    rows = [
        [
            h["condition"],
            fmt(h["status"]),
            fmt(h["reason"]),
            fmt(h["last_heartbeat"]),
            "-" if h["age_s"] is None else f"{fmt(h['age_s'])}s",
            verdict,
        ]
    ]
    print_table(
        "Agent health", ["condition", "status", "reason", "heartbeat", "age", "verdict"], rows
    )


def _print_taints(taints: JSON) -> None:
    rows = [
        [
            where,
            t["key"],
            t["effect"],
            t.get("qosLevel", "-"),
            t.get("value", "-"),
            t["set_by"] or "-",
        ]
        for where in ("node", "cnr")
        for t in taints[where]
    ]
    if not rows:
        print_message("Taints set by pykatalyst: none")
        return
    print_table(
        "Taints set by pykatalyst", ["on", "key", "effect", "qosLevel", "value", "set by"], rows
    )


def _print_config(cfg: JSON) -> None:
    rows = []
    cnc = cfg["cnc"]
    if cnc is None:
        rows.append([names.CUSTOM_NODE_CONFIG.kind, "-", cfg.get("note") or "not readable"])
    else:
        targets = "\n".join(
            f"{t['resource']}: {t['namespace']}/{t['name']}" for t in cnc["targets"]
        )
        rows.append([names.CUSTOM_NODE_CONFIG.kind, cnc["name"], targets or "no targets"])
    aqc = cfg["admin_qos"]
    if aqc is not None:
        state = aqc["error"] or "\n".join(flatten(aqc["spec"] or {})) or "empty spec: defaults"
        since = aqc.get("in_force_since")
        if not aqc["error"]:
            told = f"in force since {since}" if since else "not yet reported in force by the agent"
            state = f"{told}\n{state}"
        rows.append([names.ADMIN_QOS_CONFIGURATION.kind, aqc["name"], state])
    print_table("Configuration in force", ["kind", "name", "content"], rows)


# --- pod ------------------------------------------------------------------------------------


def _enhancements(values: Mapping[str, Any]) -> str:
    return "\n".join(f"{k}={fmt(v)}" for k, v in values.items()) or "-"


def _gpu_rows(gpu: JSON | None) -> list[list[str]]:
    if gpu is None:
        return []
    asked = "whole" if gpu["whole_cards"] else f"{gpu['memory_units_asked']} memory units over"
    rows = [["GPU asked", f"{asked} {gpu['cards_asked']} card(s)"]]
    if gpu["request_problem"]:
        rows.append(["GPU problem", gpu["request_problem"]])
    rows.append(["GPU cards", ", ".join(gpu["selection"]) or "-"])
    rows.append(["why these cards", fmt(gpu["why"])])
    for card in gpu["cards"]:
        seen = "reports this pod" if card["reports_this_pod"] else "does not list this pod yet"
        rows.append(
            [f"card {card['id']}", f"NUMA {card['numa']}, {_inline(card['allocatable'])}; {seen}"]
        )
    return rows


def _nic_rows(nic: JSON | None) -> list[list[str]]:
    if nic is None:
        return []
    rows = [
        ["bandwidth asked", f"{nic['mbps_asked']} Mbps"],
        ["NIC", fmt(nic["selection"])],
        ["why this NIC", fmt(nic["why"])],
    ]
    zone = nic["nic"]
    if zone is not None:
        seen = "reports this pod" if zone["reports_this_pod"] else "does not list this pod yet"
        where = f"socket {zone['socket']}, {_inline(zone['allocatable'])}"
        rows.append([f"NIC {zone['id']}", f"{where}; {seen}"])
    enforced = nic.get("enforced")
    if enforced is not None:
        rows.append(["egress class", f"{enforced['reason']}: {enforced['message']}"])
    return rows


def _sriov_rows(sriov: JSON | None) -> list[list[str]]:
    if sriov is None:
        return []
    rows = [["SR-IOV VF", fmt(sriov["selection"])], ["why this VF", fmt(sriov["why"])]]
    zone = sriov["vf"]
    if zone is not None:
        seen = "reports this pod" if zone["reports_this_pod"] else "does not list this pod yet"
        attrs = zone["attributes"]
        where = f"PF {zone['pf']}, PCI {attrs.get(names.VF_ATTR_PCI_ADDRESS, '-')}"
        rows.append([f"VF {zone['id']}", f"{where}; {seen}"])
    return rows


def _pairing_rows(pair: JSON | None) -> list[list[str]]:
    if pair is None:
        return []
    n = len(pair["cards"])
    text = (
        f"asked {pair['asked']}: VF {pair['vf']} under PCIe switch "
        f"{fmt(pair['vf_pcie_switch'])} (NUMA {fmt(pair['vf_numa'])}); "
        f"{pair['cards_under_vf_switch']} of {n} card(s) under that switch, "
        f"{pair['cards_on_vf_numa']} on its NUMA node"
    )
    cards = ", ".join(f"{c['id']} ({fmt(c['pcie_switch'] or None)})" for c in pair["cards"])
    return [["GPU-VF pairing", text], ["cards' switches", cards]]


def print_pod(report: JSON) -> None:
    qos = report["qos"]
    rows = [
        ["phase", (report["phase"] or "-") + (" (terminating)" if report["deleting"] else "")],
        ["node", fmt(report["node"])],
        [
            "QoS level",
            qos["level"] if qos["valid"] else f"invalid ({len(qos['errors'])} error(s), below)",
        ],
        ["enhancements", _enhancements(qos["enhancements"]) if qos["valid"] else "-"],
        ["k8s QoS class", qos["k8s_qos_class"]],
    ]
    burst = qos.get("cpu_burst")
    if qos["valid"] and burst:
        rows.append(
            [
                "cpu burst",
                f"{burst['policy']}, {burst['percent']}% (Katalyst's, not written; "
                f"from {burst['source']})",
            ]
        )
    placement = report["placement"]
    if placement is not None:
        rows += [
            ["pool", fmt(placement["pool"])],
            ["cpuset", fmt(placement["cpuset"])],
            ["why", fmt(placement.get("why"))],
        ]
        if placement.get("reclaim"):
            rows.append(["reclaim", str(placement["reclaim"])])
        if placement.get("numa"):
            rows.append(
                [
                    "NUMA",
                    "\n".join(f"{a['numa']}: {_inline(a['requests'])}" for a in placement["numa"]),
                ]
            )
    rows += _gpu_rows(report.get("gpu"))
    rows += _nic_rows(report.get("nic"))
    rows += _sriov_rows(report.get("sriov"))
    rows += _pairing_rows(report.get("pairing"))
    rows += dra_rows(report.get("dra"))
    print_table(f"Pod {report['pod']}", ["", "value"], rows)
    print_recommends(report.get("resource_recommends") or [])
    for p in qos["errors"]:
        print_message(f"error: {p['text']}", style="red")
    for p in qos["warnings"]:
        print_message(f"warning: {p['text']}", style="yellow")
    sched = report["scheduling"]
    if sched is not None:
        print_message(f"Pending: {sched['message'] or sched['why']}")
    render_vertical(report)
    print_events(f"Events of pod {report['pod']}", report["events"])
    print_problems(report["problems"])
