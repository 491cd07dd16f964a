"""Dynamic configuration: KatalystCustomConfig targets resolved per node into CNC status.

A KatalystCustomConfig (KCC) registers a target config type (AdminQoSConfiguration, ...).
For each node's CustomNodeConfig (CNC, labels = the Node's), the controller picks the one
target config of that type that applies, by Katalyst's rules:

1. the configs whose `ephemeralSelector.nodeNames` list the node (while not expired);
2. else the configs whose `nodeLabelSelector` matches the CNC's labels;
3. else the global config (neither selector).

Within that tier the highest `priority` wins; two at the same top priority are a conflict:
the node keeps what it has, and both configs get a `Conflict` condition. The pick is written
to the CNC's `status.katalystCustomConfigList` as {configType, configName, configNamespace,
hash}; the hash is Katalyst's (the first 12 hex digits of the sha256 of the JSON of
`spec.config`). A config's `updateStrategy.rollingUpdate.canary` (a count or a percentage,
rounded down) limits the update to the first nodes of its targets in name order; `paused`
freezes it. Each target's status carries targetNodes, canaryNodes, updatedTargetNodes,
updatedNodes, currentHash and a `Valid` condition; each KCC's carries its `Valid` condition
and the invalid targets. A controller given a node selector writes only the selected CNCs,
but counts and cuts canaries over every CNC, so that controllers for two node pools write
the same statuses.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.duration import DurationError, parse_duration
from pykatalyst.api.names import Kind
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.informer import Informer, InformerFactory
from pykatalyst.cluster.protocol import JSON, ApiError, BadRequest, Cluster, NotFound
from pykatalyst.cluster.selectors import LabelSelector, parse_label_selector
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason

HASH_LENGTH = 12
_GENERIC_STATUS_KEYS = frozenset(
    {
        "targetNodes",
        "canaryNodes",
        "updatedTargetNodes",
        "updatedNodes",
        "currentHash",
        "collisionCount",
        "observedGeneration",
        "conditions",
    }
)

_CANARY = re.compile(r"\d+%?")

Key = tuple[str, str]  # (namespace, name)


def config_hash(obj: Mapping[str, Any]) -> str:
    """Katalyst's config hash: `spec.config` plus any non-generic status fields (as
    "status/<key>"), marshalled the way Go's encoding/json does, sha256, 12 hex digits."""
    spec = obj.get("spec") or {}
    val = dict(spec.get("config") or {})
    status = obj.get("status") or {}
    for k, v in status.items():
        if k not in _GENERIC_STATUS_KEYS:
            val[f"status/{k}"] = v
    return hashlib.sha256(go_json(val).encode()).hexdigest()[:HASH_LENGTH]


def go_json(value: Any) -> str:
    """JSON as Go's encoding/json writes an unstructured object: sorted keys, no spaces,
    integral floats without a fraction, <, > and & escaped."""
    text = json.dumps(_go_numbers(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, esc)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _go_numbers(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _go_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_go_numbers(v) for v in value]
    return value


def canary_cutoff(canary: int | str | None, targets: int) -> int:
    """How many of `targets` nodes get the new config: all without a canary; an int as
    is; "N%" of them rounded down (Kubernetes' GetScaledValueFromIntOrPercent); clamped."""
    if canary is None:
        return targets
    if isinstance(canary, int):
        n = canary
    else:
        text = canary.strip()
        percent = text.endswith("%")
        n = math.floor(int(text[:-1]) * targets / 100) if percent else int(text)
    return min(max(n, 0), targets)


def _canary_field(spec: Mapping[str, Any]) -> int | str | None:
    strategy = spec.get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    value = rolling.get("canary")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and _CANARY.fullmatch(value.strip())):
        return value
    raise ValueError("spec.updateStrategy.rollingUpdate.canary: accepted: an integer or 'N%'")


