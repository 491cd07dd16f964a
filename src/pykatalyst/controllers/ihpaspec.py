"""What an IntelligentHorizontalPodAutoscaler means, as Katalyst's `ihpa` controller reads
it: the HPA `ihpa-<name>` it stands for, the SPD resource-portrait config it asks for, the
VirtualWorkload that stands in for the target in Preview, and its status. Pure functions
of the objects (plain Kubernetes JSON) and the time.

The HPA keeps the IHPA's native metrics as they are and turns each `customMetric` into
the External metric `spd_agg_metrics` selecting the SPD (named after the target), the
resource (`identify`), the container `ihpa-predict` and the scope
`ResourcePortraitIndicatorPlugin`, with an AverageValue target of `value`; a zero value
for a cpu*/memory* metric becomes the sum of the pod template's requests times the
matching Resource metric's averageUtilization / 100 (in milli-units, truncated, as
Katalyst computes it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.duration import format_duration
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.controllers.cronbounds import Bound, CronMode, TimeBound, cron_replicas

JSON = dict[str, Any]

PREVIEW = "Preview"
AUTO = "Auto"
STRATEGIES = (PREVIEW, AUTO)

# Katalyst's ResourcePortrait defaults for an IHPA (spd indicator plugin `ihpa`).
DEFAULT_RESYNC_PERIOD_S = 3600
DEFAULT_INPUT_S = 60
DEFAULT_HISTORY_STEPS = 7 * 24 * 60
DEFAULT_OUTPUT = 1
DEFAULT_PREDICTION_STEPS = 2 * 60
DEFAULT_AGGREGATOR = "avg"

# Katalyst's preset metrics: name -> (aggregation, cAdvisor series, whether it is a rate).
_PRESETS: Mapping[str, tuple[str, str, bool]] = {
    "cpu_utilization_cfs_throttled_seconds": (
        "sum",
        "container_cpu_cfs_throttled_seconds_total",
        True,
    ),
    "cpu_utilization_user_seconds": ("sum", "container_cpu_user_seconds_total", True),
    "cpu_utilization_system_seconds": ("sum", "container_cpu_system_seconds_total", True),
    "cpu_utilization_usage_seconds": ("sum", "container_cpu_usage_seconds_total", True),
    "cpu_utilization_usage_seconds_avg": ("avg", "container_cpu_usage_seconds_total", True),
    "cpu_utilization_usage_seconds_max": ("max", "container_cpu_usage_seconds_total", True),
    "cpu_utilization": ("sum", "container_cpu_usage_seconds_total", True),
    "memory_utilization": ("sum", "container_memory_working_set_bytes", False),
    "memory_utilization_avg": ("avg", "container_memory_working_set_bytes", False),
    "memory_utilization_max": ("max", "container_memory_working_set_bytes", False),
    "network_packets_receive_packets": ("sum", "container_network_receive_packets_total", True),
    "network_packets_receive_dropped": (
        "sum",
        "container_network_receive_packets_dropped_total",
        True,
    ),
    "network_packets_receive_errors": ("sum", "container_network_receive_errors_total", True),
    "network_packets_transmit_packets": ("sum", "container_network_transmit_packets_total", True),
    "network_packets_transmit_dropped": (
        "sum",
        "container_network_transmit_packets_dropped_total",
        True,
    ),
    "network_packets_transmit_errors": ("sum", "container_network_transmit_errors_total", True),
    "network_io_receive": ("sum", "container_network_receive_bytes_total", True),
    "network_io_transmit": ("sum", "container_network_transmit_bytes_total", True),
    "disk_io_read": ("sum", "container_fs_reads_bytes_total", True),
    "disk_io_write": ("sum", "container_fs_writes_bytes_total", True),
}
PRESET_METRICS = frozenset(_PRESETS)


def preset_query(metric: str, namespace: str, workload: str, input_s: int) -> str | None:
    """The PromQL of a preset metric for a workload's pods (`<workload>.*`), with the rate
    window written as Go prints the input duration (60 s -> `1m0s`); None if not preset."""
    preset = _PRESETS.get(metric)
    if preset is None:
        return None
    agg, series, is_rate = preset
    sel = f'{series}{{namespace="{namespace}",pod=~"{workload}.*",container!=""}}'
    if not is_rate:
        sel = sel.replace(',container!=""', ', container!=""')
        return f"{agg}({sel})"
    return f"{agg}(rate({sel}[{format_duration(input_s)}]))"


class SpecError(ValueError):
    """An IHPA the controller cannot act on; the message names the field."""


@dataclass(frozen=True, slots=True)
class TargetRef:
    api_version: str
    kind: str
    name: str

    def to_json(self) -> JSON:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def target_ref(ihpa: Mapping[str, Any]) -> TargetRef:
    ref = _mapping(_mapping(_mapping(ihpa.get("spec")).get("autoscaler")).get("scaleTargetRef"))
    kind, name = ref.get("kind"), ref.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError("spec.autoscaler.scaleTargetRef.name: required")
    if kind not in ("Deployment", "StatefulSet") or ref.get("apiVersion", "apps/v1") != "apps/v1":
        raise SpecError(
            f"spec.autoscaler.scaleTargetRef: {ref.get('apiVersion')}/{kind} is not supported "
            "(accepted: apps/v1 Deployment, apps/v1 StatefulSet)"
        )
    return TargetRef("apps/v1", str(kind), name)


def workload_kind(ref: TargetRef) -> names.Kind:
    return names.DEPLOYMENT if ref.kind == "Deployment" else names.STATEFUL_SET


def hpa_name(ihpa_name: str) -> str:
    return names.IHPA_HPA_PREFIX + ihpa_name


def owner_reference(ihpa: Mapping[str, Any]) -> JSON:
    meta = _mapping(ihpa.get("metadata"))
    return {
        "apiVersion": names.INTELLIGENT_HPA.api_version,
        "kind": names.INTELLIGENT_HPA.kind,
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }


def template_requests_milli(template: Mapping[str, Any]) -> tuple[int, int]:
    """Σ cpu and Σ memory requests (milli-units) of the template's containers."""
    cpu = mem = 0
    for c in _mapping(template.get("spec")).get("containers") or []:
        req = _mapping(_mapping(_mapping(c).get("resources")).get("requests"))
        try:
            if "cpu" in req:
                cpu += Quantity.parse(str(req["cpu"])).milli_value()
            if "memory" in req:
                mem += Quantity.parse(str(req["memory"])).milli_value()
        except QuantityError:
            continue
    return cpu, mem


