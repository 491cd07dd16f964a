"""Every constant of pykatalyst's recommender, as a validated settings model, and how a user
sets them: a YAML (or JSON) file of the fields to change (`load_settings`).

The file holds only what differs from the defaults; nested sections merge field by field,
so `cpu: {underprovision_weight: 20}` keeps the cpu grid's other fields. Times are seconds
(fields ending `_s`) or hours (`_hours`); cpu is cores, memory bytes. A bad value is refused
with the field's path and what is accepted, e.g. `cpu.percentiles[1]: Input should be
less than or equal to 1 (got 1.5)`; nothing of a refused file is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pykatalyst.api.problems import one_line
from pykatalyst.api.yamlio import YAMLInputError, load_yaml

HOUR = 3600.0
DAY = 86400.0
MIB = 1024.0 * 1024.0
GIB = 1024.0 * MIB
CPU: Final = "cpu"
MEMORY: Final = "memory"


class SettingsError(ValueError):
    """A settings file that cannot be used: the message names the file and the field."""


Positive = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(gt=0, le=1)]
NonNegative = Annotated[float, Field(ge=0)]


class ModelGrid(BaseModel):
    """The candidate models of one resource, how a replay scores them, and the histogram's
    range."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    half_lives_hours: tuple[Positive, ...] = Field(
        min_length=1, description="Histogram half-lives tried, hours (> 0)."
    )
    percentiles: tuple[Share, ...] = Field(
        min_length=1, description="Percentiles tried, in (0, 1]."
    )
    margins: tuple[NonNegative, ...] = Field(
        min_length=1, description="Margins tried (0.1 = +10 %; >= 0)."
    )
    shortfall_weight: float = Field(
        ge=0, description="Cost of one unit of usage above the request, relative to one of slack."
    )
    underprovision_weight: float = Field(
        ge=0,
        description="Cost of being under-provisioned all the time, in the resource's units "
        "(cores, bytes): the slack worth paying to avoid it. An absolute rate, so small "
        "workloads buy coverage cheaply and large ones stay tight.",
    )
    change_weight: float = Field(
        0.002, ge=0, description="Cost of one request change, in units of mean usage × history."
    )
    first_bucket: float = Field(
        gt=0, description="Width of the histogram's first bucket (cores, bytes): its resolution."
    )
    max_value: float = Field(gt=0, description="The histogram's largest value (cores, bytes).")

    @model_validator(mode="after")
    def _ranges(self) -> Self:
        if self.max_value <= self.first_bucket:
            raise ValueError(
                f"max_value: must be above first_bucket {self.first_bucket:g} "
                f"(got {self.max_value:g})"
            )
        return self


def _cpu_grid() -> ModelGrid:
    return ModelGrid(
        half_lives_hours=(12.0, 48.0),
        percentiles=(0.9, 0.95, 0.99, 1.0),
        margins=(0.0, 0.1, 0.2, 0.4),
        shortfall_weight=2.0,
        underprovision_weight=12.0,
        first_bucket=0.001,
        max_value=1000.0,
    )


def _memory_grid() -> ModelGrid:
    return ModelGrid(
        half_lives_hours=(24.0, 96.0),
        percentiles=(0.8, 0.9, 0.95, 0.99),
        margins=(0.0, 0.05),
        shortfall_weight=4.0,
        underprovision_weight=1.0 * GIB,
        first_bucket=1e6,
        max_value=1e12,
    )