@dataclass(frozen=True, slots=True)
class TargetFacts:
    """A target config (e.g. an AdminQoSConfiguration) as the resolution reads it."""

    namespace: str
    name: str
    priority: int = 0
    node_names: tuple[str, ...] = ()
    selector: LabelSelector | None = None
    selector_text: str = ""
    paused: bool = False
    canary: int | str | None = None
    hash: str = ""
    created: float = 0.0
    generation: int = 0
    expired: bool = False
    error: str = ""
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def tier(self) -> int:
        """0: per node, 1: label selector, 2: global."""
        return 0 if self.node_names else 1 if self.selector is not None else 2


@dataclass(frozen=True, slots=True)
class KCCFacts:
    namespace: str
    name: str
    kind: Kind | None
    gvr: Mapping[str, str]
    allowed_keys: Mapping[int, frozenset[str]]
    created: float = 0.0
    generation: int = 0
    error: str = ""
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class CNCFacts:
    name: str
    labels: Mapping[str, str]
    entries: tuple[Mapping[str, Any], ...] = ()


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, float, int]:
    meta = _mapping(obj.get("metadata"))
    created = 0.0
    text = meta.get("creationTimestamp")
    if isinstance(text, str) and text:
        try:
            created = parse_rfc3339(text)
        except ValueError:
            created = 0.0
    gen = meta.get("generation")
    return (
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        created,
        gen if isinstance(gen, int) else 0,
    )


def _kind_for(gvr: Mapping[str, Any]) -> Kind | None:
    for kind in names.KATALYST_KINDS:
        same = (kind.group, kind.version, kind.plural) == (
            gvr.get("group"),
            gvr.get("version"),
            gvr.get("resource"),
        )
        if same and kind.namespaced:
            return kind
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    """A stored object's field that should be an object: anything else reads as empty (the
    reader then reports what is missing)."""
    return value if isinstance(value, Mapping) else {}


def _shape_error(obj: Mapping[str, Any]) -> str:
    """What makes a stored config unreadable as an object with a spec, or ""."""
    for key in ("metadata", "spec", "status"):
        if obj.get(key) is not None and not isinstance(obj.get(key), Mapping):
            return f"{key}: accepted: an object, not {type(obj.get(key)).__name__}"
    return ""


def read_kcc(obj: JSON) -> KCCFacts:
    ns, name, created, gen = _meta(obj)
    spec = _mapping(obj.get("spec"))
    target_type = spec.get("targetType")
    gvr = {str(k): str(v) for k, v in _mapping(target_type).items()}
    status = dict(_mapping(obj.get("status")))
    allowed: dict[int, frozenset[str]] = {}
    error = _shape_error(obj)
    if not error and target_type is not None and not isinstance(target_type, Mapping):
        error = "spec.targetType: accepted: an object with group, version and resource"
    keys_list = spec.get("nodeLabelSelectorAllowedKeyList") or []
    if not error and not isinstance(keys_list, list):
        error = "spec.nodeLabelSelectorAllowedKeyList: accepted: a list"
    for i, item in enumerate(keys_list if not error else []):
        prio = item.get("priority") if isinstance(item, Mapping) else None
        keys = item.get("keyList") if isinstance(item, Mapping) else None
        if not isinstance(prio, int) or not isinstance(keys, list) or prio in allowed:
            error = (
                f"spec.nodeLabelSelectorAllowedKeyList[{i}]: accepted: a priority (an integer "
                "named once) with a keyList of label keys"
            )
            break
        allowed[prio] = frozenset(str(k) for k in keys)
    kind = _kind_for(gvr)
    if not error and gvr.get("group") not in names.KCC_VALID_API_GROUPS:
        error = (
            f"spec.targetType.group {gvr.get('group')!r}: accepted: "
            f"{', '.join(names.KCC_VALID_API_GROUPS)}"
        )
    elif not error and kind is None:
        served = ", ".join(
            f"{k.group}/{k.version}/{k.plural}"
            for k in names.KATALYST_KINDS
            if k.group in names.KCC_VALID_API_GROUPS
            and k.namespaced
            and k.plural != "katalystcustomconfigs"
        )
        error = f"spec.targetType {gvr}: not a served config type (accepted: {served})"
    return KCCFacts(ns, name, kind, gvr, allowed, created, gen, error, status)


