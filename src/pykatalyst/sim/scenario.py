"""The scenario file: what cluster, which workloads, which policies, for how long.

A scenario is YAML validated by pydantic; every mistake is reported with the dotted path of
the field (``services[1].demand.mean``), the bad value and what is accepted, before anything
runs.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pykatalyst.api import names, units
from pykatalyst.api.problems import NO_VALUE, field_problems
from pykatalyst.api.units import to_bytes, to_cores, to_seconds
from pykatalyst.api.yamlio import load_yaml
from pykatalyst.sim.csvfile import read_csv_column

_DAYS = re.compile(r"^(\d+(?:\.\d+)?)d$")


def _seconds(value: Any) -> Any:
    """A scenario's durations: Go durations as everywhere else (`90s`, `5m`, `24h`), or
    numbers of seconds, and days (`2d`) for the length of a run."""
    if isinstance(value, str) and (m := _DAYS.match(value.strip())):
        return float(m.group(1)) * 86400.0
    return to_seconds(value)


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]
Bytes = Annotated[int, BeforeValidator(to_bytes), Field(gt=0)]
Cores = Annotated[float, BeforeValidator(to_cores), Field(gt=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeGroup(_Model):
    """Identical machines. Cpus = sockets x cores_per_socket x threads_per_core."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    count: int = Field(ge=1, le=10_000)
    sockets: int = Field(default=2, ge=1, le=8)
    cores_per_socket: int = Field(default=12, ge=1, le=256)
    threads_per_core: int = Field(default=2, ge=1, le=4)
    numa_per_socket: int = Field(default=1, ge=1, le=8)
    memory: Bytes
    system_reserved_cpu: units.Cores = 1.0
    system_reserved_memory: units.Bytes = 4 * 2**30

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @model_validator(mode="after")
    def _fits(self) -> NodeGroup:
        if self.cores_per_socket % self.numa_per_socket:
            raise ValueError(
                f"cores_per_socket ({self.cores_per_socket}) must divide evenly into "
                f"numa_per_socket ({self.numa_per_socket}) NUMA nodes"
            )
        if self.system_reserved_cpu >= self.cpus:
            raise ValueError(
                f"system_reserved_cpu ({self.system_reserved_cpu}) must be below the node's "
                f"{self.cpus} cpus"
            )
        if self.system_reserved_memory >= self.memory:
            raise ValueError("system_reserved_memory must be below memory")
        return self


class ConstantDemand(_Model):
    kind: Literal["constant"]
    level: Fraction = Field(description="usage as a fraction of the cpu request")


class DiurnalDemand(_Model):
    """level(t) = mean * (1 + amplitude * cos(2 pi (hour(t) - peak_hour) / 24))."""

    kind: Literal["diurnal"]
    mean: Fraction
    amplitude: Fraction = 0.5
    peak_hour: float = Field(default=14.0, ge=0, lt=24)


class TraceDemand(_Model):
    """The bundled Alibaba 2018 cluster cpu series, rescaled so its mean is `mean`."""

    kind: Literal["trace"]
    mean: Fraction
    column: Literal["cpu_util_percent", "mem_util_percent"] = "cpu_util_percent"
    offset: Annotated[float, BeforeValidator(_seconds), Field(ge=0)] = 0.0


class CsvDemand(_Model):
    """A curve from a CSV file (one sample per `interval`, cycled), rescaled to `mean`."""

    kind: Literal["csv"]
    path: Path
    column: str
    interval: Seconds = 300.0
    mean: Fraction
    offset: Annotated[float, BeforeValidator(_seconds), Field(ge=0)] = 0.0


Demand = Annotated[
    ConstantDemand | DiurnalDemand | TraceDemand | CsvDemand, Field(discriminator="kind")
]


class Service(_Model):
    """A latency-sensitive service: `replicas` pods, each asking for cpu/memory requests,
    using `demand` x cpu_request cores, answering in `base_latency_ms` when unloaded."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    replicas: int = Field(ge=1, le=100_000)
    qos: str = names.QOS_SHARED_CORES
    cpu_request: Cores
    cpu_limit: Cores | None = None
    memory_request: Bytes
    memory_usage: Fraction = Field(default=0.85, description="resident share of the request")
    demand: Demand
    noise: float = Field(default=0.1, ge=0, le=1, description="per-minute lognormal sigma")
    base_latency_ms: float = Field(gt=0)
    slo_p99_ms: float = Field(gt=0)
    cpu_burst_fraction: Fraction = Field(
        default=0.2, description="share of a request's latency spent on a cpu"
    )

    @field_validator("qos")
    @classmethod
    def _qos(cls, value: str) -> str:
        accepted = (names.QOS_SHARED_CORES, names.QOS_DEDICATED_CORES)
        if value not in accepted:
            raise ValueError(f"must be one of {', '.join(accepted)}")
        return value

    @model_validator(mode="after")
    def _check(self) -> Service:
        if self.slo_p99_ms <= self.base_latency_ms:
            raise ValueError(
                f"slo_p99_ms ({self.slo_p99_ms}) must be above base_latency_ms "
                f"({self.base_latency_ms}): the SLO could never be met"
            )
        if self.cpu_limit is not None and self.cpu_limit < self.cpu_request:
            raise ValueError("cpu_limit must be at least cpu_request")
        return self


class Arrival(_Model):
    """Poisson arrivals; `diurnal` modulates the rate by the trace's or a sine shape."""

    rate_per_hour: float = Field(gt=0, le=1_000_000)
    diurnal: Literal["none", "trace", "sine"] = "trace"
    amplitude: Fraction = 0.5
    peak_hour: float = Field(default=14.0, ge=0, lt=24)


