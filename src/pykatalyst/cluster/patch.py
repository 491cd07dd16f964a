"""The three patch flavours the API server accepts, over plain JSON values.

- JSON merge patch (RFC 7386): objects merge recursively, `null` deletes a key, anything
  else (lists included) replaces.
- JSON patch (RFC 6902): add / remove / replace / move / copy / test with JSON pointers.
- Strategic merge patch, reduced to what the system touches: a merge patch in which the
  lists Kubernetes merges by key (containers and volumes by `name`, conditions by `type`,
  ...) are merged item by item, and a list item `{"$patch": "delete", KEY: ...}` removes
  that item. `finalizers` merge as a set of strings (`$deleteFromPrimitiveList/finalizers`
  removes some). Every other list is replaced, as in a merge patch: a node's `taints` too.

All functions return new values and never modify their inputs, so a failing patch leaves
nothing half-applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykatalyst.cluster.protocol import JSON


class PatchError(ValueError):
    """A patch that cannot be applied; `test_failed` marks a failed RFC 6902 `test`."""

    def __init__(self, message: str, test_failed: bool = False, malformed: bool = False) -> None:
        super().__init__(message)
        self.test_failed = test_failed
        self.malformed = malformed


def copy_json(value: Any) -> Any:
    """Deep copy of a JSON value (dicts, lists, scalars); several times faster than
    copy.deepcopy, which matters because every object handed out is a copy."""
    if type(value) is dict:
        return copy_object(value)
    if type(value) is list:
        return [copy_json(v) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS = frozenset((dict, list))


def copy_object(obj: JSON) -> JSON:
    """`copy_json` for an object (a dict), typed as one."""
    # A shallow copy in C, then only the nested containers replaced: most of an object's
    # values are scalars, so this touches far fewer entries in Python than a comprehension.
    # Assigning to keys already present never resizes the dict, so iterating is safe.
    out = obj.copy()
    for k, v in out.items():
        if type(v) in _CONTAINERS:
            out[k] = copy_json(v)
    return out


# --- RFC 7386 ----------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy_json(patch)
    result: JSON = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = copy_json(value)
    return result


# --- strategic merge (simplified) --------------------------------------------------------

# List fields Kubernetes merges by a key instead of replacing; keyed by the field's name.
STRATEGIC_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "ownerReferences": "uid",
    "resourceClaims": "name",
}


# Lists of strings Kubernetes merges as sets (patchStrategy "merge" without a key).
STRATEGIC_MERGE_SETS: frozenset[str] = frozenset({"finalizers"})
_DELETE_FROM = "$deleteFromPrimitiveList/"


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy_json(patch)
    if patch.get("$patch") == "replace":
        return {k: copy_json(v) for k, v in patch.items() if k != "$patch"}
    result: JSON = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = strategic_merge_patch(result.get(key), value)
        elif isinstance(value, list) and key in STRATEGIC_MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, STRATEGIC_MERGE_KEYS[key])
        elif isinstance(value, list) and key in STRATEGIC_MERGE_SETS:
            result[key] = _merge_set(result.get(key), value)
        else:
            result[key] = copy_json(value)
    for key, value in patch.items():
        field = key[len(_DELETE_FROM) :]
        if key.startswith(_DELETE_FROM) and isinstance(result.get(field), list):
            gone = value if isinstance(value, list) else [value]
            result[field] = [v for v in result[field] if v not in gone]
    return result


def _merge_set(current: Any, patch: list[Any]) -> list[Any]:
    """A set-like list of scalars: the union, in the API server's order. Items only the
    server has are interleaved with the patch's by their place in the server's list; an
    item the server has not seen goes before a server-only item."""
    server = list(current) if isinstance(current, list) else []
    patched = list(dict.fromkeys(patch))
    left = [v for v in dict.fromkeys(server) if v not in patched]
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(patched):
        if j >= len(patched) or (
            i < len(left)
            and patched[j] in server
            and server.index(left[i]) < server.index(patched[j])
        ):
            out.append(left[i])
            i += 1
        else:
            out.append(patched[j])
            j += 1
    merged: list[Any] = copy_json(out)
    return merged


def _merge_list(current: Any, patch: list[Any], merge_key: str) -> list[Any]:
    if not isinstance(current, list) or not all(
        isinstance(i, dict) and merge_key in i for i in patch
    ):
        return [i for i in copy_json(patch) if not (isinstance(i, dict) and "$patch" in i)]
    out: list[Any] = list(current)
    for item in patch:
        key = item[merge_key]
        idx = next(
            (n for n, cur in enumerate(out) if isinstance(cur, dict) and cur.get(merge_key) == key),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
        elif idx is None:
            out.append({k: copy_json(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


# --- RFC 6902 ----------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchError(f"path must be a string JSON pointer, got {path!r}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} is not a JSON pointer (it must start with '/')")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"path {path!r}: {token!r} is not an array index")
    idx = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if idx > limit:
        raise PatchError(f"path {path!r}: index {idx} is out of range")
    return idx


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise PatchError(f"path {path!r}: {tok!r} does not exist")
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_index(cur, tok, path, allow_end=False)]
        else:
            raise PatchError(f"path {path!r}: {tok!r} is inside a value that is not a container")
    return cur


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    tok = tokens[-1]
    if isinstance(parent, dict):
        if tok not in parent:
            raise PatchError(f"path {path!r} does not exist")
        return parent[tok]
    if isinstance(parent, list):
        return parent[_index(parent, tok, path, allow_end=False)]
    raise PatchError(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    tok = tokens[-1]
    if isinstance(parent, dict):
        parent[tok] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tok, path, allow_end=True), value)
    else:
        raise PatchError(f"path {path!r}: the parent is not an object or array")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    tok = tokens[-1]
    if isinstance(parent, dict):
        if tok not in parent:
            raise PatchError(f"path {path!r} does not exist")
        del parent[tok]
    elif isinstance(parent, list):
        del parent[_index(parent, tok, path, allow_end=False)]
    else:
        raise PatchError(f"path {path!r} does not exist")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply an RFC 6902 patch; raises PatchError (the whole patch or nothing)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations", malformed=True)
    result = copy_json(doc)
    for n, op in enumerate(operations):
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise PatchError(
                f"operation {n} must be an object with 'op' and 'path': {op!r}", malformed=True
            )
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {n} ({kind} {path}) is missing 'value'")
        if kind == "add":
            result = _add(result, path, copy_json(op["value"]))
        elif kind == "remove":
            result = _remove(result, path)
        elif kind == "replace":
            _get(result, path)
            if _pointer(path):
                result = _remove(result, path)
            result = _add(result, path, copy_json(op["value"]))
        elif kind in ("move", "copy"):
            src = op.get("from")
            if not isinstance(src, str):
                raise PatchError(f"operation {n} ({kind} {path}) is missing 'from'")
            value = copy_json(_get(result, src))
            if kind == "move":
                if path.startswith(src + "/"):
                    raise PatchError(f"cannot move {src!r} into its own child {path!r}")
                result = _remove(result, src)
            result = _add(result, path, value)
        elif kind == "test":
            try:
                actual = _get(result, path)
            except PatchError as e:
                raise PatchError(f"test operation failed: {e}", test_failed=True) from None
            if not _json_equal(actual, op["value"]):
                raise PatchError(
                    f"test operation failed: {path} is {actual!r}, not {op['value']!r}",
                    test_failed=True,
                )
        else:
            raise PatchError(
                f"operation {n}: unknown op {kind!r}; accepted: add, remove, replace, move, "
                "copy, test",
                malformed=True,
            )
    return result


def _json_equal(a: Any, b: Any) -> bool:
    # JSON has one number type; Python's True == 1 must not pass a test against 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
