"""Katalyst's prediction contract: `POST /openapi/tsa/predict`, the request the SPD
resource-portrait plugin sends and the reply it expects, and pykatalyst's answer to it.

Request: `Quantile` (0.99), `ScaleUpForward` (seconds, 180), `Interval` (seconds, 60),
`PredictionStartTime` (unix seconds, minute-aligned), `PredictionDuration` (seconds),
`TimeSeries` {metric: [{Timestamp (unix seconds), Value}]}; Katalyst also sends the
workload fields, empty. Reply: `Code`, `Msg` ("Successful" or why not), `Reason`,
`TimeSeries` {metric: [{Timestamp, Value}]} from PredictionStartTime every Interval,
`Periodicity` {metric: detected period in seconds, 0 for none}. pykatalyst adds
`Forecasts` {metric: {Method, Reason, Explain, Lower, Upper}}, which Katalyst's client
ignores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pykatalyst.predict.forecast import Forecast, ForecastConfig, forecast

MSG_SUCCESSFUL = "Successful"
MAX_POINTS = 100_000
MAX_STEPS = 100_000


class ContractError(ValueError):
    """A request or reply that does not follow the contract; the message names the field."""


class Point(BaseModel):
    model_config = ConfigDict(extra="ignore")
    Timestamp: int
    Value: float


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    WorkloadName: str = ""
    WorkloadNamespace: str = ""
    WorkloadType: str = ""
    ServingType: str = ""
    Quantile: float = Field(0.99, gt=0.0, lt=1.0)
    ScaleUpForward: int = Field(180, ge=0)
    Interval: int = Field(60, gt=0)
    PredictionStartTime: int
    PredictionDuration: int = Field(gt=0)
    TimeSeries: dict[str, list[Point]]

    @field_validator("TimeSeries")
    @classmethod
    def _bounded(cls, v: dict[str, list[Point]]) -> dict[str, list[Point]]:
        for name, points in v.items():
            if len(points) > MAX_POINTS:
                raise ValueError(f"{name}: {len(points)} points (at most {MAX_POINTS})")
        return v


class PredictReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    Code: int = 0
    Msg: str = ""
    Reason: str = ""
    TimeSeries: dict[str, list[Point]] = Field(default_factory=dict)
    Periodicity: dict[str, float] = Field(default_factory=dict)


def _errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in exc.errors()
    )


def parse_request(body: Any) -> PredictRequest:
    try:
        req = PredictRequest.model_validate(body)
    except ValidationError as exc:
        raise ContractError(f"prediction request: {_errors(exc)}") from None
    if req.PredictionDuration // req.Interval > MAX_STEPS:
        raise ContractError(
            f"prediction request: PredictionDuration/Interval above {MAX_STEPS} steps"
        )
    return req


def parse_reply(body: Any) -> PredictReply:
    """A reply as Katalyst's client reads it: Msg must be "Successful"."""
    try:
        reply = PredictReply.model_validate(body)
    except ValidationError as exc:
        raise ContractError(f"prediction reply: {_errors(exc)}") from None
    if reply.Msg != MSG_SUCCESSFUL:
        raise ContractError(
            f"prediction reply: Msg is {reply.Msg!r} (expected {MSG_SUCCESSFUL!r}); "
            f"Reason: {reply.Reason!r}"
        )
    return reply


def _resample(points: list[Point], interval: int, end: int) -> np.ndarray[Any, Any]:
    """The history on a regular grid of `interval` up to `end` (exclusive): the latest
    sample in each slot, NaN where none."""
    if not points:
        return np.zeros(0)
    ts = np.array([p.Timestamp for p in points], dtype=np.int64)
    vs = np.array([p.Value for p in points], dtype=np.float64)
    keep = ts < end
    ts, vs = ts[keep], vs[keep]
    if ts.size == 0:
        return np.zeros(0)
    first = int(ts.min()) // interval * interval
    n = (end - first + interval - 1) // interval
    grid = np.full(n, np.nan)
    order = np.argsort(ts, kind="stable")
    grid[(ts[order] - first) // interval] = vs[order]
    return grid


def answer(request: PredictRequest) -> tuple[dict[str, Any], dict[str, Forecast]]:
    """pykatalyst's reply to a request (as JSON), and the forecast behind each metric."""
    steps = max(1, request.PredictionDuration // request.Interval)
    cfg = ForecastConfig(quantile=request.Quantile, scale_up_forward_s=request.ScaleUpForward)
    series: dict[str, list[dict[str, Any]]] = {}
    periodicity: dict[str, float] = {}
    extra: dict[str, Any] = {}
    done: dict[str, Forecast] = {}
    start = request.PredictionStartTime
    for name, points in sorted(request.TimeSeries.items()):
        history = _resample(points, request.Interval, start)
        f = forecast(history, float(request.Interval), steps, cfg)
        done[name] = f
        series[name] = [
            {"Timestamp": start + i * request.Interval, "Value": round(float(v), 6)}
            for i, v in enumerate(f.served)
        ]
        periodicity[name] = f.period_s
        extra[name] = {
            "Method": str(f.method),
            "Reason": str(f.reason),
            "Explain": f.explain(),
            "Lower": [round(float(v), 6) for v in f.lower],
            "Upper": [round(float(v), 6) for v in f.upper],
        }
    reply = {
        "Code": 0,
        "Msg": MSG_SUCCESSFUL,
        "Reason": "; ".join(f"{k}: {v['Explain']}" for k, v in extra.items()),
        "TimeSeries": series,
        "Periodicity": periodicity,
        "Forecasts": extra,
    }
    return reply, done
