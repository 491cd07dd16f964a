"""The only door to cluster state: the `Cluster` protocol, the informer cache, the
admission vocabulary and the injected clock. The in-memory API server is
`pykatalyst.apiserver`, imported only by what runs one (tests, the simulator,
`katalyst apiserver`)."""

from pykatalyst.cluster.admission import AdmissionRequest, AdmissionResponse
from pykatalyst.cluster.clock import Clock, RealClock, VirtualClock
from pykatalyst.cluster.informer import Informer, index_by_namespace, index_by_node_name
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
