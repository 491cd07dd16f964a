"""Katalyst's OOM recorder: containers killed for memory, kept in the ConfigMap
`kube-system/oom-record` (key `oom-data`) in Katalyst's format, so that the ResourceRecommend
percentile rule bumps their memory and Katalyst's own tools read the same records.

A record is {Namespace, Pod, Container, Memory (the container's memory request), OOMAt (when
the killed container finished)}, taken from a container status whose lastState.terminated
reason is OOMKilled. A record of the same container is replaced when the new one is at least
as large and from another time; records older than 168 h go, and only the newest 5000 stay
(`--oom-record-max-number`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import parse_rfc3339

RETENTION_S = 168 * 3600.0
MAX_RECORDS = 5000
Record = dict[str, Any]


def observed(pods: Sequence[Mapping[str, Any]]) -> list[Record]:
    """The OOM kills the pods' statuses show, as records (containers with a memory request)."""
    out: list[Record] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        requests = {
            str(c.get("name")): ((c.get("resources") or {}).get("requests") or {}).get("memory")
            for c in (spec or {}).get("containers") or []
            if isinstance(c, Mapping)
        }
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (
                ((cs.get("lastState") or {}).get("terminated") or {})
                if isinstance(cs, Mapping)
                else {}
            )
            memory = requests.get(str(cs.get("name"))) if isinstance(cs, Mapping) else None
            if term.get("reason") != "OOMKilled" or memory is None or not term.get("finishedAt"):
                continue
            out.append(
                {
                    "Namespace": str(meta.get("namespace", "")),
                    "Pod": str(meta.get("name", "")),
                    "Container": str(cs.get("name", "")),
                    "Memory": str(memory),
                    "OOMAt": str(term["finishedAt"]),
                }
            )
    return out


def _bytes(record: Mapping[str, Any]) -> int:
    try:
        return Quantity.parse(str(record.get("Memory", "0"))).value()
    except QuantityError:
        return 0


def _at(record: Mapping[str, Any]) -> float:
    try:
        return parse_rfc3339(str(record.get("OOMAt", "")))
    except ValueError:
        return 0.0


def merge(
    current: Sequence[Record], seen: Sequence[Record], now: float, max_records: int = MAX_RECORDS
) -> list[Record]:
    """The records after `seen`: Katalyst's update rule, then its clean-up (oldest first,
    none older than the retention, at most `max_records`)."""
    out = [dict(r) for r in current]
    for new in seen:
        key = (new["Namespace"], new["Pod"], new["Container"])
        for have in out:
            if (have.get("Namespace"), have.get("Pod"), have.get("Container")) == key:
                if _bytes(new) >= _bytes(have) and _at(new) != _at(have):
                    have.update(Memory=new["Memory"], OOMAt=new["OOMAt"])
                break
        else:
            out.append(dict(new))
    out.sort(key=_at)
    kept = [r for r in out if _at(r) >= now - RETENTION_S]
    return kept[-max_records:] if max_records > 0 else []


def read(cm: Mapping[str, Any] | None, key: str) -> list[Record]:
    text = ((cm or {}).get("data") or {}).get(key)
    try:
        items = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return [dict(i) for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def text(records: Sequence[Record]) -> str:
    """As Go's json.Marshal writes the list (field order Namespace, Pod, Container, Memory,
    OOMAt; no spaces)."""
    fields = ("Namespace", "Pod", "Container", "Memory", "OOMAt")
    return json.dumps([{f: r.get(f) for f in fields} for r in records], separators=(",", ":"))
