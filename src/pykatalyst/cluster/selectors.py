"""Label and field selectors with the API server's syntax and matching rules.

Label selectors accept the full string syntax (`a=b`, `a==b`, `a!=b`, `a in (x,y)`,
`a notin (x)`, `a`, `!a`, comma meaning AND) and the structured `matchLabels` /
`matchExpressions` form used inside objects. Field selectors accept `=`, `==` and `!=` on
the fields the API server indexes for each kind; any other field is a 400, as on a real
server, because silently ignoring it would return objects the caller did not ask for.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pykatalyst.cluster.protocol import BadRequest

_LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

OPERATORS = ("=", "==", "!=", "in", "notin", "exists", "!")


# Every write validates its object's label and annotation keys (and label values); the same
# few recur, so their answers are remembered.
@functools.lru_cache(maxsize=4096)
def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_KEY_NAME.match(name))


@functools.lru_cache(maxsize=4096)
def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


@dataclass(frozen=True, slots=True)
class Requirement:
    """One clause of a label selector. `op` is one of `=`, `!=`, `in`, `notin`, `exists`,
    `!` (does not exist); `==` is normalised to `=`."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "in"):
            return value is not None and value in self.values
        # `!=` and `notin` also match objects that lack the key, as on the API server.
        return value is None or value not in self.values


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            vals = sorted(r.values)
            if r.op == "exists":
                parts.append(r.key)
            elif r.op == "!":
                parts.append(f"!{r.key}")
            elif r.op in ("=", "!="):
                parts.append(f"{r.key}{r.op}{vals[0]}")
            else:
                parts.append(f"{r.key} {r.op} ({','.join(vals)})")
        return ",".join(parts)


_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # pragma: no cover - the pattern matches any non-empty rest
            raise BadRequest(f"unable to parse requirement: {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _bad(selector: str, why: str) -> BadRequest:
    return BadRequest(f"unable to parse requirement: invalid label selector {selector!r}: {why}")


def _check_key(selector: str, key: str) -> str:
    if not valid_label_key(key):
        raise _bad(
            selector,
            f"key {key!r} is not a valid label key (an optional DNS subdomain prefix and '/', "
            "then up to 63 characters of [A-Za-z0-9-_.] starting and ending alphanumeric)",
        )
    return key


def _check_value(selector: str, value: str) -> str:
    if not valid_label_value(value):
        raise _bad(
            selector,
            f"value {value!r} is not a valid label value (up to 63 characters of "
            "[A-Za-z0-9-_.] starting and ending alphanumeric, or empty)",
        )
    return value


def parse_label_selector(selector: str | None) -> LabelSelector:
    """Parse the string form; raises BadRequest naming the bad part."""
    if selector is None or not selector.strip():
        return LabelSelector()
    toks = _tokens(selector)
    reqs: list[Requirement] = []
    i = 0
    n = len(toks)
    while i < n:
        tok = toks[i]
        if tok == "!":
            if i + 1 >= n:
                raise _bad(selector, "'!' must be followed by a key")
            reqs.append(Requirement(_check_key(selector, toks[i + 1]), "!"))
            i += 2
        else:
            key = _check_key(selector, tok)
            i += 1
            if i >= n or toks[i] == ",":
                reqs.append(Requirement(key, "exists"))
            elif toks[i] in ("=", "==", "!="):
                op = "!=" if toks[i] == "!=" else "="
                i += 1
                value = ""
                if i < n and toks[i] != ",":
                    value = _check_value(selector, toks[i])
                    i += 1
                reqs.append(Requirement(key, op, frozenset((value,))))
            elif toks[i] in ("in", "notin"):
                op = toks[i]
                values, i = _set_values(selector, toks, i + 1, op)
                reqs.append(Requirement(key, op, values))
            else:
                raise _bad(
                    selector,
                    f"unexpected {toks[i]!r} after key {key!r}; accepted operators: "
                    "=, ==, !=, in, notin",
                )
        if i < n:
            if toks[i] != ",":
                raise _bad(selector, f"expected ',' but found {toks[i]!r}")
            i += 1
            if i >= n:
                raise _bad(selector, "trailing ','")
    return LabelSelector(tuple(reqs))


def _set_values(selector: str, toks: list[str], i: int, op: str) -> tuple[frozenset[str], int]:
    """The values of a set-based requirement, "(a, b)" from `toks[i]` on, and the position
    after its ")"."""
    n = len(toks)
    if i >= n or toks[i] != "(":
        raise _bad(selector, f"expected '(' after {op!r}")
    i += 1
    values: set[str] = set()
    expect_value = True
    while i < n and toks[i] != ")":
        if toks[i] == ",":
            if expect_value:
                values.add("")
            expect_value = True
        else:
            if not expect_value:
                raise _bad(selector, "expected ',' between set values")
            values.add(_check_value(selector, toks[i]))
            expect_value = False
        i += 1
    if i >= n:
        raise _bad(selector, "missing ')'")
    if not values:
        raise _bad(selector, f"{op!r} needs at least one value")
    return frozenset(values), i + 1


def label_selector_from_dict(spec: Mapping[str, Any] | None) -> LabelSelector:
    """The structured `{matchLabels, matchExpressions}` form (e.g. a PDB's selector)."""
    if not spec:
        return LabelSelector()
    reqs: list[Requirement] = [
        Requirement(str(k), "=", frozenset((str(v),)))
        for k, v in (spec.get("matchLabels") or {}).items()
    ]
    for expr in spec.get("matchExpressions") or []:
        op = str(expr.get("operator", ""))
        key = str(expr.get("key", ""))
        values = frozenset(str(v) for v in expr.get("values") or [])
        mapping = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        if op not in mapping:
            raise BadRequest(
                f"matchExpressions[].operator: unsupported value {op!r}; "
                f"accepted: {', '.join(mapping)}"
            )
        reqs.append(Requirement(key, mapping[op], values))
    return LabelSelector(tuple(reqs))


# --- field selectors ----------------------------------------------------------------------

FieldGetter = Callable[[Mapping[str, Any]], str]


def format_label_selector(sel: Mapping[str, Any]) -> str:
    """A structured `{matchLabels, matchExpressions}` selector as a string, written as
    kube-apiserver writes it (a Scale's `status.selector`)."""
    labels = sel.get("matchLabels")
    parts = [f"{k}={v}" for k, v in sorted((labels if isinstance(labels, Mapping) else {}).items())]
    for e in sel.get("matchExpressions") or []:
        e = e if isinstance(e, Mapping) else {}
        key, op = str(e.get("key", "")), str(e.get("operator", ""))
        values = ",".join(sorted(str(v) for v in e.get("values") or []))
        if op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {op.lower()} ({values})")
    return ",".join(parts)


def _path_getter(*path: str, default: str = "") -> FieldGetter:
    def get(obj: Mapping[str, Any]) -> str:
        cur: Any = obj
        for p in path:
            if not isinstance(cur, Mapping):
                return default
            cur = cur.get(p)
            if cur is None:
                return default
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


_COMMON_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": _path_getter("metadata", "name"),
    "metadata.namespace": _path_getter("metadata", "namespace"),
}

