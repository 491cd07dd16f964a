"""The SPD ResourcePortrait indicator: predicted points in SPD `status.aggMetrics`.

For each SPD whose `extendedIndicator` ResourcePortrait lists configs (the `ihpa`
controller writes one per IHPA), once per `resyncPeriod` (Katalyst's rule: when the first
kept point of the config's container is older than that, or there is none):

1. gather: each metric's history over `historySteps` × `input` seconds up to now
   (minute-aligned) from the history source (Prometheus, or recorded samples), with
   Katalyst's preset PromQL or the config's own;
2. predict: Katalyst's `/openapi/tsa/predict` request, answered in process or by the
   service at `--spd-resource-portrait-indicator-plugin-algorithm-serving-address`;
3. decide (pure): the reply's points aggregated by `output` steps (avg or max), written as
   items of the container `<source>-<method>` (`ihpa-predict`) with the periodicity as
   `periodicity-<metric>`, merged over the kept points (new values win), past points
   dropped;
4. apply: a status patch of the scope `ResourcePortraitIndicatorPlugin` only, conditional
   on the SPD's resourceVersion so other scopes' entries written meanwhile are kept.

A query that fails or a predictor that fails is a Warning Event on the SPD naming why;
the points already there stay. Unlike Katalyst, a metric with less history than
`historySteps` is still sent: the built-in predictor then says it fell back to the
reactive value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pykatalyst.api import names
from pykatalyst.api.duration import format_duration, parse_duration
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, Conflict, NotFound
from pykatalyst.controllers.history import HistoryError, HistorySource, SampleHistory
from pykatalyst.controllers.ihpaspec import preset_query
from pykatalyst.predict.client import InProcessPredictor, Predictor, PredictorError
from pykatalyst.predict.contract import PredictReply

DEFAULT_PARAMS: Mapping[str, str] = {
    "quantile": "0.99",
    "scaleUpForward": "180",
    "duration": "1m",
    "step": "120",
}
REASON_FAILED = "ResourcePortraitFailed"


@dataclass(frozen=True, slots=True)
class PortraitConfig:
    source: str
    method: str
    resync_s: float
    input_s: int
    history_steps: int
    aggregator: str
    output: int
    params: Mapping[str, str]
    metrics: tuple[str, ...]
    custom: Mapping[str, str]

    @property
    def container(self) -> str:
        return f"{self.source}-{self.method}"


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _pos_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def portrait_configs(spd: Mapping[str, Any]) -> list[PortraitConfig]:
    """The SPD's valid ResourcePortrait configs (Katalyst's filter: source, a metric,
    method, resync and window fields set, aggregator avg or max)."""
    out: list[PortraitConfig] = []
    for ind in _m(spd.get("spec")).get("extendedIndicator") or []:
        if _m(ind).get("name") != names.RESOURCE_PORTRAIT_INDICATOR:
            continue
        for c in _m(_m(ind).get("indicators")).get("configs") or []:
            c = _m(c)
            algo = _m(c.get("algorithmConfig"))
            win = _m(algo.get("timeWindow"))
            metrics = tuple(str(m) for m in c.get("metrics") or [])
            custom = {str(k): str(v) for k, v in _m(c.get("customMetrics")).items()}
            nums = [_pos_int(win.get(k)) for k in ("input", "historySteps", "output")]
            if not c.get("source") or not (metrics or custom) or not algo.get("method"):
                continue
            if not _pos_int(algo.get("resyncPeriod")) or 0 in nums:
                continue
            if not _pos_int(win.get("predictionSteps")) or win.get("aggregator") not in (
                "avg",
                "max",
            ):
                continue
            params = {str(k): str(v) for k, v in _m(algo.get("params")).items()}
            out.append(
                PortraitConfig(
                    str(c["source"]),
                    str(algo["method"]),
                    float(algo["resyncPeriod"]),
                    nums[0],
                    nums[1],
                    str(win["aggregator"]),
                    nums[2],
                    {**DEFAULT_PARAMS, **params},
                    metrics,
                    custom,
                )
            )
    return out


def _scope(spd: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for agg in _m(spd.get("status")).get("aggMetrics") or []:
        if _m(agg).get("scope") == names.RESOURCE_PORTRAIT_SCOPE:
            return _m(agg)
    return None


def due(spd: Mapping[str, Any], cfg: PortraitConfig, now: float) -> bool:
    """True when the config's container has no kept point, or its first one is at least
    resyncPeriod old."""
    for item in _m(_scope(spd)).get("items") or []:
        if any(_m(c).get("name") == cfg.container for c in _m(item).get("containers") or []):
            try:
                return now - parse_rfc3339(str(_m(item).get("timestamp"))) >= cfg.resync_s
            except ValueError:
                return True
    return True


def queries(cfg: PortraitConfig, namespace: str, workload: str) -> dict[str, str]:
    out = dict(cfg.custom)
    for metric in cfg.metrics:
        q = preset_query(metric, namespace, workload, cfg.input_s)
        if q is not None:
            out[metric] = q
    return out


def prediction_request(
    cfg: PortraitConfig, history: Mapping[str, Sequence[tuple[float, float]]], now: float
) -> dict[str, Any]:
    """Katalyst's request: interval from params `duration`, steps from params `step`."""
    try:
        interval = int(parse_duration(cfg.params["duration"]))
        steps = int(cfg.params["step"])
    except ValueError as exc:
        raise ValueError(f"algorithmConfig.params duration/step: {exc}") from None
    return {
        "WorkloadName": "",
        "WorkloadNamespace": "",
        "WorkloadType": "",
        "ServingType": "",
        "Quantile": float(cfg.params["quantile"]),
        "ScaleUpForward": int(cfg.params["scaleUpForward"]),
        "Interval": interval,
        "PredictionStartTime": int(now) // 60 * 60,
        "PredictionDuration": interval * steps,
        "TimeSeries": {
            m: [{"Timestamp": int(t), "Value": float(v)} for t, v in pts]
            for m, pts in history.items()
        },
    }