def read_target(obj: JSON, kcc: KCCFacts, now: float) -> TargetFacts:
    """A target config with its validation against the KCC's allowed keys."""
    ns, name, created, gen = _meta(obj)
    spec = _mapping(obj.get("spec"))
    status = dict(_mapping(obj.get("status")))
    base = TargetFacts(ns, name, created=created, generation=gen, status=status)
    if _shape_error(obj):
        return replace(base, error=_shape_error(obj))
    try:
        return replace(_validated(spec, kcc, base, now), hash=config_hash(obj))
    except ValueError as exc:
        return replace(base, error=str(exc))


def _validated(
    spec: Mapping[str, Any], kcc: KCCFacts, base: TargetFacts, now: float
) -> TargetFacts:
    prio = spec.get("priority", 0)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise ValueError("spec.priority: accepted: an integer")
    selector_text = str(spec.get("nodeLabelSelector") or "")
    eph = _mapping(spec.get("ephemeralSelector"))
    listed = eph.get("nodeNames") or []
    if not isinstance(listed, list):
        raise ValueError("spec.ephemeralSelector.nodeNames: accepted: a list of node names")
    node_names = tuple(str(n) for n in listed)
    last = eph.get("lastDuration")
    if selector_text and node_names:
        raise ValueError(
            "spec: nodeLabelSelector and ephemeralSelector.nodeNames exclude each other"
        )
    if last and not node_names:
        raise ValueError("spec.ephemeralSelector.lastDuration: only with nodeNames")
    expired = False
    if node_names:
        if not last:
            raise ValueError("spec.ephemeralSelector.lastDuration: required with nodeNames")
        try:
            seconds = parse_duration(str(last))
        except DurationError as exc:
            raise ValueError(f"spec.ephemeralSelector.lastDuration: {exc}") from None
        expired = base.created + seconds < now
    selector: LabelSelector | None = None
    if selector_text:
        try:
            selector = parse_label_selector(selector_text)
        except BadRequest as exc:
            raise ValueError(f"spec.nodeLabelSelector: {exc}") from None
        allowed = kcc.allowed_keys.get(prio)
        if allowed is None:
            raise ValueError(
                f"spec.priority {prio}: no nodeLabelSelectorAllowedKeyList entry in KCC "
                f"{kcc.namespace}/{kcc.name} (accepted: {sorted(kcc.allowed_keys) or 'none'})"
            )
        bad = sorted({r.key for r in selector.requirements} - allowed)
        if bad:
            raise ValueError(
                f"spec.nodeLabelSelector: keys {bad} not allowed at priority {prio} "
                f"(accepted: {sorted(allowed)})"
            )
    return replace(
        base,
        priority=prio,
        node_names=node_names,
        selector=selector,
        selector_text=selector_text,
        paused=bool(spec.get("paused", False)),
        canary=_canary_field(spec),
        expired=expired,
    )


@dataclass(frozen=True, slots=True)
class Resolution:
    """Per node: the target that applies (None: none does), and the tied targets when
    two of the same top priority match (the node then keeps what it has)."""

    target: TargetFacts | None
    tied: tuple[TargetFacts, ...] = ()


def resolve(cnc: CNCFacts, targets: Sequence[TargetFacts]) -> Resolution:
    """Katalyst's FindMatchedKCCTargetConfigForNode over the valid, unexpired targets."""
    tiers: dict[int, list[TargetFacts]] = {0: [], 1: [], 2: []}
    for t in targets:
        if t.error or t.expired:
            continue
        if t.node_names:
            if cnc.name in t.node_names:
                tiers[0].append(t)
        elif t.selector is not None:
            if t.selector.matches(cnc.labels):
                tiers[1].append(t)
        else:
            tiers[2].append(t)
    for tier in (0, 1, 2):
        found = sorted(tiers[tier], key=lambda t: -t.priority)
        if not found:
            continue
        top = [t for t in found if t.priority == found[0].priority]
        if len(top) > 1:
            return Resolution(None, tuple(sorted(top, key=lambda t: t.key)))
        return Resolution(found[0])
    return Resolution(None)