class PykatalystSettings(BaseModel):
    """Every constant of the pykatalyst recommender. Defaults are the benchmark's choice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resources: tuple[Literal["cpu", "memory"], ...] = Field(
        (CPU, MEMORY), min_length=1, description="Resources recommended (cpu, memory)."
    )
    cpu: ModelGrid = Field(
        default_factory=_cpu_grid,
        description="Cpu candidates and costs (underprovision_weight in cores).",
    )
    memory: ModelGrid = Field(
        default_factory=_memory_grid,
        description="Memory candidates and costs (underprovision_weight in bytes; a shortfall "
        "is an OOM when the limit equals the request).",
    )
    bucket_growth: float = Field(0.02, gt=0, le=0.5, description="Histogram bucket growth.")
    history_s: float = Field(14 * DAY, gt=0, description="Samples older than this are ignored.")
    min_history_s: float = Field(
        6 * HOUR, ge=0, description="Not ready until the samples span this long."
    )
    replay_window_s: float = Field(3 * DAY, gt=0, description="How far back the replay goes.")
    replay_step_s: float = Field(2 * HOUR, gt=0, description="Replay points are this far apart.")
    memory_peak_window_s: float = Field(HOUR, gt=0, description="Memory peaks are taken per ...")
    memory_floor_window_s: float = Field(HOUR, ge=0, description="Floor: the peak of the last ...")
    memory_floor_margin: float = Field(0.0, ge=0, description="... times (1 + this).")
    min_cpu: float = Field(0.01, ge=0, description="Smallest cpu request, cores.")
    min_memory: float = Field(32 * MIB, ge=0, description="Smallest memory request, bytes.")
    max_allowed_cpu: float | None = Field(None, gt=0, description="maxAllowed cpu, cores.")
    max_allowed_memory: float | None = Field(None, gt=0, description="maxAllowed memory, bytes.")
    min_allowed_cpu: float | None = Field(None, ge=0, description="minAllowed cpu, cores.")
    min_allowed_memory: float | None = Field(None, ge=0, description="minAllowed memory, bytes.")
    oom_bump_ratio: float = Field(1.2, ge=1, description="After an OOM: at least x × this ...")
    oom_min_bump_bytes: float = Field(100 * MIB, ge=0, description="... and x + this.")
    oom_bump_half_life_s: float = Field(
        12 * HOUR, gt=0, description="The OOM bump's excess over the estimate halves this often."
    )
    oom_window_s: float = Field(7 * DAY, gt=0, description="OOMs older than this are ignored.")
    cpu_schedule: bool = Field(False, description="Follow a daily cpu pattern (in-place only).")
    schedule_min_days: float = Field(3.0, gt=1, description="History needed for a schedule.")
    schedule_min_autocorrelation: float = Field(
        0.6, ge=-1, le=1, description="Day-lag autocorrelation of hourly means that counts."
    )
    schedule_min_pairs: int = Field(
        48, ge=2, description="Hourly means a day apart needed to measure the autocorrelation."
    )
    schedule_hours_before: float = Field(
        1.0, ge=0, lt=24, description="The schedule reads earlier days from this many hours ..."
    )
    schedule_hours_after: float = Field(
        2.0, ge=0, lt=24, description="... before to this many after the coming hour's start."
    )
    schedule_min_samples: int = Field(
        6, ge=1, description="Samples in those hours needed to follow the schedule."
    )
    change_threshold: float = Field(
        0.1,
        ge=0,
        description="Hysteresis: change only when the request moves by more (relative); the "
        "replay also counts a candidate's change only above it.",
    )
    min_change_interval_s: float = Field(900.0, ge=0, description="... and not more often.")
    memory_grow_fraction: float = Field(
        0.1, ge=0, le=1, description="Grow at once when memory is within this of its limit."
    )
    terms_runners_up: int = Field(
        2, ge=0, le=20, description="The explanation lists this many next-cheapest models."
    )
    controlled_values: Literal["RequestsAndLimits", "RequestsOnly"] = Field(
        "RequestsAndLimits",
        description="RequestsAndLimits: limits keep the declared ratio; RequestsOnly: untouched.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.min_history_s > self.history_s:
            raise ValueError(
                f"min_history_s: must be at most history_s {self.history_s:g} "
                f"(got {self.min_history_s:g})"
            )
        for resource in (CPU, MEMORY):
            lo = getattr(self, f"min_allowed_{resource}")
            hi = getattr(self, f"max_allowed_{resource}")
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(
                    f"min_allowed_{resource}: must be at most max_allowed_{resource} {hi:g} "
                    f"(got {lo:g})"
                )
        return self


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def settings_from(data: Any, source: str = "settings") -> PykatalystSettings:
    """The defaults with `data` (a mapping of the fields to change) merged over them."""
    if data is None:
        return PykatalystSettings()
    if not isinstance(data, Mapping):
        raise SettingsError(
            f"{source}: expected a mapping of settings fields, got {type(data).__name__}"
        )
    try:
        return PykatalystSettings.model_validate(_merge(PykatalystSettings().model_dump(), data))
    except ValidationError as exc:
        raise SettingsError(f"{source}: {one_line(exc)}") from None


def load_settings(path: str | Path | None) -> PykatalystSettings:
    """Read a YAML or JSON settings file (None: the defaults)."""
    if path is None:
        return PykatalystSettings()
    p = Path(path)
    try:
        data = load_yaml(p.read_bytes(), str(p))
    except OSError as exc:
        raise SettingsError(f"cannot read recommender settings {p}: {exc.strerror}") from None
    except YAMLInputError as exc:
        raise SettingsError(f"recommender settings {p}: {exc}") from None
    return settings_from(data, f"recommender settings {p}")