def _aggregate(
    points: Sequence[tuple[int, float]], output: int, how: str
) -> list[tuple[int, float]]:
    """Groups of `output` points: the first point's time with the group's avg or max."""
    out: list[tuple[int, float]] = []
    for i in range(0, len(points), output):
        group = points[i : i + output]
        values = np.array([v for _, v in group])
        out.append((group[0][0], float(values.max() if how == "max" else values.mean())))
    return out


def _milli(value: float) -> str:
    return Quantity.from_milli(int(value * 1000)).to_json()


def portrait_items(
    existing: Sequence[Mapping[str, Any]], cfg: PortraitConfig, reply: PredictReply, now: float
) -> list[JSON]:
    """Pure: the scope's items after merging this config's new points (new values win for
    the same time and resource), past points dropped, sorted by time."""
    by_time: dict[float, JSON] = {}
    for item in existing:
        try:
            ts = parse_rfc3339(str(_m(item).get("timestamp")))
        except ValueError:
            continue
        by_time[ts] = json.loads(json.dumps(dict(item)))
    window = format_duration(cfg.input_s * cfg.output)
    periodicity = {
        names.PERIODICITY_PREFIX + k: _milli(v) for k, v in sorted(reply.Periodicity.items())
    }
    for metric, pts in sorted(reply.TimeSeries.items()):
        series = [(p.Timestamp, p.Value) for p in sorted(pts, key=lambda p: p.Timestamp)]
        for ts, value in _aggregate(series, cfg.output, cfg.aggregator):
            item = by_time.setdefault(
                float(ts), {"timestamp": rfc3339(ts), "window": window, "containers": []}
            )
            containers = item.setdefault("containers", [])
            mine = next((c for c in containers if c.get("name") == cfg.container), None)
            if mine is None:
                mine = {"name": cfg.container, "usage": {}}
                containers.append(mine)
            mine.setdefault("usage", {})[metric] = _milli(value)
            mine["usage"].update(periodicity)
    return [by_time[t] for t in sorted(by_time) if t > now]


def status_patch(spd: Mapping[str, Any], cfg: PortraitConfig, items: list[JSON]) -> JSON:
    """The status patch: the aggMetrics list with only this scope's entry replaced, sent
    with the resourceVersion it was computed from."""
    mine = {"aggregator": cfg.aggregator, "scope": names.RESOURCE_PORTRAIT_SCOPE, "items": items}
    entries = [dict(_m(a)) for a in _m(spd.get("status")).get("aggMetrics") or []]
    out = [a for a in entries if a.get("scope") != names.RESOURCE_PORTRAIT_SCOPE]
    at = next(
        (i for i, a in enumerate(entries) if a.get("scope") == names.RESOURCE_PORTRAIT_SCOPE),
        len(out),
    )
    out.insert(at, mine)
    rv = _m(spd.get("metadata")).get("resourceVersion", "")
    return {"metadata": {"resourceVersion": rv}, "status": {"aggMetrics": out}}


@dataclass(frozen=True, slots=True)
class PortraitUpdate:
    namespace: str
    name: str
    patch: JSON
    explain: str


@dataclass(frozen=True, slots=True)
class PortraitProblem:
    namespace: str
    name: str
    uid: str
    message: str


