"""Usage series from Prometheus, with Katalyst's ResourceRecommend queries (the I/O edge).

Cpu is ``rate(container_cpu_usage_seconds_total{...}[30s])`` and memory
``container_memory_working_set_bytes{...}``, both filtered by namespace, a pod-name pattern and
``container!="POD"`` (plus ``container!=""``), queried as range queries at a 1-minute step
split into pieces of at most 11,000 points (Katalyst's limit). All pods' series of one
container are merged into one sample set, as Katalyst does; a sample needs both its cpu and
its memory point.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pykatalyst.recommend.model import UsageSeries

MAX_POINTS = 11_000
DEFAULT_STEP_S = 60.0
DEFAULT_TIMEOUT_S = 180.0


class PrometheusError(RuntimeError):
    """Prometheus could not be asked, or its answer was not a usable matrix."""


def _literal(name: str) -> str:
    """`name` as a regular expression that matches just it, as Katalyst writes names in
    its patterns: letters, digits, `-` and `_` as they are, anything else in a
    one-character class (`.` becomes `[.]`, which Katalyst leaves a wildcard; the few
    characters special inside a class by their hex escape). No `\\-` as Python's
    `re.escape` writes it: a PromQL string refuses escapes Go does not know."""
    out = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch in "-_"):
            out.append(ch)
        elif ch in "\\]^[":
            out.append(f"[\\x{ord(ch):02x}]")
        else:
            out.append(f"[{ch}]")
    return "".join(out)


def deployment_pod_pattern(name: str) -> str:
    """Katalyst's pod-name pattern for a Deployment's pods."""
    return f"^{_literal(name)}-[a-z0-9]+-[a-z0-9]{{5}}$"


def workload_pod_pattern(name: str, kind: str = "Deployment") -> str:
    """Katalyst's pod-name pattern: exact for Deployments, a prefix for other kinds."""
    if kind == "Deployment":
        return deployment_pod_pattern(name)
    return f"^{_literal(name)}-.*"


