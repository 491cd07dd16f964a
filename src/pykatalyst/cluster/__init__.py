"""The only door to cluster state: the `Cluster` protocol, the in-memory API server, the
informer cache and the injected clock."""

from pykatalyst.cluster.clock import Clock, RealClock, VirtualClock
from pykatalyst.cluster.informer import Informer, index_by_namespace, index_by_node_name
from pykatalyst.cluster.memory import (
    AdmissionRequest,
    AdmissionResponse,
    MemoryCluster,
    MemoryWatch,
)
from pykatalyst.cluster.protocol import (
    JSON,
    AlreadyExists,
    ApiError,
    BadRequest,
    Cluster,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    ObjectList,
    PatchType,
    TooManyRequests,
    Watch,
    WatchEvent,
)

__all__ = [
    "JSON",
    "AdmissionRequest",
    "AdmissionResponse",
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Clock",
    "Cluster",
    "Conflict",
    "Forbidden",
    "Gone",
    "Informer",
    "Invalid",
    "MemoryCluster",
    "MemoryWatch",
    "MethodNotAllowed",
    "NotFound",
    "ObjectList",
    "PatchType",
    "RealClock",
    "TooManyRequests",
    "VirtualClock",
    "Watch",
    "WatchEvent",
    "index_by_namespace",
    "index_by_node_name",
]