def spd_selector(target: str, identify: str) -> JSON:
    return {
        "matchLabels": {
            names.METRIC_SELECTOR_SPD_NAME: target,
            names.METRIC_SELECTOR_SPD_RESOURCE_NAME: identify,
            names.METRIC_SELECTOR_SPD_CONTAINER_NAME: names.IHPA_PREDICT_CONTAINER,
            names.METRIC_SELECTOR_SPD_SCOPE_NAME: names.RESOURCE_PORTRAIT_SCOPE,
        }
    }


def _custom_target_milli(
    i: int, custom: Mapping[str, Any], natives: Sequence[Mapping[str, Any]], cpu: int, mem: int
) -> int:
    try:
        milli = Quantity.parse(str(custom.get("value", "0"))).milli_value()
    except QuantityError as exc:
        raise SpecError(f"spec.autoscaler.metrics[{i}].customMetric.value: {exc}") from None
    if milli != 0:
        return milli
    identify = str(custom.get("identify", ""))
    for resource, total in (("cpu", cpu), ("memory", mem)):
        if not identify.startswith(resource):
            continue
        for m in natives:
            res = _mapping(m.get("resource"))
            util = _mapping(res.get("target")).get("averageUtilization")
            if res.get("name") == resource and isinstance(util, int):
                milli = int(float(total) * float(util) / 100.0)
    return milli


