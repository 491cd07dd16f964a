"""The agent's reading side: every read of one tick and the caches that keep it cheap.

`Gatherer.gather(now, state)` reads the node's pods and dynamic config (one holder,
`agent/node_watch.py`), the cgroups, one Host sample, the kubelet's pins, the pods' SPDs,
the GPU and NIC zones and what each eviction stage reads, and returns the frozen
`TickInputs` (`agent/inputs.py`) that `decide` works from. Nothing here writes to the
machine or the cluster, except the skips it reports for objects it cannot read.
"""

from pykatalyst.agent.gather.gatherer import REDISCOVER_PERIOD_S, Gatherer

__all__ = ["REDISCOVER_PERIOD_S", "Gatherer"]