def type_string(gvr: Mapping[str, Any]) -> str:
    """Go's GroupVersionResource.String(), the order of katalystCustomConfigList."""
    return f"{gvr.get('group', '')}/{gvr.get('version', '')}, Resource={gvr.get('resource', '')}"


def _entry_of(cnc: CNCFacts, gvr: Mapping[str, str]) -> Mapping[str, Any] | None:
    for e in cnc.entries:
        if dict(e.get("configType") or {}) == dict(gvr):
            return e
    return None


def _entry(gvr: Mapping[str, str], t: TargetFacts) -> dict[str, Any]:
    return {
        "configType": dict(gvr),
        "configName": t.name,
        "configNamespace": t.namespace,
        "hash": t.hash,
    }


def is_updated(entry: Mapping[str, Any] | None, t: TargetFacts) -> bool:
    return (
        entry is not None
        and entry.get("configName") == t.name
        and entry.get("configNamespace") == t.namespace
        and entry.get("hash") == t.hash
    )


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    kind: Kind
    namespace: str
    name: str
    status: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.kind, "object": f"{self.namespace}/{self.name}"}


@dataclass(frozen=True, slots=True)
class KCCPlan:
    time: float
    assignments: Mapping[str, Mapping[str, str]]  # type string -> node -> "ns/name"
    cnc_updates: Mapping[str, tuple[Mapping[str, Any], ...]]  # cnc -> its new list
    statuses: tuple[StatusUpdate, ...]
    notes: tuple[str, ...] = ()
    skipped: tuple[Skip, ...] = ()  # stored objects the reads could not use

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "assignments": {k: dict(v) for k, v in self.assignments.items()},
            "cncUpdates": {k: [dict(e) for e in v] for k, v in self.cnc_updates.items()},
            "statuses": [s.to_json() for s in self.statuses],
            "notes": list(self.notes),
            "skipped": [s.to_json() for s in self.skipped],
        }

    def summary(self) -> str:
        return (
            f"kcc: {len(self.assignments)} config types; {len(self.cnc_updates)} CNC updates, "
            f"{len(self.statuses)} status updates"
        )


def _condition(
    old: Sequence[Mapping[str, Any]], ctype: str, status: str, reason: str, message: str, now: float
) -> dict[str, Any]:
    """A condition that keeps its lastTransitionTime while its status stays."""
    prev = next((c for c in old if c.get("type") == ctype), None)
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or rfc3339(now),
    }


def _status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return any(old.get(k) != v for k, v in new.items())


def _exclusive(kccs: Sequence[KCCFacts]) -> list[KCCFacts]:
    """One KCC per target type: the oldest; the others are refused."""
    out: list[KCCFacts] = []
    owner: dict[str, KCCFacts] = {}
    for k in sorted(kccs, key=lambda k: (k.created, k.key)):
        t = type_string(k.gvr)
        if not k.error and t in owner:
            first = owner[t]
            k = replace(
                k,
                error=f"spec.targetType: already registered by KCC {first.namespace}/{first.name}",
            )
        elif not k.error:
            owner[t] = k
        out.append(k)
    return out


def _one_global(targets: Sequence[TargetFacts]) -> list[TargetFacts]:
    out: list[TargetFacts] = []
    first: TargetFacts | None = None
    for t in sorted(targets, key=lambda t: (t.created, t.key)):
        if not t.error and t.tier == 2:
            if first is not None:
                t = replace(
                    t,
                    error=f"a global config of this type exists: {first.namespace}/{first.name}"
                    " (at most one config without selectors)",
                )
            else:
                first = t
        out.append(t)
    return out


