"""Kubernetes Events read back as decision records, for `katalyst explain`.

pykatalyst's Events carry their decision record (plugin, signal, threshold, ranking...)
in the `katalyst.kubewharf.io/decision-record` annotation, and that is what is read. An
Event without one (written by an older version) is read from its structured fields —
`reason` (EvictCreated, ConditionSet, AgentSilent...), `involvedObject`, `source`,
`type`, `count`, timestamps — with the plugin taken from the message, where those writers
named it ("from plugin: ..." or "set by ...").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.records import DecisionRecord
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339
from pykatalyst.cluster.events import decision_of

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
OUR_COMPONENTS = (names.AGENT_COMPONENT, names.CONTROLLER_COMPONENT)
# kube-scheduler's reason when a pod fits no node ("0/N nodes are available: ...").
FAILED_SCHEDULING = "FailedScheduling"


def field_map(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """obj[key] when it is an object, else an empty one: Events from other writers may
    leave any field out, or null."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def event_time(ev: Mapping[str, Any]) -> float | None:
    """When the Event last happened: core/v1 Events carry lastTimestamp, events.k8s.io/v1
    ones (what kube-scheduler writes) an eventTime and, once repeated, a series."""
    series = field_map(ev, "series")
    for stamp in (
        ev.get("lastTimestamp"),
        series.get("lastObservedTime"),
        ev.get("eventTime"),
        ev.get("firstTimestamp"),
    ):
        if stamp:
            try:
                return parse_rfc3339(str(stamp))
            except ValueError:
                continue
    return None


def component_of(ev: Mapping[str, Any]) -> str:
    source = field_map(ev, "source")
    return str(source.get("component") or ev.get("reportingComponent") or "")


def _plugin(kind: str, message: str) -> str:
    if PLUGIN_MARK in message:
        return message.split(PLUGIN_MARK, 1)[1].split(".", 1)[0].split()[0]
    if " set by " in message:
        return message.split(" set by ", 1)[1].split(":", 1)[0]
    return "backstop" if kind.startswith("backstop") else ""


def record_from_event(ev: Mapping[str, Any]) -> DecisionRecord | None:
    """The decision record an agent or backstop Event stands for; None for other Events."""
    reason = str(ev.get("reason", ""))
    kind = EXPLAINED_REASONS.get(reason)
    component = component_of(ev)
    if kind is None or component not in OUR_COMPONENTS:
        return None
    carried = decision_of(ev)
    if carried is not None:
        return dataclasses.replace(carried, time=event_time(ev) or carried.time)
    obj = field_map(ev, "involvedObject")
    source = field_map(ev, "source")
    message = str(ev.get("message", ""))
    if component == names.CONTROLLER_COMPONENT and kind == "eviction":
        kind = "backstop-eviction"
    obj_kind = str(obj.get("kind", ""))
    key = str(obj.get("name", ""))
    if obj_kind == names.POD.kind and obj.get("namespace"):
        key = f"{obj['namespace']}/{key}"
    node = str(source.get("host", "")) or (key if obj_kind == names.NODE.kind else "")
    return DecisionRecord(
        time=event_time(ev) or 0.0,
        node=node,
        kind=kind,
        plugin=_plugin(kind, message),
        reason=reason,
        message=message,
        object_kind=obj_kind,
        object_key=key,
        object_uid=str(obj.get("uid", "")),
    )


def records_from_event_items(items: Iterable[Any]) -> list[DecisionRecord]:
    out = []
    for ev in items:
        if isinstance(ev, Mapping):
            record = record_from_event(ev)
            if record is not None:
                out.append(record)
    return out


def event_json(ev: Mapping[str, Any]) -> dict[str, Any]:
    """One Event as `katalyst explain -o json` shows it; `record` is its decision record
    when an agent or the backstop wrote it."""
    obj = field_map(ev, "involvedObject")
    when = event_time(ev)
    count = ev.get("count")
    if not isinstance(count, int):
        count = field_map(ev, "series").get("count")
    record = record_from_event(ev)
    return {
        "time": rfc3339(when) if when is not None else None,
        "type": str(ev.get("type", "")),
        "reason": str(ev.get("reason", "")),
        "object": f"{obj.get('kind', '')}/{_object_key(obj)}",
        "component": component_of(ev),
        "count": count if isinstance(count, int) else 1,
        "message": str(ev.get("message") or ev.get("note") or ""),
        "record": record.to_json() if record is not None else None,
    }


def _object_key(obj: Mapping[str, Any]) -> str:
    name = str(obj.get("name", ""))
    ns = obj.get("namespace")
    return f"{ns}/{name}" if ns and obj.get("kind") == names.POD.kind else name
