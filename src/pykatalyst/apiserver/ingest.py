"""Taking a caller's value into the store: a private copy that holds only JSON, or a 400
naming where the first value JSON cannot hold sits."""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

from pykatalyst.cluster.protocol import BadRequest

MAX_DEPTH: Final = 128
"""The deepest nesting of objects and arrays a stored object may have (Kubernetes objects
nest a few dozen levels at most; a 900-deep body is refused, not a crash)."""

_JSON_SCALARS = (str, int, float, bool, type(None))
_EXACT_SCALARS = (str, int, bool, type(None))  # floats are checked: NaN and Inf are not JSON


class _NotJSON(Exception):
    pass


@contextlib.contextmanager
def bulk_copy(n: int) -> Iterator[None]:
    """Pause the cyclic garbage collector while copying many objects. Copies build no
    cycles, yet their allocations trigger full collections that rescan the whole store:
    that more than doubles the cost of listing 50,000 pods."""
    if n < 1000 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def ingest(value: Any) -> Any:
    """A copy of `value` made of JSON types only (tuples become lists, mappings dicts)."""
    try:
        return _ingest_fast(value)
    except _NotJSON:
        _locate_non_json(value, "")
        raise BadRequest("the object is not JSON") from None  # pragma: no cover


def _ingest_fast(value: Any, depth: int = 0) -> Any:
    t = type(value)
    if depth > MAX_DEPTH:
        raise _NotJSON
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotJSON
            out[k] = v if type(v) in _EXACT_SCALARS else _ingest_fast(v, depth + 1)
        return out
    if t is list or t is tuple:
        return [v if type(v) in _EXACT_SCALARS else _ingest_fast(v, depth + 1) for v in value]
    if t is float:
        if not math.isfinite(value):
            raise _NotJSON
        return value
    if t in _JSON_SCALARS:
        return value
    if isinstance(value, Mapping):
        return _ingest_fast(dict(value), depth)
    raise _NotJSON


def _locate_non_json(value: Any, path: str, depth: int = 0) -> None:
    """The slow walk that runs only to explain a rejection."""
    if depth > MAX_DEPTH:
        raise BadRequest(
            f"{path or 'object'}: nested deeper than {MAX_DEPTH} levels of objects and arrays"
        )
    if isinstance(value, Mapping):
        for k, v in value.items():
            if type(k) is not str:
                raise BadRequest(f"{path or 'object'}: key {k!r} is not a string")
            _locate_non_json(v, f"{path}.{k}" if path else k, depth + 1)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _locate_non_json(v, f"{path}[{i}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise BadRequest(
            f"{path or 'object'}: {value!r} is not a JSON number (NaN and Infinity are refused)"
        )
    elif type(value) not in _JSON_SCALARS:
        raise BadRequest(
            f"{path or 'object'}: {type(value).__name__} {value!r} is not a JSON value "
            "(accepted: object, array, string, number, boolean, null)"
        )
