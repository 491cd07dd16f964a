"""Eviction and node pressure: throttle first, taint next, evict last — and say why.

`decide_round(node, config, EvictionSnapshot, EvictionMemory) -> (EvictionPlan,
EvictionMemory)` is the pure decision (`EvictionManager.decide` keeps the memory for a
caller with one manager); `EvictionExecutor` applies a plan through the cluster;
`EvictionStage` plugs both into the agent's loop (gather, decide, act). See
docs/eviction.md.
"""

from pykatalyst.agent.eviction.config import (
    EvictionConfig,
    LoadPressureConfig,
    NumaMemoryPressureConfig,
    ReclaimedResourcePressureConfig,
    SystemMemoryPressureConfig,
)
from pykatalyst.agent.eviction.executor import EvictionExecutor, ExecutionResult, record_ref
from pykatalyst.agent.eviction.manager import (
    EvictionManager,
    EvictionMemory,
    decide_round,
    default_plugins,
)
from pykatalyst.agent.eviction.plugins import (
    EvictionPlugin,
    LoadPressurePlugin,
    NumaMemoryPressurePlugin,
    ReclaimedNumaResourcePressurePlugin,
    ReclaimedResourcePressurePlugin,
    SystemMemoryPressurePlugin,
)
from pykatalyst.agent.eviction.ranking import protection, rank
from pykatalyst.agent.eviction.records import EvictionRecorder, filter_records, read_records
from pykatalyst.agent.eviction.stage import EvictionStage, read_cnr_reclaimed
from pykatalyst.agent.eviction.types import (
    ActiveCondition,
    ConditionSpec,
    EvictionPlan,
    EvictionRecord,
    EvictionSnapshot,
    Met,
    NumaReclaimed,
    PodInfo,
    PoolState,
    ReclaimedCapacity,
    Threshold,
    Victim,
    pod_info,
)

__all__ = [
    "ActiveCondition",
    "ConditionSpec",
    "EvictionConfig",
    "EvictionExecutor",
    "EvictionManager",
    "EvictionMemory",
    "EvictionPlan",
    "EvictionPlugin",
    "EvictionRecord",
    "EvictionRecorder",
    "EvictionSnapshot",
    "EvictionStage",
    "ExecutionResult",
    "LoadPressureConfig",
    "LoadPressurePlugin",
    "Met",
    "NumaMemoryPressureConfig",
    "NumaMemoryPressurePlugin",
    "NumaReclaimed",
    "PodInfo",
    "PoolState",
    "ReclaimedCapacity",
    "ReclaimedNumaResourcePressurePlugin",
    "ReclaimedResourcePressureConfig",
    "ReclaimedResourcePressurePlugin",
    "SystemMemoryPressureConfig",
    "SystemMemoryPressurePlugin",
    "Threshold",
    "Victim",
    "decide_round",
    "default_plugins",
    "filter_records",
    "pod_info",
    "protection",
    "rank",
    "read_cnr_reclaimed",
    "read_records",
    "record_ref",
]