@dataclass(frozen=True, slots=True)
class PortraitPlan:
    time: float
    updates: tuple[PortraitUpdate, ...]
    problems: tuple[PortraitProblem, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "updates": [f"{u.namespace}/{u.name}: {u.explain}" for u in self.updates],
            "problems": [f"{p.namespace}/{p.name}: {p.message}" for p in self.problems],
        }

    def summary(self) -> str:
        return f"resource portrait: {len(self.updates)} SPDs updated, {len(self.problems)} problems"


class PortraitIndicator:
    """Gathers history and predictions for the SPDs that are due, and writes them."""

    def __init__(
        self,
        cluster: Cluster,
        history: HistorySource | None = None,
        predictor: Predictor | None = None,
        events: EventRecorder | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        self.history: HistorySource = history if history is not None else SampleHistory()
        self.predictor: Predictor = predictor if predictor is not None else InProcessPredictor()
        self.events = events or EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        shared = informers if informers is not None else InformerFactory(cluster)
        self._spds = shared.informer(names.SERVICE_PROFILE_DESCRIPTOR)

    def _history(
        self, spd: Mapping[str, Any], cfg: PortraitConfig, now: float
    ) -> dict[str, list[tuple[float, float]]]:
        meta = _m(spd.get("metadata"))
        ns = str(meta.get("namespace", ""))
        workload = str(_m(_m(spd.get("spec")).get("targetRef")).get("name") or meta.get("name"))
        end = float(int(now) // 60 * 60)
        start = end - cfg.input_s * cfg.history_steps
        out: dict[str, list[tuple[float, float]]] = {}
        for metric, q in sorted(queries(cfg, ns, workload).items()):
            samples = self.history.history(ns, workload, metric, q, start, end, cfg.input_s)
            if samples:
                out[metric] = samples
        return out

    def _one(self, spd: JSON, cfg: PortraitConfig, now: float) -> PortraitUpdate | None:
        meta = _m(spd.get("metadata"))
        history = self._history(spd, cfg, now)
        if not history:
            wanted = ", ".join(sorted(queries(cfg, "", "")))
            hint = (
                " (set --spd-resource-portrait-indicator-plugin-prometheus-address)"
                if isinstance(self.history, SampleHistory)
                else ""
            )
            raise HistoryError(f"no history for {wanted} from {self.history.name}{hint}")
        reply = self.predictor.predict(prediction_request(cfg, history, now))
        items = portrait_items(_m(_scope(spd)).get("items") or [], cfg, reply, now)
        patch = status_patch(spd, cfg, items)
        explain = reply.Reason or f"{len(items)} points from {self.predictor.name}"
        return PortraitUpdate(
            str(meta.get("namespace", "")), str(meta.get("name", "")), patch, explain
        )

    def reconcile(self, now: float) -> PortraitPlan:
        self._spds.sync()
        updates: dict[tuple[str, str], PortraitUpdate] = {}
        problems: list[PortraitProblem] = []
        for spd in self._spds.list():
            meta = _m(spd.get("metadata"))
            for cfg in portrait_configs(spd):
                if not due(spd, cfg, now):
                    continue
                try:
                    update = self._one(spd, cfg, now)
                except (HistoryError, PredictorError, ValueError) as exc:
                    problems.append(
                        PortraitProblem(
                            str(meta.get("namespace", "")),
                            str(meta.get("name", "")),
                            str(meta.get("uid", "")),
                            f"{cfg.container}: {exc}; the kept points stay",
                        )
                    )
                    continue
                if update is not None:
                    # a later config of the same SPD builds on this one's items
                    updates[(update.namespace, update.name)] = update
                    spd = {**spd, "status": update.patch["status"]}
        return PortraitPlan(now, tuple(updates.values()), tuple(problems))

    def apply(self, plan: PortraitPlan) -> tuple[list[str], list[str]]:
        done: list[str] = []
        failed: list[str] = []
        for u in plan.updates:
            try:
                self.cluster.patch(
                    names.SERVICE_PROFILE_DESCRIPTOR,
                    u.name,
                    u.patch,
                    u.namespace,
                    subresource="status",
                )
                done.append(f"SPD {u.namespace}/{u.name}: {u.explain}")
            except (Conflict, NotFound):
                continue  # changed meanwhile: next period recomputes from the fresh object
            except ApiError as exc:
                failed.append(f"SPD {u.namespace}/{u.name}: {exc}")
        for p in plan.problems:
            ref = ObjectRef(
                names.SERVICE_PROFILE_DESCRIPTOR.kind,
                p.name,
                p.namespace,
                p.uid,
                names.SERVICE_PROFILE_DESCRIPTOR.api_version,
            )
            self.events.record(ref, "Warning", REASON_FAILED, p.message, plan.time)
        return done, failed
