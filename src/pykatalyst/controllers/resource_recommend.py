"""ResourceRecommend: katalyst-core's `resourcerecommender` controller, fed by Prometheus.

Each ResourceRecommend whose `algorithmPolicy.recommender` is empty or `default` gets its
status filled as katalyst-core fills it (validation, conditions, `observedGeneration`,
`recommendResources`, `lastRecommendationTime`; see `rr_status`), from the percentile rule
of `pykatalyst.recommend` (recommender `katalyst`) over the workload's usage read from
Prometheus with Katalyst's PromQL. A recommender pykatalyst knows by another name (today
`pykatalyst`) is served the same way by that recommender; any other name is left to the
recommender it names, untouched.

Cadence (Katalyst's): an RR is recomputed when its generation changed or `resync_s` (24 h)
after its last recommendation; a run that fails (invalid, not ready, Prometheus down) is
retried after `retry_base_s` (1 min) doubling up to `retry_max_s` (30 min). Like Katalyst's
processor, each RR's histogram task starts when the controller first serves it, back-filling
25 h (the controller reads that history and everything since from Prometheus).

When Prometheus cannot be read (unreachable, too slow, an answer that is not a matrix),
`RecommendationProvided` turns False with reason `DataSourceUnavailable` and the error, and
the last good `recommendResources` and `lastRecommendationTime` stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.controllers import oom_record
from pykatalyst.controllers import rr_status as rs
from pykatalyst.controllers.usage_recommend import (
    PrometheusSource as PrometheusSource,
)
from pykatalyst.controllers.usage_recommend import (
    SourceUnavailable,
    UsageSource,
    recommend_container,
    source_for,
    template_resources,
    terms_text,
)
from pykatalyst.recommend import (
    CurrentResources,
    KatalystSettings,
    OOMEvent,
    Recommendation,
    RecommendationNotReady,
    UsageSeries,
    get_recommender,
    match_oom_records,
    recommender_names,
)
from pykatalyst.recommend.ensemble import PykatalystSettings
from pykatalyst.recommend.prometheus import PrometheusError, check_base_filter

RR = names.RESOURCE_RECOMMEND
HOUR = 3600.0
BACKFILL_S = 25 * HOUR
SUMMARY_RRS = 3  # the not-ready RRs a log line names
SOURCE_UNAVAILABLE = "DataSourceUnavailable"


# usage over recommendation: fine around 1, coarse far from it (VPA's quality figures)
QUALITY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)


class ResourceRecommendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prometheus_url: str | None = Field(None, description="Prometheus base URL")
    prometheus_timeout_s: float = Field(180.0, gt=0, description="one query's timeout")
    prometheus_base_filter: str = Field(
        "", description='label matchers added to every query, e.g. cluster="c1"'
    )
    resync_s: float = Field(24 * HOUR, gt=0, description="recompute this long after the last")
    retry_base_s: float = Field(60.0, gt=0, description="first retry after a failed run")
    retry_max_s: float = Field(1800.0, gt=0, description="longest wait between retries")
    min_span_s: float = Field(
        24 * HOUR, gt=0, description="samples must span this long (Katalyst: 24 h)"
    )
    max_history_s: float = Field(8 * 24 * HOUR, gt=0, description="oldest sample read")
    vpa_interval_s: float = Field(
        300.0,
        gt=0,
        description="a KVPA whose recommender is pykatalyst is recomputed this often (its "
        "hysteresis holds changes under change_threshold)",
    )

    @field_validator("prometheus_base_filter")
    @classmethod
    def _matchers(cls, value: str) -> str:
        return check_base_filter(value)


def parse_oom_records(cm: Mapping[str, Any] | None) -> list[OOMEvent]:
    """Katalyst's oom-record ConfigMap (key oom-data: a JSON list of {Namespace, Pod,
    Container, Memory, OOMAt}), in its order; unreadable entries are left out."""
    return oom_events(oom_record.read(cm, names.OOM_RECORD_KEY))


def oom_events(items: Sequence[Mapping[str, Any]]) -> list[OOMEvent]:
    out: list[OOMEvent] = []
    for item in items:
        try:
            out.append(
                OOMEvent(
                    timestamp=parse_rfc3339(str(item["OOMAt"])),
                    memory_request=float(Quantity.parse(str(item["Memory"])).value()),
                    pod=str(item["Pod"]),
                    namespace=str(item["Namespace"]),
                    container=str(item["Container"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


@dataclass(slots=True)
class RRMemory:
    """What the controller remembers between runs, per RR (namespace/name): when its task
    started, and the retry back-off after failed runs."""

    task_start: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    retry_at: dict[str, float] = field(default_factory=dict)


def _key(rr: Mapping[str, Any]) -> str:
    meta = rr.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_due(rr: Mapping[str, Any], mem: RRMemory, now: float, cfg: ResourceRecommendConfig) -> bool:
    """Katalyst's rule: a changed generation, or `resync_s` since the last recommendation;
    a failed run waits for its retry."""
    key = _key(rr)
    meta = rr.get("metadata") or {}
    raw = rr.get("status")
    status: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    changed = status.get("observedGeneration") != meta.get("generation")
    if not changed and now < mem.retry_at.get(key, 0.0):
        return False
    last = status.get("lastRecommendationTime")
    if isinstance(last, str) and not changed and key not in mem.failures:
        try:
            return now >= parse_rfc3339(last) + cfg.resync_s
        except ValueError:
            return True
    return True


@dataclass(frozen=True, slots=True)
class RRUpdate:
    """One RR's new status, and whether the run succeeded."""

    namespace: str
    name: str
    status: Mapping[str, Any]
    ok: bool
    summary: str
    # the terms annotation to write (container -> recommender and terms); None: keep it
    terms: str | None = None
    # VPA's quality figure: (resource, the latest usage over the new recommendation)
    quality: tuple[tuple[str, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"rr": f"{self.namespace}/{self.name}", "ok": self.ok, "summary": self.summary}


@dataclass(frozen=True, slots=True)
class RRPlan:
    time: float
    seen: int
    updates: tuple[RRUpdate, ...] = ()
    notes: tuple[str, ...] = ()
    # the oom-record ConfigMap's new oom-data (None: unchanged) and whether it exists
    oom_data: str | None = None
    oom_exists: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "resourceRecommends": self.seen,
            "updates": [u.to_json() for u in self.updates],
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        ok = sum(1 for u in self.updates if u.ok)
        why = [f"{u.namespace}/{u.name}: {u.summary}" for u in self.updates if not u.ok]
        more = f"; and {len(why) - SUMMARY_RRS} more" if len(why) > SUMMARY_RRS else ""
        return (
            f"resourcerecommender: {self.seen} ResourceRecommends; {ok} recommended, "
            f"{len(self.updates) - ok} not" + "".join(f"; {w}" for w in why[:SUMMARY_RRS]) + more
        )


def build_status(
    rr: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    now: float,
    targets: Sequence[rs.ContainerTarget] | None,
    keep_last: bool = False,
) -> dict[str, Any]:
    """The status to write: conditions (transition times kept when unchanged), the
    generation observed, and the recommendation (`targets`; None: none). `keep_last` keeps
    the last good recommendation and its time instead."""
    raw = rr.get("status")
    old: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    meta = rr.get("metadata") or {}
    status: dict[str, Any] = {
        "conditions": rs.merge_conditions(old.get("conditions") or [], conditions, now),
        "observedGeneration": meta.get("generation"),
        "recommendResources": None,
        "lastRecommendationTime": None,
    }
    if keep_last:
        status["recommendResources"] = old.get("recommendResources")
        status["lastRecommendationTime"] = old.get("lastRecommendationTime")
    elif targets:
        status["recommendResources"] = rs.recommend_resources(targets)
        status["lastRecommendationTime"] = rfc3339(now)
    return status


@dataclass(frozen=True, slots=True)
class Gathered:
    """What one RR's run read: the series per container (or the source's error)."""

    series: Mapping[str, UsageSeries] | None
    error: str = ""


def recommend(
    rr: Mapping[str, Any],
    cfg: rs.RRConfig,
    got: Gathered,
    oom: Sequence[OOMEvent],
    now: float,
    settings: tuple[float, float],
    template: Mapping[str, CurrentResources] | None = None,
    base: PykatalystSettings | None = None,
) -> tuple[dict[str, Any], bool, str, str | None, list[rs.ContainerTarget]]:
    """Pure: the status after a run over what was gathered; `settings` is (task start,
    readiness span), `template` what the pod template declares per container (hysteresis
    and limits), `base` pykatalyst's recommender's settings. Returns (status, ok, summary,
    the terms annotation or None, the containers' new targets)."""
    ok_conditions = [rs.condition(rs.VALIDATED, True), rs.condition(rs.INITIALIZED, True)]
    if got.series is None:
        cond = rs.condition(rs.PROVIDED, False, SOURCE_UNAVAILABLE, got.error)
        status = build_status(rr, [*ok_conditions, cond], now, None, keep_last=True)
        return status, False, got.error, None, []
    engine = get_recommender(cfg.recommender)
    targets: list[rs.ContainerTarget] = []
    terms: dict[str, Any] = {}
    for c in cfg.containers:
        series = got.series.get(c.name) or UsageSeries.of([], [], [])
        events = match_oom_records(oom, cfg.namespace, cfg.workload, c.name)
        current = (template or {}).get(c.name)
        chosen = _settings(engine.name, c, cfg, settings, base)
        try:
            r = recommend_container(engine, series, now, chosen, events, current)
        except RecommendationNotReady as exc:
            cond = rs.condition(rs.PROVIDED, False, rs.NOT_READY, exc.message)
            status = build_status(rr, [*ok_conditions, cond], now, targets or None)
            why = f"{c.name}: {exc.message}" + (f" ({exc.detail})" if exc.detail else "")
            return status, False, why, _terms_text(terms, now), []
        targets.append(_target(c.name, r, current))
        terms[c.name] = {"recommender": r.recommender, **r.to_json()["terms"]}
    cond = rs.condition(rs.PROVIDED, True)
    status = build_status(rr, [*ok_conditions, cond], now, targets)
    summary = f"{len(targets)} container(s) recommended"
    return status, True, summary, _terms_text(terms, now), targets


def quality(
    targets: Sequence[rs.ContainerTarget], series: Mapping[str, UsageSeries]
) -> tuple[tuple[str, float], ...]:
    """VPA's quality figure for each recommended container and resource: its latest usage
    sample over the recommended request (1: the request is what it uses now; below 1: room
    to spare). Containers without a sample, or resources without a recommendation, give
    none."""
    out: list[tuple[str, float]] = []
    for t in targets:
        used = series.get(t.name)
        if used is None or len(used) == 0:
            continue
        for resource, want, now_used in (
            (names.RESOURCE_CPU, t.cpu, float(used.cpu[-1])),
            (names.RESOURCE_MEMORY, t.memory, float(used.memory[-1])),
        ):
            if want is not None and want > 0:
                out.append((resource, now_used / want))
    return tuple(out)


def _terms_text(terms: Mapping[str, Any], now: float) -> str | None:
    return terms_text(terms, now) if terms else None


def _target(name: str, r: Recommendation, current: CurrentResources | None) -> rs.ContainerTarget:
    """A container's target: the requests, and a limit only where it differs from the
    declared one (a ResourceRecommend controls requests only; a request above its limit
    raises the limit, which the API server would otherwise refuse)."""
    cpu_lim = mem_lim = None
    if current is not None:
        if r.cpu_limit is not None and r.cpu_limit != current.cpu_limit:
            cpu_lim = r.cpu_limit
        if r.memory_limit is not None and r.memory_limit != current.memory_limit:
            mem_lim = r.memory_limit
    return rs.ContainerTarget(name, r.cpu_request, r.memory_request, cpu_lim, mem_lim)


def _settings(
    engine: str,
    c: rs.ContainerConfig,
    cfg: rs.RRConfig,
    settings: tuple[float, float],
    base: PykatalystSettings | None = None,
) -> Any:
    if engine != "katalyst":
        # Katalyst's ResourceRecommend accepts controlledValues RequestsOnly alone
        chosen = base if base is not None else PykatalystSettings()
        return chosen.model_copy(update={"controlled_values": "RequestsOnly"})
    half_life = rs.half_life_hours(cfg.extensions)
    return KatalystSettings(
        cpu_buffer_percent=c.buffer(names.RESOURCE_CPU),
        memory_buffer_percent=c.buffer(names.RESOURCE_MEMORY),
        half_life_hours=half_life if isinstance(half_life, int) else 24,
        resources=tuple(r.resource for r in c.resources),
        task_start_s=settings[0],
        min_span_s=settings[1],
    )


def served(recommender: str) -> bool:
    """Whether this controller serves the RR: Katalyst's default, or a recommender
    pykatalyst knows by that name (other than its internal name for the default)."""
    return recommender in ("", "default") or (
        recommender in recommender_names() and recommender != "katalyst"
    )


@dataclass(frozen=True, slots=True)
class RRResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed)}