def quote(value: str) -> str:
    """A PromQL double-quoted string literal of `value` (backslashes, quotes and newlines
    escaped as Go's strings escape them)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


# One PromQL label matcher: a label name, an operator, a double-quoted string.
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_MATCHERS = re.compile(rf"^{_MATCHER}(,{_MATCHER})*,?\s*$")


def check_base_filter(text: str) -> str:
    """A base filter (Katalyst's `--resourcerecommend-prometheus-promql-base-filter`): label
    matchers added to every query, e.g. `cluster="c1",group="Katalyst"`. Returns it without
    surrounding blanks or a trailing comma; ValueError says what is accepted."""
    text = text.strip()
    if text and not _MATCHERS.match(text):
        raise ValueError(
            f"{text!r}: accepted: PromQL label matchers separated by commas, each "
            'name="value" (or !=, =~, !~), e.g. cluster="c1",group="Katalyst"'
        )
    return text.rstrip(",").strip()


def _selector(namespace: str, pod_pattern: str, container: str | None, extra: str) -> str:
    labels = [
        'container!="POD"',
        'container!=""',
        f"namespace={quote(namespace)}",
        f"pod=~{quote(pod_pattern)}",
    ]
    if container:
        labels.append(f"container={quote(container)}")
    if extra:
        labels.append(extra)
    return "{" + ",".join(labels) + "}"


def cpu_query(
    namespace: str, pod_pattern: str, container: str | None = None, extra: str = ""
) -> str:
    """`extra`: label matchers added to the selector (the base filter, checked)."""
    selector = _selector(namespace, pod_pattern, container, extra)
    return f"rate(container_cpu_usage_seconds_total{selector}[30s])"


def memory_query(
    namespace: str, pod_pattern: str, container: str | None = None, extra: str = ""
) -> str:
    selector = _selector(namespace, pod_pattern, container, extra)
    return f"container_memory_working_set_bytes{selector}"


Fetch = Callable[[str, float], bytes]


def _urlopen(url: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as error:
        detail = error.read()[:300].decode("utf-8", "replace")
        raise PrometheusError(f"HTTP {error.code} from Prometheus: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise PrometheusError(f"cannot reach Prometheus at {url.split('?')[0]}: {error}") from None


@dataclass(frozen=True, slots=True)
class PrometheusClient:
    """A small client for ``/api/v1/query_range`` (the fetch function is injectable)."""

    url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    fetch: Fetch = _urlopen

    def query_range(
        self, query: str, start: float, end: float, step: float = DEFAULT_STEP_S
    ) -> list[tuple[dict[str, str], np.ndarray]]:
        """(labels, n×2 array of time, value) per series, pieces of at most 11,000 points."""
        out: dict[tuple[tuple[str, str], ...], list[np.ndarray]] = defaultdict(list)
        span = step * (MAX_POINTS - 1)
        piece = start
        while piece <= end:
            stop = min(end, piece + span)
            for labels, values in self._range(query, piece, stop, step):
                out[tuple(sorted(labels.items()))].append(values)
            piece = stop + step
        return [(dict(k), np.unique(np.concatenate(v), axis=0)) for k, v in out.items()]

    def _range(
        self, query: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], np.ndarray]]:
        # Prometheus keeps whole milliseconds and answers at start + k·step up to end: start
        # rounded down and end up, so the grid's last point is never after `end` (a point
        # at a run's own time stays inside that run's window) and none is lost at either end.
        first = math.floor(start * 1000) / 1000
        last = math.ceil(end * 1000) / 1000
        params = urllib.parse.urlencode(
            {"query": query, "start": f"{first:.3f}", "end": f"{last:.3f}", "step": f"{step:g}"}
        )
        body = self.fetch(f"{self.url.rstrip('/')}/api/v1/query_range?{params}", self.timeout_s)
        return _parse_matrix(body)


def _parse_matrix(body: bytes) -> list[tuple[dict[str, str], np.ndarray]]:
    try:
        data: Any = json.loads(body)
    except ValueError:
        raise PrometheusError(
            f"Prometheus answered with something not JSON: {body[:120]!r}"
        ) from None
    if not isinstance(data, dict) or data.get("status") != "success":
        error = data.get("error") if isinstance(data, dict) else None
        raise PrometheusError(f"Prometheus query failed: {error or str(data)[:200]}")
    result = data.get("data", {})
    if not isinstance(result, dict) or result.get("resultType") != "matrix":
        raise PrometheusError("Prometheus answered without a matrix (data.resultType)")
    series = []
    for item in result.get("result", []):
        try:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            values = np.array([[float(t), float(v)] for t, v in item["values"]], dtype=float)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PrometheusError(
                f"Prometheus answered a malformed series: {str(item)[:200]}"
            ) from None
        values = values.reshape(-1, 2)
        series.append((labels, values[np.isfinite(values).all(axis=1)]))
    return series


def read_workload_usage(
    client: PrometheusClient,
    namespace: str,
    workload: str,
    start: float,
    end: float,
    *,
    kind: str = "Deployment",
    step: float = DEFAULT_STEP_S,
    base_filter: str = "",
) -> dict[str, UsageSeries]:
    """Each container's usage for a workload's pods, all pods merged (Katalyst's way);
    `base_filter`'s label matchers (checked by `check_base_filter`) narrow every query."""
    pattern = workload_pod_pattern(workload, kind)
    extra = check_base_filter(base_filter)
    cpu = client.query_range(cpu_query(namespace, pattern, extra=extra), start, end, step)
    memory = client.query_range(memory_query(namespace, pattern, extra=extra), start, end, step)
    mem_by: dict[tuple[str, str], dict[float, float]] = {}
    for labels, values in memory:
        key = (labels.get("container", ""), labels.get("pod", ""))
        mem_by.setdefault(key, {}).update(
            zip(values[:, 0].tolist(), values[:, 1].tolist(), strict=True)
        )
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for labels, values in cpu:
        key = (labels.get("container", ""), labels.get("pod", ""))
        mem = mem_by.get(key, {})
        for t, c in values.tolist():
            m = mem.get(t)
            if m is not None and c >= 0 and m >= 0 and not math.isnan(c):
                rows[key[0]].append((t, c, m))
    out = {}
    for container, samples in sorted(rows.items()):
        array = np.array(samples, dtype=float)
        out[container] = UsageSeries.of(array[:, 0], array[:, 1], array[:, 2])
    return out
