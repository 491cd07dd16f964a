"""Where a resource portrait's history comes from: a Prometheus `query_range` (as
Katalyst's portrait plugin reads it) or samples recorded in process. Both answer
`history(namespace, workload, metric, query, start, end, step_s)` with (time, value) pairs,
oldest first, or raise HistoryError saying why (Prometheus's own error for a rejected
query)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Sequence
from typing import Protocol

DEFAULT_TIMEOUT_S = 30.0
MAX_REPLY_BYTES = 64 * 1024 * 1024

Samples = list[tuple[float, float]]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class HistoryError(RuntimeError):
    """The history could not be read; the message says why."""


class HistorySource(Protocol):
    name: str

    def history(
        self,
        namespace: str,
        workload: str,
        metric: str,
        query: str,
        start: float,
        end: float,
        step_s: float,
    ) -> Samples: ...


class PrometheusHistory:
    """`GET <address>/api/v1/query_range`; the query must give exactly one series (as
    Katalyst requires)."""

    def __init__(self, address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if not address.startswith(("http://", "https://")):
            raise ValueError(f"--prometheus-address {address!r}: expected http:// or https://")
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        self.name = f"prometheus {self.address}"

    def _get(self, params: dict[str, str]) -> dict[str, object]:
        url = f"{self.address}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                body = resp.read(MAX_REPLY_BYTES)
        except urllib.error.HTTPError as exc:
            body = exc.read(MAX_REPLY_BYTES)
        except (urllib.error.URLError, OSError) as exc:
            raise HistoryError(f"{self.name}: {getattr(exc, 'reason', exc)}") from None
        try:
            reply = json.loads(body)
        except ValueError:
            raise HistoryError(f"{self.name}: the reply is not JSON") from None
        if not isinstance(reply, dict):
            raise HistoryError(f"{self.name}: the reply is not a JSON object")
        return reply

    def history(
        self,
        namespace: str,
        workload: str,
        metric: str,
        query: str,
        start: float,
        end: float,
        step_s: float,
    ) -> Samples:
        params = {
            "query": query,
            "start": _num(start),
            "end": _num(end),
            "step": _num(step_s) + "s",
        }
        reply = self._get(params)
        if reply.get("status") != "success":
            raise HistoryError(
                f"{self.name} rejected {metric} ({query}): "
                f"{reply.get('errorType', 'error')}: {reply.get('error', 'no reason given')}"
            )
        data = reply.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or len(result) != 1:
            n = len(result) if isinstance(result, list) else 0
            raise HistoryError(f"{metric} ({query}): {n} series (expected exactly one)")
        values = result[0].get("values") if isinstance(result[0], dict) else None
        try:
            return [(float(t), float(v)) for t, v in values or []]
        except (TypeError, ValueError):
            raise HistoryError(f"{metric} ({query}): samples are not [time, value] pairs") from None


class SampleHistory:
    """Samples recorded in process per (namespace, workload, metric), at most `capacity`
    each (a week of minutes by default); the query text is not used."""

    name = "recorded samples"

    def __init__(self, capacity: int = 7 * 1440 + 1) -> None:
        self.capacity = capacity
        self._series: dict[tuple[str, str, str], deque[tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def record(self, namespace: str, workload: str, metric: str, t: float, value: float) -> None:
        with self._lock:
            key = (namespace, workload, metric)
            series = self._series.setdefault(key, deque(maxlen=self.capacity))
            series.append((t, value))

    def extend(
        self, namespace: str, workload: str, metric: str, samples: Sequence[tuple[float, float]]
    ) -> None:
        for t, v in samples:
            self.record(namespace, workload, metric, t, v)

    def history(
        self,
        namespace: str,
        workload: str,
        metric: str,
        query: str,
        start: float,
        end: float,
        step_s: float,
    ) -> Samples:
        with self._lock:
            series = list(self._series.get((namespace, workload, metric), ()))
        return [(t, v) for t, v in series if start <= t <= end]
