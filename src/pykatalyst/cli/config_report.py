"""`katalyst validate` on config objects (AdminQoSConfiguration, KatalystCustomConfig,
CustomNodeConfig, NodeOvercommitConfig, KatalystVerticalPodAutoscaler,
ServiceProfileDescriptor): per field, whether it takes effect in pykatalyst, and each
invalid value with what is accepted."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import config_fields, support
from pykatalyst.api.manifests import Document
from pykatalyst.cli.output import print_table


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str
    field: str
    value: str | None
    accepted: str
    message: str


def handles(doc: Document) -> bool:
    return doc.kind in config_fields.CONFIG_KINDS


def inspect(doc: Document) -> tuple[dict[str, Any], list[Problem]]:
    """The object's entry for the report, and its problems."""
    uses = config_fields.field_uses(doc.obj)
    problems = [
        Problem("error", p.field, _shown(p.value), p.accepted, "invalid value")
        for p in config_fields.config_problems(doc.obj)
    ]
    feature = support.for_kind(doc.kind)
    if feature is not None and not feature.acted_on:
        problems.append(kind_problem(doc.kind, feature))
    problems += [
        Problem(
            "warning",
            u.path,
            _shown(u.value),
            "a field pykatalyst acts on" if u.known else "a field of Katalyst's schema",
            u.note,
        )
        for u in uses
        if not u.takes_effect and (not u.known or feature is None or feature.acted_on)
    ]
    entry = {
        "file": str(doc.path),
        "document": doc.index,
        "kind": doc.kind,
        "namespace": doc.namespace,
        "name": doc.name,
        "fields": [u.to_json() for u in uses],
    }
    return entry, problems


def kind_problem(kind: str, feature: support.Feature) -> Problem:
    """A warning about an object whose kind nothing in pykatalyst acts on yet."""
    return Problem("warning", "kind", kind, "a kind pykatalyst acts on", feature.why_not())


def _shown(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def print_configs(configs: list[dict[str, Any]]) -> None:
    """One table per object: each field, its value, and what it does in pykatalyst."""
    for entry in configs:
        key = f"{entry['namespace']}/{entry['name']}" if entry["namespace"] else entry["name"]
        rows = [
            (
                f["field"],
                _shown(f["value"]) or "",
                "yes" if f["takesEffect"] else "no",
                f["sets"] or f["note"] or "",
            )
            for f in entry["fields"]
        ]
        print_table(
            f"{entry['kind']} {key} ({entry['file']})",
            ("field", "value", "takes effect", "sets / why not"),
            rows,
        )