@dataclass
class _TypeResult:
    groups: dict[Key, list[str]] = field(default_factory=dict)
    ties: dict[Key, set[Key]] = field(default_factory=dict)
    assignment: dict[str, str] = field(default_factory=dict)


def _resolve_type(
    gvr: Mapping[str, str],
    targets: Sequence[TargetFacts],
    cncs: Sequence[CNCFacts],
    entries: dict[str, dict[str, Mapping[str, Any]]],
) -> _TypeResult:
    out = _TypeResult()
    tstr = type_string(gvr)
    chosen: dict[str, TargetFacts | None] = {}
    for cnc in cncs:
        res = resolve(cnc, targets)
        if res.tied:
            for t in res.tied:
                out.ties.setdefault(t.key, set()).update(o.key for o in res.tied if o != t)
            continue  # a tie leaves the node as it is
        chosen[cnc.name] = res.target
        if res.target is not None:
            out.groups.setdefault(res.target.key, []).append(cnc.name)
            out.assignment[cnc.name] = f"{res.target.namespace}/{res.target.name}"
        else:
            entries[cnc.name].pop(tstr, None)  # nothing applies: the entry goes
    for t in targets:
        group = out.groups.get(t.key, [])
        if t.error or t.paused:
            continue
        for node in group[: canary_cutoff(t.canary, len(group))]:
            entries[node][tstr] = _entry(gvr, t)
    return out


def _target_status(
    t: TargetFacts,
    res: _TypeResult,
    entries: Mapping[str, Mapping[str, Mapping[str, Any]]],
    tstr: str,
    now: float,
) -> dict[str, Any]:
    old_conds = list(t.status.get("conditions") or [])
    if t.error:
        valid = _condition(
            old_conds,
            names.KCC_CONDITION_VALID,
            "False",
            names.KCC_REASON_VALIDATE_FAILED,
            t.error,
            now,
        )
        return {"observedGeneration": t.generation, "conditions": [valid]}
    group = res.groups.get(t.key, [])
    updated = [n for n, e in entries.items() if is_updated(e.get(tstr), t)]
    conds = [
        _condition(old_conds, names.KCC_CONDITION_VALID, "True", names.KCC_REASON_NORMAL, "", now)
    ]
    others = res.ties.get(t.key)
    if others:
        listed = ", ".join(f"{ns}/{n}" for ns, n in sorted(others))
        conds.append(
            _condition(
                old_conds,
                names.KCC_CONDITION_CONFLICT,
                "True",
                names.KCC_REASON_SAME_PRIORITY,
                f"matches nodes that {listed} also match at priority {t.priority}: "
                "those nodes keep their current config",
                now,
            )
        )
    return {
        "targetNodes": len(group),
        "canaryNodes": canary_cutoff(t.canary, len(group)),
        "updatedTargetNodes": sum(1 for n in group if n in set(updated)),
        "updatedNodes": len(updated),
        "currentHash": t.hash,
        "observedGeneration": t.generation,
        "conditions": conds,
    }


def _kcc_status(
    k: KCCFacts,
    targets: Sequence[TargetFacts],
    now: float,
    ties: Mapping[Key, set[Key]] | None = None,
) -> dict[str, Any]:
    """Valid, and while some of its configs tie on a node, Conflict naming them."""
    old = list(k.status.get("conditions") or [])
    if k.error:
        cond = _condition(
            old, names.KCC_CONDITION_VALID, "False", names.KCC_REASON_VALIDATE_FAILED, k.error, now
        )
    else:
        cond = _condition(old, names.KCC_CONDITION_VALID, "True", names.KCC_REASON_NORMAL, "", now)
    conds = [cond]
    if ties:
        tied = ", ".join(f"{ns}/{n}" for ns, n in sorted(ties))
        conds.append(
            _condition(
                old,
                names.KCC_CONDITION_CONFLICT,
                "True",
                names.KCC_REASON_SAME_PRIORITY,
                f"{tied} match the same nodes at the same priority: "
                "those nodes keep their current config",
                now,
            )
        )
    return {
        "observedGeneration": k.generation,
        "invalidTargetConfigList": sorted(f"{t.namespace}/{t.name}" for t in targets if t.error),
        "conditions": conds,
    }