# The fields the API server supports per resource ("plural.group"), beyond the common ones.
KIND_FIELDS: dict[str, dict[str, FieldGetter]] = {
    "pods": {
        "spec.nodeName": _path_getter("spec", "nodeName"),
        "spec.schedulerName": _path_getter("spec", "schedulerName"),
        "spec.restartPolicy": _path_getter("spec", "restartPolicy"),
        "spec.serviceAccountName": _path_getter("spec", "serviceAccountName"),
        "status.phase": _path_getter("status", "phase"),
        "status.podIP": _path_getter("status", "podIP"),
        "status.nominatedNodeName": _path_getter("status", "nominatedNodeName"),
    },
    # An unset spec.unschedulable is false, as the API server's field set reads it.
    "nodes": {"spec.unschedulable": _path_getter("spec", "unschedulable", default="false")},
    "events": {
        "involvedObject.kind": _path_getter("involvedObject", "kind"),
        "involvedObject.namespace": _path_getter("involvedObject", "namespace"),
        "involvedObject.name": _path_getter("involvedObject", "name"),
        "involvedObject.uid": _path_getter("involvedObject", "uid"),
        "involvedObject.fieldPath": _path_getter("involvedObject", "fieldPath"),
        "reason": _path_getter("reason"),
        "source": _path_getter("source", "component"),
        "type": _path_getter("type"),
    },
    "namespaces": {"status.phase": _path_getter("status", "phase")},
    # An unset spec.nodeName reads as "", as the API server's field set has it.
    "resourceslices.resource.k8s.io": {
        "spec.nodeName": _path_getter("spec", "nodeName"),
        "spec.driver": _path_getter("spec", "driver"),
    },
}


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str
    getter: FieldGetter

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.getter(obj) == self.value) == (self.op == "=")


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def exact(self, field: str) -> str | None:
        """The value an `=` clause pins `field` to, for index lookups."""
        for r in self.requirements:
            if r.field == field and r.op == "=":
                return r.value
        return None


def supported_fields(resource: str) -> list[str]:
    return sorted({*_COMMON_FIELDS, *KIND_FIELDS.get(resource, {})})


def parse_field_selector(selector: str | None, resource: str) -> FieldSelector:
    """Parse `field=value,field!=value` for `resource` ("pods", "nodes", ...)."""
    if selector is None or not selector.strip():
        return FieldSelector()
    fields = {**_COMMON_FIELDS, **KIND_FIELDS.get(resource, {})}
    reqs: list[FieldRequirement] = []
    for clause in selector.split(","):
        clause = clause.strip()
        if not clause:
            raise BadRequest(f"invalid field selector {selector!r}: empty clause")
        for op_text in ("!=", "==", "="):
            if op_text in clause:
                field, _, value = clause.partition(op_text)
                op = "!=" if op_text == "!=" else "="
                break
        else:
            raise BadRequest(
                f"invalid field selector {selector!r}: {clause!r} has no operator; "
                "accepted operators: =, ==, !="
            )
        field = field.strip()
        getter = fields.get(field)
        if getter is None:
            raise BadRequest(
                f'field label not supported: {field} (resource "{resource}" supports: '
                f"{', '.join(supported_fields(resource))})"
            )
        reqs.append(FieldRequirement(field, op, value.strip(), getter))
    return FieldSelector(tuple(reqs))
