"""The built-in predictor: periods found or not, the band, the start-up horizon, the
fallbacks with their reasons, and Katalyst's request/reply contract."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.predict.client import HTTPPredictor, InProcessPredictor, PredictorError
from pykatalyst.predict.contract import ContractError, answer, parse_reply, parse_request
from pykatalyst.predict.forecast import Fallback, ForecastConfig, Method, forecast

N = 7 * 1440


def daily(
    n: int = N, amp: float = 50.0, noise: float = 5.0, seed: int = 0, phase: int = 0
) -> np.ndarray[Any, Any]:
    t = np.arange(n) + phase
    rng = np.random.default_rng(seed)
    return 100 + amp * np.sin(2 * np.pi * t / 1440) + rng.normal(0, noise, n)


def test_a_daily_series_is_forecast_seasonally_and_ahead_of_the_load() -> None:
    y = daily()
    f = forecast(y, 60.0, 120)
    assert (f.method, f.reason, f.period_s) == (Method.SEASONAL, Fallback.NONE, 86400.0)
    truth = 100 + 50 * np.sin(2 * np.pi * np.arange(N, N + 120) / 1440)
    assert np.abs(f.point - truth).mean() < 5.0
    assert np.all(f.lower <= f.point + 1e-9) and np.all(f.point <= f.upper + 1e-9)
    # served = the upper band's max over the next 3 minutes: never below the band now,
    # and at least the band 3 minutes ahead
    assert np.all(f.served >= f.upper - 1e-9)
    assert np.all(f.served[:-3] >= f.upper[3:] - 1e-9)


def test_aperiodic_noise_falls_back_to_the_reactive_value_and_says_so() -> None:
    y = np.random.default_rng(1).normal(100, 10, N)
    f = forecast(y, 60.0, 120)
    assert (f.method, f.reason) == (Method.REACTIVE, Fallback.NO_PERIOD)
    assert np.allclose(f.served, np.quantile(y[-15:], 0.99))
    assert "no daily or weekly period" in f.explain()


def test_short_history_falls_back() -> None:
    f = forecast(daily(1500), 60.0, 60)
    assert (f.method, f.reason) == (Method.REACTIVE, Fallback.SHORT_HISTORY)


def test_a_broken_pattern_lately_is_not_trusted() -> None:
    y = daily()
    y[-100:] += 150.0  # the load left the daily pattern in the last hours
    f = forecast(y, 60.0, 60, ForecastConfig(max_recent_error=0.3))
    assert (f.method, f.reason) == (Method.REACTIVE, Fallback.HIGH_ERROR)
    assert f.served[0] == pytest.approx(np.quantile(y[-15:], 0.99))
    assert "recent error" in f.explain()


@settings(max_examples=15, deadline=None)
@given(amp=st.floats(20, 80), phase=st.integers(0, 1439), noise=st.floats(0.5, 8))
def test_the_served_value_covers_the_coming_peak(amp: float, phase: int, noise: float) -> None:
    y = daily(amp=amp, noise=noise, phase=phase)
    f = forecast(y, 60.0, 60)
    assert f.method is Method.SEASONAL
    t = np.arange(y.size, y.size + 63) + phase
    truth = 100 + amp * np.sin(2 * np.pi * t / 1440)
    # the served value at t covers the mean load over [t, t+3min] up to the bucket error
    ahead = np.array([truth[i : i + 4].max() for i in range(60)])
    assert np.mean(f.served >= ahead - 2.0) > 0.9


def test_a_quieter_day_is_forecast_on_the_shape_scaled_to_its_level() -> None:
    # six days swinging 20..180, then a day at half that: the forecast keeps the
    # swing in proportion instead of carrying the busy days' amplitude into troughs
    y = 100 + 80 * np.sin(2 * np.pi * np.arange(N) / 1440)
    y[-1440:] *= 0.5
    f = forecast(y, 60.0, 120)
    assert f.method is Method.SEASONAL
    truth = 0.5 * (100 + 80 * np.sin(2 * np.pi * np.arange(N, N + 120) / 1440))
    assert np.abs(f.point - truth).mean() < 0.05 * truth.mean()
    assert np.all(f.point > 0)


def test_the_band_follows_the_last_hours_bursts() -> None:
    calm = daily(noise=2.0)
    bursty = calm.copy()
    bursty[-60::10] *= 1.8  # a burst every ten minutes within the last hour
    earlier = calm.copy()
    earlier[-1440:-1380:10] *= 1.8  # the same bursts, a day ago
    f_calm, f_bursty, f_earlier = (forecast(y, 60.0, 60) for y in (calm, bursty, earlier))
    width = [float(np.mean(f.upper / f.point)) for f in (f_calm, f_bursty, f_earlier)]
    assert width[1] > 1.5 > width[0]
    # bursts that stopped a day ago no longer widen the band
    assert width[2] == pytest.approx(width[0], rel=0.02)


@settings(max_examples=15, deadline=None)
@given(scale=st.floats(1e-3, 1e3), phase=st.integers(0, 1439), seed=st.integers(0, 5))
def test_the_forecast_scales_with_the_series(scale: float, phase: int, seed: int) -> None:
    # a service twice as busy gets twice the forecast, band and served value: the model
    # is a shape on a level with a band relative to it, nothing in absolute units
    y = daily(phase=phase, seed=seed)
    f, g = forecast(y, 60.0, 60), forecast(y * scale, 60.0, 60)
    assert (f.method, f.reason) == (g.method, g.reason)
    for a, b in ((f.point, g.point), (f.upper, g.upper), (f.served, g.served)):
        assert np.allclose(a * scale, b, rtol=1e-6)


def request(values: np.ndarray[Any, Any], start: int = 1_800_000_000) -> dict[str, Any]:
    ts = start - 60 * values.size + 60 * np.arange(values.size)
    return {
        "WorkloadName": "",
        "WorkloadNamespace": "",
        "WorkloadType": "",
        "ServingType": "",
        "Quantile": 0.99,
        "ScaleUpForward": 180,
        "Interval": 60,
        "PredictionStartTime": start,
        "PredictionDuration": 7200,
        "TimeSeries": {
            "cpu_utilization": [
                {"Timestamp": int(a), "Value": float(b)} for a, b in zip(ts, values, strict=True)
            ]
        },
    }


def test_the_reply_has_katalysts_shape_from_the_start_time_every_interval() -> None:
    reply, _ = answer(parse_request(request(daily())))
    parsed = parse_reply(json.loads(json.dumps(reply)))
    pts = parsed.TimeSeries["cpu_utilization"]
    assert len(pts) == 120
    assert [p.Timestamp for p in pts[:3]] == [1_800_000_000, 1_800_000_060, 1_800_000_120]
    assert parsed.Periodicity == {"cpu_utilization": 86400.0}
    assert reply["Msg"] == "Successful"
    assert reply["Forecasts"]["cpu_utilization"]["Method"] == "seasonal"


def test_gaps_in_the_history_are_filled() -> None:
    req = request(daily())
    pts = req["TimeSeries"]["cpu_utilization"]
    del pts[5000:5030]
    _, done = answer(parse_request(req))
    assert done["cpu_utilization"].method is Method.SEASONAL


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("PredictionStartTime"), "PredictionStartTime"),
        (lambda r: r.update(Interval=0), "Interval"),
        (lambda r: r.update(Quantile=1.5), "Quantile"),
        (lambda r: r.update(TimeSeries={"x": [{"Timestamp": "soon", "Value": 1}]}), "TimeSeries"),
    ],
)
def test_bad_requests_name_the_field(mutate: Any, field: str) -> None:
    req = request(daily(100))
    mutate(req)
    with pytest.raises(ContractError, match=field):
        parse_request(req)


class _Fake(BaseHTTPRequestHandler):
    reply: bytes = b""
    delay: float = 0.0
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append({"path": self.path, "body": json.loads(body)})
        time.sleep(type(self).delay)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(type(self).reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_service() -> Iterator[tuple[str, type[_Fake]]]:
    handler = type("Handler", (_Fake,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", handler
    server.shutdown()
    server.server_close()


def test_a_users_service_gets_katalysts_request_and_its_reply_is_used(fake_service: Any) -> None:
    url, handler = fake_service
    handler.reply = json.dumps(
        {
            "Code": 0,
            "Msg": "Successful",
            "TimeSeries": {"qps": [{"Timestamp": 1, "Value": 2.5}]},
            "Periodicity": {"qps": 1.0},
        }
    ).encode()
    reply = HTTPPredictor(url).predict(request(daily(100)))
    assert reply.TimeSeries["qps"][0].Value == 2.5
    assert handler.seen[0]["path"] == "/openapi/tsa/predict"
    assert set(handler.seen[0]["body"]) >= {
        "Quantile",
        "ScaleUpForward",
        "Interval",
        "PredictionStartTime",
        "PredictionDuration",
        "TimeSeries",
    }


@pytest.mark.parametrize(
    ("reply", "delay", "match"),
    [
        (b"<html>oops</html>", 0.0, "Expecting value|Invalid JSON|JSON"),
        (json.dumps({"Msg": "Failed", "Reason": "model missing"}).encode(), 0.0, "model missing"),
        (b"{}", 1.0, "no reply within"),
    ],
)
def test_a_service_that_times_out_or_answers_garbage_is_a_clear_error(
    fake_service: Any, reply: bytes, delay: float, match: str
) -> None:
    url, handler = fake_service
    handler.reply, handler.delay = reply, delay
    with pytest.raises(PredictorError, match=match):
        HTTPPredictor(url, timeout_s=0.3).predict(request(daily(100)))


def test_in_process_predictor_answers_the_same_contract() -> None:
    reply = InProcessPredictor().predict(request(daily()))
    assert reply.Msg == "Successful" and len(reply.TimeSeries["cpu_utilization"]) == 120