def _result(status: Mapping[str, Any]) -> str:
    conds = {c["type"]: c for c in status.get("conditions") or []}
    provided = conds.get(rs.PROVIDED)
    if provided is None:
        return "invalid"
    if provided["status"] == "True":
        return "recommended"
    return "source_unavailable" if provided.get("reason") == SOURCE_UNAVAILABLE else "not_ready"


class ResourceRecommendController:
    """`reconcile(now)` gathers (informers, the oom-record ConfigMap, Prometheus for the
    RRs that are due) and decides each status; `apply(plan)` patches the status
    subresource."""

    name = names.CONTROLLER_RESOURCE_RECOMMEND

    def __init__(
        self,
        cluster: Cluster,
        config: ResourceRecommendConfig | None = None,
        *,
        source: UsageSource | None = None,
        registry: CollectorRegistry | None = None,
        settings: PykatalystSettings | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.cluster = cluster
        reg = registry if registry is not None else CollectorRegistry()
        self.runs = Counter(
            "katalyst_resource_recommend_runs",
            "ResourceRecommend runs by result: recommended, not_ready, invalid (a Validated or "
            "Initialized condition False), source_unavailable (Prometheus could not be read).",
            ["result"],
            registry=reg,
        )
        for result in ("recommended", "not_ready", "invalid", "source_unavailable"):
            self.runs.labels(result)
        self.usage_over_recommendation = Histogram(
            "katalyst_resource_recommend_usage_over_recommendation",
            "VPA's quality figure: each recommended container's latest usage over its new "
            "recommendation, by resource (1: it uses what it is given; below: room to spare).",
            ["resource"],
            buckets=QUALITY_BUCKETS,
            registry=reg,
        )
        self.config = config if config is not None else ResourceRecommendConfig()
        if source is None:
            cfg = self.config
            source = source_for(
                cfg.prometheus_url, cfg.prometheus_timeout_s, cfg.prometheus_base_filter
            )
        self.source = source
        self.settings = settings if settings is not None else PykatalystSettings()
        self.memory = RRMemory()
        shared = informers if informers is not None else InformerFactory(cluster)
        self._rrs = shared.informer(RR)
        self._deployments = shared.informer(names.DEPLOYMENT)
        self._pods = shared.informer(names.POD)

    def _oom_records(self, now: float) -> tuple[list[OOMEvent], str | None, bool]:
        """Katalyst's OOM recorder: the records with the kills the pods show now, and the
        ConfigMap's new oom-data when it changes (and whether the ConfigMap exists)."""
        cm: JSON | None
        try:
            cm = self.cluster.get(
                names.CONFIG_MAP, names.OOM_RECORD_CONFIG_MAP, names.KUBE_SYSTEM_NAMESPACE
            )
        except NotFound:
            cm = None
        except ApiError:
            return [], None, True  # unreadable now: neither used nor overwritten
        current = oom_record.read(cm, names.OOM_RECORD_KEY)
        self._pods.sync()
        merged = oom_record.merge(current, oom_record.observed(self._pods.list()), now)
        text = oom_record.text(merged)
        old = ((cm or {}).get("data") or {}).get(names.OOM_RECORD_KEY)
        changed = merged != current or (cm is None and merged)
        return oom_events(merged), text if changed and text != old else None, cm is not None

    def _workload(self, cfg_ns: str, rr: Mapping[str, Any]) -> tuple[JSON | None, str]:
        ref = (rr.get("spec") or {}).get("targetRef") or {}
        return self._deployments.get(str(ref.get("name", "")), cfg_ns), ""

    def reconcile(self, now: float) -> RRPlan:
        self._rrs.sync()
        notes: list[str] = []
        try:
            self._deployments.sync()
        except NotFound:
            notes.append("Deployments are not served by this API server")
        updates: list[RRUpdate] = []
        oom, oom_data, oom_exists = self._oom_records(now)
        rrs = self._rrs.list()
        for rr in sorted(rrs, key=_key):
            if not served(rs.recommender_of(rr)) or not is_due(rr, self.memory, now, self.config):
                continue
            updates.append(self._run(rr, oom, now))
        return RRPlan(now, len(rrs), tuple(updates), tuple(notes), oom_data, oom_exists)

    def _run(self, rr: JSON, oom: Sequence[OOMEvent], now: float) -> RRUpdate:
        meta = rr.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        workload, error = self._workload(ns, rr)
        cfg = rs.validate(rr, workload, error)
        if isinstance(cfg, rs.RRConfig):
            half_life = rs.half_life_hours(cfg.extensions)
            cfg = half_life if isinstance(half_life, rs.RRError) else cfg
        if isinstance(cfg, rs.RRError):
            conds = [rs.condition(cfg.condition, False, cfg.reason, cfg.message)]
            if cfg.condition == rs.INITIALIZED:
                conds.insert(0, rs.condition(rs.VALIDATED, True))
            status = build_status(rr, conds, now, None)
            return self._done(RRUpdate(ns, name, status, False, cfg.message), now)
        start = self.memory.task_start.setdefault(_key(rr), now)
        begin = max(start - BACKFILL_S, now - self.config.max_history_s)
        try:
            got = Gathered(self.source.read(ns, cfg.workload, cfg.kind, begin, now))
        except (PrometheusError, SourceUnavailable) as exc:
            got = Gathered(None, str(exc))
        status, ok, summary, terms, targets = recommend(
            rr,
            cfg,
            got,
            oom,
            now,
            (start, self.config.min_span_s),
            template_resources(workload),
            self.settings,
        )
        figures = quality(targets, got.series) if ok and got.series is not None else ()
        return self._done(RRUpdate(ns, name, status, ok, summary, terms, figures), now)

    def _done(self, update: RRUpdate, now: float) -> RRUpdate:
        self.runs.labels(_result(update.status)).inc()
        for resource, ratio in update.quality:
            self.usage_over_recommendation.labels(resource).observe(ratio)
        key = f"{update.namespace}/{update.name}"
        if update.ok:
            self.memory.failures.pop(key, None)
            self.memory.retry_at.pop(key, None)
        else:
            n = self.memory.failures.get(key, 0)
            self.memory.failures[key] = n + 1
            wait = min(self.config.retry_base_s * 2**n, self.config.retry_max_s)
            self.memory.retry_at[key] = now + wait
        return update

    def apply(self, plan: RRPlan) -> RRResult:
        done: list[str] = []
        failed: list[str] = []
        for u in plan.updates:
            what = f"status ResourceRecommend {u.namespace}/{u.name}"
            try:
                self.cluster.patch(
                    RR, u.name, {"status": dict(u.status)}, u.namespace, subresource="status"
                )
                if u.terms is not None:
                    ann = {names.RECOMMENDATION_TERMS_ANNOTATION: u.terms}
                    self.cluster.patch(RR, u.name, {"metadata": {"annotations": ann}}, u.namespace)
            except NotFound:
                continue
            except ApiError as exc:
                failed.append(f"{what}: {exc}")
                continue
            done.append(what)
        if plan.oom_data is not None:
            try:
                self._write_oom(plan.oom_data, plan.oom_exists)
                done.append("oom-record ConfigMap")
            except ApiError as exc:
                failed.append(f"oom-record ConfigMap: {exc}")
        return RRResult(tuple(done), tuple(failed))

    def _write_oom(self, data: str, exists: bool) -> None:
        ns, name = names.KUBE_SYSTEM_NAMESPACE, names.OOM_RECORD_CONFIG_MAP
        body = {"data": {names.OOM_RECORD_KEY: data}}
        if exists:
            self.cluster.patch(names.CONFIG_MAP, name, body, ns)
        else:
            self.cluster.create(names.CONFIG_MAP, {"metadata": {"name": name}, **body}, ns)

    def run(self, now: float) -> tuple[RRPlan, RRResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)