def decide(
    kccs: Sequence[KCCFacts],
    targets: Mapping[Key, Sequence[TargetFacts]],
    cncs: Sequence[CNCFacts],
    now: float,
    owned: frozenset[str] | None = None,
) -> KCCPlan:
    """Pure: per KCC type, the target for every CNC; the CNC lists and statuses to write.
    `targets` holds each KCC's target configs (read with `read_target`), by KCC key;
    `owned`, the CNCs whose lists this controller writes (None: all). Node counts, canary
    cut-offs and statuses are over every CNC given, owned or not."""
    cncs = sorted(cncs, key=lambda c: c.name)
    entries: dict[str, dict[str, Mapping[str, Any]]] = {
        c.name: {type_string(e.get("configType") or {}): e for e in c.entries} for c in cncs
    }
    statuses: list[StatusUpdate] = []
    assignments: dict[str, Mapping[str, str]] = {}
    for k in _exclusive(kccs):
        mine = _one_global(targets.get(k.key, ())) if not k.error else []
        kind = None if k.error else k.kind
        res = _resolve_type(k.gvr, mine, cncs, entries) if kind else _TypeResult()
        if kind is not None:
            tstr = type_string(k.gvr)
            assignments[tstr] = res.assignment
            for t in mine:
                st = _target_status(t, res, entries, tstr, now)
                if _status_changed(t.status, st):
                    statuses.append(StatusUpdate(kind, t.namespace, t.name, st))
        # The KCC's summary is written after its targets': whoever sees its Conflict
        # finds the tied configs' own conditions already there.
        new = _kcc_status(k, mine, now, res.ties)
        if _status_changed(k.status, new):
            statuses.append(StatusUpdate(names.KATALYST_CUSTOM_CONFIG, k.namespace, k.name, new))
    cnc_updates: dict[str, tuple[Mapping[str, Any], ...]] = {}
    for c in cncs:
        if owned is not None and c.name not in owned:
            continue
        new_list = tuple(entries[c.name][t] for t in sorted(entries[c.name]))
        if [dict(e) for e in new_list] != [dict(e) for e in c.entries]:
            cnc_updates[c.name] = new_list
    return KCCPlan(now, assignments, cnc_updates, tuple(statuses))


@dataclass(frozen=True, slots=True)
class ApplyResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed)}


def cnc_problem(obj: JSON) -> str:
    """Why a CNC's status cannot be read as a list of config targets, or "" (its
    entries are then dropped and the list rewritten by the next assignment)."""
    shape = _shape_error(obj)
    if shape:
        return shape
    entries = _mapping(obj.get("status")).get("katalystCustomConfigList")
    if entries is not None and (
        not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries)
    ):
        return "status.katalystCustomConfigList: accepted: a list of config targets"
    return ""


def skips_of(
    kcc_objs: Sequence[JSON],
    kccs: Sequence[KCCFacts],
    targets: Mapping[Key, Sequence[tuple[JSON, TargetFacts]]],
    cnc_objs: Sequence[JSON],
) -> tuple[Skip, ...]:
    """The KCCs, target configs and CNCs the reads refused, with their errors."""
    out = [
        Skip.of(names.KATALYST_CUSTOM_CONFIG, obj, skip_reason(obj), k.error)
        for obj, k in zip(kcc_objs, kccs, strict=True)
        if k.error
    ]
    for k in kccs:
        kind = k.kind
        if kind is None:
            continue
        out += (
            Skip.of(kind, obj, skip_reason(obj), t.error)
            for obj, t in targets.get(k.key, ())
            if t.error
        )
    for obj in cnc_objs:
        problem = cnc_problem(obj)
        if problem:
            out.append(Skip.of(names.CUSTOM_NODE_CONFIG, obj, skip_reason(obj), problem))
    return tuple(out)