def metric_specs(ihpa: Mapping[str, Any], template: Mapping[str, Any]) -> list[JSON]:
    """The HPA's metrics: the native ones as given, then one External `spd_agg_metrics`
    per customMetric (Katalyst's order)."""
    auto = _mapping(_mapping(ihpa.get("spec")).get("autoscaler"))
    target = target_ref(ihpa).name
    entries = [_mapping(m) for m in auto.get("metrics") or []]
    natives = [dict(_mapping(e.get("metric"))) for e in entries if e.get("metric")]
    with_util = [
        m
        for m in natives
        if m.get("resource")
        and _mapping(_mapping(m["resource"]).get("target")).get("averageUtilization") is not None
    ]
    cpu, mem = template_requests_milli(template)
    out: list[JSON] = [json.loads(json.dumps(m)) for m in natives]
    for i, e in enumerate(entries):
        custom = _mapping(e.get("customMetric"))
        if e.get("metric") or not custom:
            continue
        identify = custom.get("identify")
        if not isinstance(identify, str) or not identify:
            raise SpecError(f"spec.autoscaler.metrics[{i}].customMetric.identify: required")
        milli = _custom_target_milli(i, custom, with_util, cpu, mem)
        out.append(
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": names.SPD_AGG_METRICS,
                        "selector": spd_selector(target, identify),
                    },
                    "target": {"type": "AverageValue", "averageValue": _milli_text(milli)},
                },
            }
        )
    return out


def _milli_text(milli: int) -> str:
    return Quantity.from_milli(milli).to_json()


