"""Tiny scenarios: a couple of nodes for a couple of simulated hours keep each test fast."""

from __future__ import annotations

from typing import Any

import pytest

# The agent config the shipped scenarios give the katalyst policy: reclaim on (off by
# default, as in Katalyst).
RECLAIM_ON: dict[str, Any] = {"reclaimed_cpu_idle": True, "advisor": {"enable_reclaim": True}}
KATALYST: dict[str, Any] = {"name": "katalyst", "agent": {"config": RECLAIM_ON}}


def tiny(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "tiny",
        "seed": 3,
        "duration": "2h",
        "step": "60s",
        "nodes": [
            {
                "name": "n",
                "count": 2,
                "sockets": 1,
                "cores_per_socket": 8,
                "threads_per_core": 2,
                "memory": "64Gi",
                "system_reserved_cpu": 1,
                "system_reserved_memory": "2Gi",
            }
        ],
        "services": [
            {
                "name": "web",
                "replicas": 2,
                "cpu_request": 10,
                "memory_request": "24Gi",
                "demand": {"kind": "diurnal", "mean": 0.15, "amplitude": 0.3},
                "base_latency_ms": 10,
                "slo_p99_ms": 15,
            }
        ],
        "batch": {
            "arrival": {"rate_per_hour": 120, "diurnal": "none"},
            "cores": {"values": [1, 2]},
            "minutes": {"median": 10, "sigma": 0.5},
            "memory_per_core": "1Gi",
            "max_pending": 10,
        },
        "policies": [
            {"name": "vanilla"},
            {"name": "static-overcommit", "cpu_overcommit_ratio": 2.0},
            KATALYST,
        ],
    }
    data.update(overrides)
    return data


@pytest.fixture
def tiny_data() -> dict[str, Any]:
    return tiny()
