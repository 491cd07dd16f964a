"""Watches one `katalyst controller` process opens, per kind: every controller on, one
step, against the embedded API server with a counter on its `watch`.

    python benchmarks/controller_watches.py [--controllers lifecycle,overcommit,...]

Summary line: ``cnr_watches: <n> watches: <total> kinds: <k>``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import Watch
from pykatalyst.controllers.backstop import BackstopConfig
from pykatalyst.runtime.controller import CONTROLLERS, ControllerRunner


class CountingCluster(MemoryCluster):
    """MemoryCluster that counts the watches opened on it, by kind."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.watches: Counter[str] = Counter()

    def watch(self, kind: Kind, *args: Any, **kw: Any) -> Watch:
        self.watches[kind.kind] += 1
        return super().watch(kind, *args, **kw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controllers", default=",".join(CONTROLLERS))
    args = parser.parse_args(argv)
    clock = VirtualClock(1_000_000.0)
    cluster = CountingCluster(clock=clock)
    runner = ControllerRunner(
        cluster,
        BackstopConfig(),
        period_s=10.0,
        clock=clock,
        controllers=tuple(c for c in args.controllers.split(",") if c),
    )
    runner.step(clock.now())
    runner.step(clock.advance(10.0))
    for kind, n in sorted(cluster.watches.items()):
        print(f"{kind}: {n}")
    cnr = cluster.watches[names.CUSTOM_NODE_RESOURCE.kind]
    print(
        f"cnr_watches: {cnr} watches: {sum(cluster.watches.values())} kinds: {len(cluster.watches)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