def _time(value: Any, field: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return parse_rfc3339(str(value))
    except ValueError as exc:
        raise SpecError(f"{field}: {exc}") from None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def time_bounds(ihpa: Mapping[str, Any]) -> list[TimeBound]:
    out: list[TimeBound] = []
    for i, tb in enumerate(_mapping(ihpa.get("spec")).get("timeBounds") or []):
        tb = _mapping(tb)
        bounds = tuple(
            Bound(
                str(_mapping(b).get("cronTab", "")),
                _opt_int(_mapping(b).get("minReplicas")),
                _opt_int(_mapping(b).get("maxReplicas")),
            )
            for b in tb.get("bounds") or []
        )
        start = _time(tb.get("start"), f"spec.timeBounds[{i}].start")
        end = _time(tb.get("end"), f"spec.timeBounds[{i}].end")
        out.append(TimeBound(start, end, bounds))
    return out


def strategy(ihpa: Mapping[str, Any]) -> str:
    value = _mapping(ihpa.get("spec")).get("scaleStrategy") or PREVIEW
    if value not in STRATEGIES:
        raise SpecError(f"spec.scaleStrategy: {value!r} (accepted: Preview, Auto)")
    return str(value)


@dataclass(frozen=True, slots=True)
class DesiredHPA:
    hpa: JSON
    warnings: tuple[str, ...]


def desired_hpa(
    ihpa: Mapping[str, Any], template: Mapping[str, Any], now: float, mode: CronMode
) -> DesiredHPA:
    """The HPA the IHPA stands for at `now`; SpecError when it cannot be built. Crons that
    do not parse are skipped and reported as warnings."""
    meta = _mapping(ihpa.get("metadata"))
    auto = _mapping(_mapping(ihpa.get("spec")).get("autoscaler"))
    ref = target_ref(ihpa)
    max_r = _opt_int(auto.get("maxReplicas"))
    min_r = _opt_int(auto.get("minReplicas"))
    if max_r is None or max_r < 1:
        raise SpecError(f"spec.autoscaler.maxReplicas: {auto.get('maxReplicas')!r} (must be ≥ 1)")
    if min_r is not None and not 1 <= min_r <= max_r:
        raise SpecError(
            f"spec.autoscaler.minReplicas: {min_r} (must be between 1 and maxReplicas {max_r})"
        )
    scale_ref = ref.to_json()
    if strategy(ihpa) == PREVIEW:
        scale_ref = {
            "apiVersion": names.VIRTUAL_WORKLOAD.api_version,
            "kind": names.VIRTUAL_WORKLOAD.kind,
            "name": meta.get("name", ""),
        }
    min_r, max_r, warnings = cron_replicas(min_r, max_r, time_bounds(ihpa), now, mode)
    spec: JSON = {"scaleTargetRef": scale_ref, "maxReplicas": max_r}
    if min_r is not None:
        spec["minReplicas"] = min_r
    if auto.get("behavior"):
        spec["behavior"] = json.loads(json.dumps(auto["behavior"]))
    spec["metrics"] = metric_specs(ihpa, template)
    hpa: JSON = {
        "apiVersion": names.HORIZONTAL_POD_AUTOSCALER.api_version,
        "kind": names.HORIZONTAL_POD_AUTOSCALER.kind,
        "metadata": {
            "name": hpa_name(str(meta.get("name", ""))),
            "namespace": meta.get("namespace", ""),
            "ownerReferences": [owner_reference(ihpa)],
            "annotations": {names.IHPA_SPEC_HASH_ANNOTATION: spec_hash(spec)},
        },
        "spec": spec,
    }
    return DesiredHPA(hpa, tuple(warnings))


def spec_hash(spec: Mapping[str, Any]) -> str:
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def portrait_config(ihpa: Mapping[str, Any]) -> JSON:
    """The SPD ResourcePortrait config the IHPA asks for (Katalyst's `ihpa` indicator
    plugin): its algorithmConfig with the defaults filled in, the preset metrics it names
    and its other custom metrics with their PromQL."""
    spec = _mapping(ihpa.get("spec"))
    algo = json.loads(json.dumps(_mapping(spec.get("algorithmConfig"))))
    window = algo.setdefault("timeWindow", {})
    algo["method"] = algo.get("method") or names.RESOURCE_PORTRAIT_METHOD_PREDICT
    algo["resyncPeriod"] = algo.get("resyncPeriod") or DEFAULT_RESYNC_PERIOD_S
    for key, default in (
        ("input", DEFAULT_INPUT_S),
        ("historySteps", DEFAULT_HISTORY_STEPS),
        ("aggregator", DEFAULT_AGGREGATOR),
        ("output", DEFAULT_OUTPUT),
        ("predictionSteps", DEFAULT_PREDICTION_STEPS),
    ):
        window[key] = window.get(key) or default
    presets: list[str] = []
    custom: dict[str, str] = {}
    for e in _mapping(spec.get("autoscaler")).get("metrics") or []:
        cm = _mapping(_mapping(e).get("customMetric"))
        if _mapping(e).get("metric") or not cm:
            continue
        identify = str(cm.get("identify", ""))
        if identify in PRESET_METRICS:
            presets.append(identify)
        else:
            custom[identify] = str(cm.get("query", ""))
    out: JSON = {"source": names.RESOURCE_PORTRAIT_SOURCE_IHPA, "algorithmConfig": algo}
    if presets:
        out["metrics"] = presets
    if custom:
        out["customMetrics"] = custom
    return out


def portrait_indicator(configs: Sequence[JSON]) -> JSON:
    return {"name": names.RESOURCE_PORTRAIT_INDICATOR, "indicators": {"configs": list(configs)}}


def latest_portrait_point(spd: Mapping[str, Any], now: float) -> Mapping[str, Any] | None:
    """The `ihpa-predict` usage of the latest ResourcePortrait item whose timestamp is
    before `now` (Katalyst's test), or None."""
    for agg in _mapping(spd.get("status")).get("aggMetrics") or []:
        if _mapping(agg).get("scope") != names.RESOURCE_PORTRAIT_SCOPE:
            continue
        current: Mapping[str, Any] | None = None
        for item in _mapping(agg).get("items") or []:
            try:
                ts = parse_rfc3339(str(_mapping(item).get("timestamp", "")))
            except ValueError:
                continue
            if ts >= now:
                break
            current = _mapping(item)
        if current is None:
            return None
        for c in current.get("containers") or []:
            if _mapping(c).get("name") == names.IHPA_PREDICT_CONTAINER:
                return _mapping(_mapping(c).get("usage"))
        return None
    return None


def desired_replicas(
    hpa_metrics: Sequence[Mapping[str, Any]], target: str, spd: Mapping[str, Any], now: float
) -> int | None:
    """max over the predicted metrics of ⌈predicted / target averageValue⌉ (milli-units);
    None when the SPD has no current point (the status field is then left as it is)."""
    usage = latest_portrait_point(spd, now)
    if usage is None:
        return None
    best = 0
    for resource, qty in usage.items():
        for m in hpa_metrics:
            ext = _mapping(m.get("external"))
            sel = _mapping(_mapping(_mapping(ext.get("metric")).get("selector")).get("matchLabels"))
            avg = _mapping(ext.get("target")).get("averageValue")
            if (
                m.get("type") != "External"
                or _mapping(ext.get("metric")).get("name") != names.SPD_AGG_METRICS
                or sel != spd_selector(target, str(resource))["matchLabels"]
                or avg is None
            ):
                continue
            try:
                per = Quantity.parse(str(avg)).milli_value()
                have = Quantity.parse(str(qty)).milli_value()
            except QuantityError:
                continue
            if per:
                best = max(best, math.ceil(have / per))
    return best
