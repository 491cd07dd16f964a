"""The MemoryCluster conformance suite, unchanged, through the wire: KubeCluster (the
official client's transport) -> the HTTP face on 127.0.0.1 -> MemoryCluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.kube import KubeCluster
from pykatalyst.runtime.apiserver import ApiServer
from tests.apiserver.conformance import *  # noqa: F403
from tests.apiserver.conformance import SMALL_HISTORY


def _serve(store: MemoryCluster) -> Iterator[KubeCluster]:
    with ApiServer(store, bookmark_seconds=0) as server:
        client = KubeCluster.from_url(server.url, qps=0)
        try:
            yield client
        finally:
            client.close()


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_700_000_000.0)


@pytest.fixture
def backend(clock: VirtualClock) -> MemoryCluster:
    return MemoryCluster(clock=clock, seed=7)


@pytest.fixture
def cluster(backend: MemoryCluster) -> Iterator[KubeCluster]:
    yield from _serve(backend)


@pytest.fixture
def small_history_cluster() -> Iterator[KubeCluster]:
    yield from _serve(MemoryCluster(watch_history=SMALL_HISTORY))
