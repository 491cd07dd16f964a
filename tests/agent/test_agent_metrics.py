"""The agent's metric store: loads the kernel way, stale data reads as missing."""

from __future__ import annotations

import math

import pytest

from pykatalyst.agent.host.base import CgroupStats, HostSample
from pykatalyst.agent.metrics import MetricStore


def feed(store: MetricStore, t: float, nr: int | None, usage: float | None = None) -> None:
    store.ingest(
        HostSample(
            time=t,
            cgroups={"pod/c": CgroupStats(cpu_usage_cores=usage, nr_running=nr, memory_rss=10)},
            cpu_usage_ratio=[0.5, 0.25],
        )
    )


def test_load_is_an_exponential_average_with_the_kernels_time_constants() -> None:
    s = MetricStore(insurance_period_s=60)
    feed(s, 0, 0)
    for t in range(5, 65, 5):
        feed(s, t, 4)
    m = s.cpu("pod/c", 60)
    assert m is not None and m.load1 is not None and m.load5 is not None
    assert m.load1 == pytest.approx(4 * (1 - math.exp(-1)), rel=1e-6)
    assert m.load5 == pytest.approx(4 * (1 - math.exp(-60 / 300)), rel=1e-6)


def test_the_first_sample_starts_the_load_where_it_is() -> None:
    s = MetricStore(insurance_period_s=60)
    feed(s, 100, 3)
    m = s.cpu("pod/c", 100)
    assert m is not None and m.load1 == 3 and m.load5 == 3


def test_data_older_than_the_insurance_period_is_missing() -> None:
    s = MetricStore(insurance_period_s=60)
    feed(s, 0, 2, usage=1.5)
    assert s.cpu_usage("pod/c", 60) == 1.5
    assert s.cpu_usage("pod/c", 61) is None
    assert s.cpu("pod/c", 61) is None
    assert s.memory("pod/c", 61) is None
    assert s.cpu_usage_ratio(61) is None
    assert list(s.cpu_usage_ratio(30) or []) == [0.5, 0.25]


def test_a_missing_field_keeps_the_last_fresh_value() -> None:
    s = MetricStore(insurance_period_s=60)
    feed(s, 0, 2, usage=1.0)
    feed(s, 5, None, usage=None)  # e.g. the first sample after a counter reset
    assert s.cpu_usage("pod/c", 5) == 1.0
    assert s.cpu("unknown", 5) is None