class Choice(_Model):
    values: list[float] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _same_length(self) -> Choice:
        if any(v <= 0 for v in self.values):
            raise ValueError("values must be positive")
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(
                    f"weights has {len(self.weights)} entries, values {len(self.values)}"
                )
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be non-negative and not all zero")
        return self


class LogNormal(_Model):
    median: float = Field(gt=0)
    sigma: float = Field(default=0.8, ge=0, le=4)
    max: float | None = Field(default=None, gt=0)


class Batch(_Model):
    """Batch tasks: each wants `cores` cpus until it has done `minutes` x cores of work."""

    arrival: Arrival
    cores: Choice = Choice(values=[1, 2, 4, 8], weights=[0.3, 0.3, 0.25, 0.15])
    minutes: LogNormal = LogNormal(median=20, sigma=0.8, max=240)
    memory_per_core: Bytes = 2 * 2**30
    memory_usage: Fraction = 0.8
    cache_pressure: Fraction = Field(
        default=0.5,
        description="how hard the tasks press on the shared cache and memory bandwidth "
        "(0: cpu-bound in private caches, 1: streaming through memory)",
    )
    max_pending: int = Field(
        default=100,
        ge=1,
        description="pods the batch framework keeps pending in the cluster; the rest wait "
        "in its own queue",
    )


class AgentSettings(_Model):
    """Periods of the agent's loops in the simulation (production runs them every few
    seconds; a coarser period keeps 100 nodes x 24 h fast, see docs/simulator.md)."""

    period: Seconds = 60.0
    config: dict[str, Any] = Field(default_factory=dict, description="the agent's configuration")
    eviction: bool = Field(default=True, description="run the agent's eviction manager")
    eviction_period: Seconds | None = Field(
        default=None, description="how often the eviction manager runs (default: period)"
    )
    eviction_config: dict[str, Any] = Field(
        default_factory=dict, description="the eviction manager's configuration"
    )


class SchedulerSettings(_Model):
    config: Path | None = None


class Policy(_Model):
    name: Literal["vanilla", "static-overcommit", "katalyst"]
    cpu_overcommit_ratio: float = Field(default=1.0, ge=1.0, le=10.0)
    memory_overcommit_ratio: float = Field(default=1.0, ge=1.0, le=10.0)
    agent: AgentSettings = AgentSettings()
    scheduler: SchedulerSettings = SchedulerSettings()

    @model_validator(mode="after")
    def _ratio_only_for_overcommit(self) -> Policy:
        if self.name != "static-overcommit" and (
            self.cpu_overcommit_ratio != 1.0 or self.memory_overcommit_ratio != 1.0
        ):
            raise ValueError("overcommit ratios apply only to the static-overcommit policy")
        return self