def cnc_facts(obj: JSON) -> CNCFacts:
    """A CNC as the decision sees it: an unreadable status holds no entries, and is
    rewritten whole by the next assignment."""
    meta = _mapping(obj.get("metadata"))
    entries = _mapping(obj.get("status")).get("katalystCustomConfigList")
    return CNCFacts(
        str(meta.get("name", "")),
        {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()},
        tuple(e for e in entries if isinstance(e, Mapping)) if isinstance(entries, list) else (),
    )


class KCCController:
    """`reconcile(now)` reads KCCs, their targets and the CNCs; `apply(plan)` patches the
    CNC statuses first, then the target and KCC statuses."""

    name = names.CONTROLLER_KCC

    def __init__(
        self,
        cluster: Cluster,
        *,
        node_selector: str | None = None,
        skips: SkippedObjects | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        # The process's counter is shared by its controllers (ControllerRunner hands it in).
        self.skips = skips or SkippedObjects(
            "controller", EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        )
        shared = informers if informers is not None else InformerFactory(cluster)
        self._shared = shared
        self._kccs = shared.informer(names.KATALYST_CUSTOM_CONFIG)
        # CNC labels mirror the Node's, so the node selector selects the CNCs this
        # controller writes; every CNC is read, so that the targets' node counts and
        # canary cut-offs are the fleet's whichever pool a controller serves.
        self._selector = parse_label_selector(node_selector) if node_selector else None
        self._cncs = shared.informer(names.CUSTOM_NODE_CONFIG)
        self._targets: dict[str, Informer] = {}

    def _informer(self, kind: Kind) -> Informer:
        key = kind.api_version + "/" + kind.plural
        if key not in self._targets:
            self._targets[key] = self._shared.informer(kind)
        return self._targets[key]

    def reconcile(self, now: float) -> KCCPlan:
        self._kccs.sync()
        self._cncs.sync()
        kcc_objs = self._kccs.list()
        kccs = [read_kcc(o) for o in kcc_objs]
        read: dict[Key, list[tuple[JSON, TargetFacts]]] = {}
        for k in kccs:
            if k.error or k.kind is None:
                continue
            informer = self._informer(k.kind)
            informer.sync()
            read[k.key] = [(o, read_target(o, k, now)) for o in informer.list()]
        targets = {key: [t for _, t in pairs] for key, pairs in read.items()}
        cnc_objs = self._cncs.list()
        cncs = [cnc_facts(o) for o in cnc_objs]
        owned: frozenset[str] | None = None
        if self._selector is not None:
            owned = frozenset(c.name for c in cncs if self._selector.matches(c.labels))
            cnc_objs = [o for o, c in zip(cnc_objs, cncs, strict=True) if c.name in owned]
        plan = decide(kccs, targets, cncs, now, owned)
        return replace(plan, skipped=skips_of(kcc_objs, kccs, read, cnc_objs))

    def apply(self, plan: KCCPlan) -> ApplyResult:
        done: list[str] = []
        failed: list[str] = []
        for cnc, entries in plan.cnc_updates.items():
            body: JSON = {"status": {"katalystCustomConfigList": [dict(e) for e in entries]}}
            self._patch(names.CUSTOM_NODE_CONFIG, cnc, None, body, done, failed)
        for st in plan.statuses:
            self._patch(st.kind, st.name, st.namespace, {"status": dict(st.status)}, done, failed)
        failed += (f"event {p}" for p in self.skips.report(plan.skipped, plan.time))
        return ApplyResult(tuple(done), tuple(failed))

    def _patch(
        self, kind: Kind, name: str, ns: str | None, body: JSON, done: list[str], failed: list[str]
    ) -> None:
        what = f"{kind.kind} {ns + '/' if ns else ''}{name}"
        try:
            self.cluster.patch(kind, name, body, ns, subresource="status")
            done.append(what)
        except NotFound:
            return
        except ApiError as exc:
            failed.append(f"{what}: {exc}")

    def run(self, now: float) -> tuple[KCCPlan, ApplyResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)
