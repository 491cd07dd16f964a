"""The conformance suite run directly against MemoryCluster."""

from __future__ import annotations

import pytest

from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from tests.apiserver.conformance import *  # noqa: F403
from tests.apiserver.conformance import SMALL_HISTORY


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_700_000_000.0)


@pytest.fixture
def backend(clock: VirtualClock) -> MemoryCluster:
    return MemoryCluster(clock=clock, seed=7)


@pytest.fixture
def cluster(backend: MemoryCluster) -> MemoryCluster:
    return backend


@pytest.fixture
def small_history_cluster() -> MemoryCluster:
    return MemoryCluster(watch_history=SMALL_HISTORY)