class LatencyModel(_Model):
    """Overrides of the latency model's constants (docs/simulator.md), for sensitivity
    studies; unset fields keep the documented defaults."""

    batch_slice_ms: float | None = Field(default=None, gt=0)
    idle_preempt_ms: float | None = Field(default=None, ge=0)
    light_preempt_ms: float | None = Field(default=None, ge=0)
    light_weight_ratio: float | None = Field(default=None, ge=0, le=1)
    alpha_ht: float | None = Field(default=None, ge=0)
    alpha_llc: float | None = Field(default=None, ge=0)
    quantile: float | None = Field(default=None, gt=0, lt=1)
    starved_factor: float | None = Field(default=None, ge=1)

    def overrides(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Scenario(_Model):
    name: str = Field(min_length=1, max_length=80)
    description: str = ""
    seed: int = Field(default=1, ge=0, lt=2**32)
    duration: Seconds = 86400.0
    step: Seconds = 60.0
    start_hour: float = Field(default=0.0, ge=0, lt=24)
    nodes: list[NodeGroup] = Field(min_length=1)
    services: list[Service] = Field(default_factory=list)
    batch: Batch | None = None
    model: LatencyModel = LatencyModel()
    policies: list[Policy] = Field(
        default_factory=lambda: [
            Policy(name="vanilla"),
            Policy(name="static-overcommit", cpu_overcommit_ratio=1.5),
            Policy(name="katalyst"),
        ],
        min_length=1,
    )

    @field_validator("policies")
    @classmethod
    def _unique_policies(cls, policies: list[Policy]) -> list[Policy]:
        seen = [p.name for p in policies]
        dupes = sorted({n for n in seen if seen.count(n) > 1})
        if dupes:
            raise ValueError(f"each policy may appear once; repeated: {', '.join(dupes)}")
        return policies

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.step > self.duration:
            raise ValueError(f"step ({self.step}s) is longer than duration ({self.duration}s)")
        if self.duration / self.step > 1_000_000:
            raise ValueError("duration / step exceeds 1,000,000 steps")
        names_ = [g.name for g in self.nodes]
        if len(set(names_)) != len(names_):
            raise ValueError("node group names must be unique")
        svc = [s.name for s in self.services]
        if len(set(svc)) != len(svc):
            raise ValueError("service names must be unique")
        if not self.services and self.batch is None:
            raise ValueError("a scenario needs at least one service or a batch workload")
        return self

    @property
    def steps(self) -> int:
        return round(self.duration / self.step)


# --- loading with readable errors --------------------------------------------------------


class ScenarioError(ValueError):
    """A scenario that cannot run; `problems` holds (field path, message, value) triples."""

    def __init__(self, source: str, problems: list[tuple[str, str, Any]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: invalid scenario"]
        for path, msg, value in problems:
            shown = "" if value is _NO_VALUE else f" (got {value!r})"
            lines.append(f"  {path}: {msg}{shown}" if path else f"  {msg}{shown}")
        super().__init__("\n".join(lines))


_NO_VALUE: Any = NO_VALUE


_DEMAND_KINDS = ("constant", "diurnal", "trace", "csv")


def _union_tag(parts: list[str], item: str) -> bool:
    # pydantic's union-branch tag under `demand`: the user wrote no such field
    return item in _DEMAND_KINDS and bool(parts) and parts[-1].lstrip(".") == "demand"


def _problems(exc: ValidationError) -> list[tuple[str, str, Any]]:
    out: list[tuple[str, str, Any]] = []
    for p, err in zip(field_problems(exc, skip=_union_tag), exc.errors(), strict=True):
        msg = p.message
        if err["type"] == "union_tag_invalid":
            msg = "kind must be one of constant, diurnal, trace, csv"
        path = "" if p.path == "(top level)" else p.path
        out.append((path, msg, p.value))
    return out


def parse_scenario(data: Any, source: str = "<scenario>", base_dir: Path | None = None) -> Scenario:
    """Validate a scenario given as parsed YAML; relative CSV paths resolve from `base_dir`."""
    if not isinstance(data, dict):
        raise ScenarioError(source, [("", "a scenario is a mapping of fields", _NO_VALUE)])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(source, _problems(exc)) from None
    if base_dir is not None:
        scenario = _resolve_paths(scenario, base_dir)
    problems = _file_problems(scenario)
    if problems:
        raise ScenarioError(source, problems)
    return scenario


def _file_problems(scenario: Scenario) -> list[tuple[str, str, Any]]:
    """The files the scenario names (demand CSVs, scheduler configurations), read now so
    that a missing or broken one is reported by its field before anything runs."""
    from pykatalyst.scheduler.config import SchedulerConfigError, load_config

    out: list[tuple[str, str, Any]] = []
    for i, svc in enumerate(scenario.services):
        d = svc.demand
        if not isinstance(d, CsvDemand):
            continue
        where = f"services[{i}].demand"
        try:
            if not stat.S_ISREG(d.path.stat().st_mode):  # a FIFO or device could never end
                out.append((f"{where}.path", f"{d.path} is not a regular file", _NO_VALUE))
                continue
            read_csv_column(str(d.path), d.column)
        except OSError as exc:
            out.append((f"{where}.path", f"cannot read {d.path}: {exc.strerror}", _NO_VALUE))
        except ValueError as exc:
            out.append((where, str(exc), _NO_VALUE))
    for i, pol in enumerate(scenario.policies):
        if pol.scheduler.config is None:
            continue
        try:
            load_config(pol.scheduler.config)
        except SchedulerConfigError as exc:
            out.append((f"policies[{i}].scheduler.config", str(exc), _NO_VALUE))
    return out


def _resolve_paths(scenario: Scenario, base_dir: Path) -> Scenario:
    services = []
    for svc in scenario.services:
        d = svc.demand
        if isinstance(d, CsvDemand) and not d.path.is_absolute():
            svc = svc.model_copy(
                update={"demand": d.model_copy(update={"path": base_dir / d.path})}
            )
        services.append(svc)
    policies = []
    for pol in scenario.policies:
        cfg = pol.scheduler.config
        if cfg is not None and not cfg.is_absolute():
            sched = pol.scheduler.model_copy(update={"config": base_dir / cfg})
            pol = pol.model_copy(update={"scheduler": sched})
        policies.append(pol)
    return scenario.model_copy(update={"services": services, "policies": policies})


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        problem = ("", f"cannot read the file: {exc.strerror}", _NO_VALUE)
        raise ScenarioError(str(path), [problem]) from None
    try:
        data = load_yaml(text, str(path))
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ScenarioError(str(path), [("", f"not valid YAML{where}", _NO_VALUE)]) from None
    return parse_scenario(data, str(path), path.parent)


def dump_scenario(scenario: Scenario) -> dict[str, Any]:
    """The scenario as plain JSON-able data (for the report)."""
    return scenario.model_dump(mode="json")
