"""The typed decode kube-apiserver applies to a built-in object before anything else.

The real server reads a Pod or Node body into Go structs: a value of the wrong JSON type
(`spec.affinity: "x"`, `metadata.labels: [...]`, `spec.containers: 5`, a number where a
string goes) is refused with 400 BadRequest naming the field and its Go type, before
defaulting, admission or validation run; a quantity must match the quantity grammar, and a
number given for one is stored as its canonical string (`5.5` -> `"5500m"`). A JSON null
decodes to the field's zero value. MemoryCluster runs the same decode, so what it stores
has the types every component relies on.

Only the fields of the schema below are typed; the real server drops the others, and
MemoryCluster keeps them untouched (nothing reads them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.cluster.protocol import JSON, BadRequest

INT32: Final = (-(2**31), 2**31 - 1)
INT64: Final = (-(2**63), 2**63 - 1)
QUANTITY_PATTERN: Final = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(QUANTITY_PATTERN)


@dataclass(frozen=True, slots=True)
class Scalar:
    go: str  # string, int32, int64, bool, resource.Quantity, v1.Time


@dataclass(frozen=True, slots=True)
class ListOf:
    item: Spec

    @property
    def go(self) -> str:
        return "[]" + self.item.go


@dataclass(frozen=True, slots=True)
class MapOf:
    value: Spec

    @property
    def go(self) -> str:
        return "map[string]" + self.value.go


@dataclass(frozen=True, slots=True)
class Struct:
    go: str
    fields: Mapping[str, Spec]


Spec = Scalar | ListOf | MapOf | Struct

STR = Scalar("string")
I32 = Scalar("int32")
I64 = Scalar("int64")
BOOL = Scalar("bool")
QTY = Scalar("resource.Quantity")
TIME = Scalar("v1.Time")
# kube's intstr.IntOrString: an int32 or a string; a value of another JSON type is refused
# as the int32 the decoder tried last.
INT_OR_STRING = Scalar("int32")
STRS = ListOf(STR)
STR_MAP = MapOf(STR)
RESOURCE_LIST = MapOf(QTY)


def _struct(go: str, **fields: Spec) -> Struct:
    return Struct(go, fields)


def _names(go: str) -> Struct:
    return _struct(go, name=STR)


OWNER_REFERENCE = _struct(
    "v1.OwnerReference",
    apiVersion=STR,
    kind=STR,
    name=STR,
    uid=STR,
    controller=BOOL,
    blockOwnerDeletion=BOOL,
)
OBJECT_META = _struct(
    "v1.ObjectMeta",
    name=STR,
    generateName=STR,
    namespace=STR,
    selfLink=STR,
    uid=STR,
    resourceVersion=STR,
    generation=I64,
    creationTimestamp=TIME,
    deletionTimestamp=TIME,
    deletionGracePeriodSeconds=I64,
    labels=STR_MAP,
    annotations=STR_MAP,
    ownerReferences=ListOf(OWNER_REFERENCE),
    finalizers=STRS,
)
_REQUIREMENT = _struct("v1.NodeSelectorRequirement", key=STR, operator=STR, values=STRS)
NODE_SELECTOR_TERM = _struct(
    "v1.NodeSelectorTerm",
    matchExpressions=ListOf(_REQUIREMENT),
    matchFields=ListOf(_REQUIREMENT),
)
LABEL_SELECTOR = _struct(
    "v1.LabelSelector",
    matchLabels=STR_MAP,
    matchExpressions=ListOf(
        _struct("v1.LabelSelectorRequirement", key=STR, operator=STR, values=STRS)
    ),
)
_POD_AFFINITY_TERM = _struct(
    "v1.PodAffinityTerm",
    labelSelector=LABEL_SELECTOR,
    namespaces=STRS,
    topologyKey=STR,
    namespaceSelector=LABEL_SELECTOR,
    matchLabelKeys=STRS,
    mismatchLabelKeys=STRS,
)


def _pod_affinity(go: str) -> Struct:
    weighted = _struct("v1.WeightedPodAffinityTerm", weight=I32, podAffinityTerm=_POD_AFFINITY_TERM)
    return _struct(
        go,
        requiredDuringSchedulingIgnoredDuringExecution=ListOf(_POD_AFFINITY_TERM),
        preferredDuringSchedulingIgnoredDuringExecution=ListOf(weighted),
    )


AFFINITY = _struct(
    "v1.Affinity",
    nodeAffinity=_struct(
        "v1.NodeAffinity",
        requiredDuringSchedulingIgnoredDuringExecution=_struct(
            "v1.NodeSelector", nodeSelectorTerms=ListOf(NODE_SELECTOR_TERM)
        ),
        preferredDuringSchedulingIgnoredDuringExecution=ListOf(
            _struct("v1.PreferredSchedulingTerm", weight=I32, preference=NODE_SELECTOR_TERM)
        ),
    ),
    podAffinity=_pod_affinity("v1.PodAffinity"),
    podAntiAffinity=_pod_affinity("v1.PodAntiAffinity"),
)
RESOURCES = _struct(
    "v1.ResourceRequirements",
    requests=RESOURCE_LIST,
    limits=RESOURCE_LIST,
    claims=ListOf(_struct("v1.ResourceClaim", name=STR, request=STR)),
)
CONTAINER = _struct(
    "v1.Container",
    name=STR,
    image=STR,
    command=STRS,
    args=STRS,
    workingDir=STR,
    ports=ListOf(
        _struct(
            "v1.ContainerPort",
            name=STR,
            hostPort=I32,
            containerPort=I32,
            protocol=STR,
            hostIP=STR,
        )
    ),
    env=ListOf(_struct("v1.EnvVar", name=STR, value=STR)),
    resources=RESOURCES,
    restartPolicy=STR,
    imagePullPolicy=STR,
    terminationMessagePath=STR,
    terminationMessagePolicy=STR,
    stdin=BOOL,
    tty=BOOL,
)
TOLERATION = _struct(
    "v1.Toleration", key=STR, operator=STR, value=STR, effect=STR, tolerationSeconds=I64
)
TOPOLOGY_SPREAD = _struct(
    "v1.TopologySpreadConstraint",
    maxSkew=I32,
    topologyKey=STR,
    whenUnsatisfiable=STR,
    labelSelector=LABEL_SELECTOR,
    minDomains=I32,
    nodeAffinityPolicy=STR,
    nodeTaintsPolicy=STR,
    matchLabelKeys=STRS,
)
POD_SPEC = _struct(
    "v1.PodSpec",
    volumes=ListOf(
        _struct(
            "v1.Volume",
            name=STR,
            persistentVolumeClaim=_struct(
                "v1.PersistentVolumeClaimVolumeSource", claimName=STR, readOnly=BOOL
            ),
        )
    ),
    initContainers=ListOf(CONTAINER),
    containers=ListOf(CONTAINER),
    ephemeralContainers=ListOf(_names("v1.EphemeralContainer")),
    restartPolicy=STR,
    terminationGracePeriodSeconds=I64,
    activeDeadlineSeconds=I64,
    dnsPolicy=STR,
    nodeSelector=STR_MAP,
    serviceAccountName=STR,
    serviceAccount=STR,
    automountServiceAccountToken=BOOL,
    nodeName=STR,
    hostNetwork=BOOL,
    hostPID=BOOL,
    hostIPC=BOOL,
    hostname=STR,
    subdomain=STR,
    affinity=AFFINITY,
    schedulerName=STR,
    tolerations=ListOf(TOLERATION),
    priorityClassName=STR,
    priority=I32,
    runtimeClassName=STR,
    enableServiceLinks=BOOL,
    preemptionPolicy=STR,
    overhead=RESOURCE_LIST,
    topologySpreadConstraints=ListOf(TOPOLOGY_SPREAD),
    schedulingGates=ListOf(_names("v1.PodSchedulingGate")),
    resources=RESOURCES,
)
_CONTAINER_STATE = _struct(
    "v1.ContainerState",
    waiting=_struct("v1.ContainerStateWaiting", reason=STR, message=STR),
    running=_struct("v1.ContainerStateRunning", startedAt=TIME),
    terminated=_struct(
        "v1.ContainerStateTerminated",
        exitCode=I32,
        signal=I32,
        reason=STR,
        message=STR,
        startedAt=TIME,
        finishedAt=TIME,
        containerID=STR,
    ),
)
CONTAINER_STATUS = _struct(
    "v1.ContainerStatus",
    name=STR,
    state=_CONTAINER_STATE,
    lastState=_CONTAINER_STATE,
    ready=BOOL,
    restartCount=I32,
    image=STR,
    imageID=STR,
    containerID=STR,
    started=BOOL,
    allocatedResources=RESOURCE_LIST,
    resources=RESOURCES,
)
_CONDITION_FIELDS: Final = {"type": STR, "status": STR, "reason": STR, "message": STR}
_IPS = ListOf(_struct("v1.PodIP", ip=STR))
POD_STATUS = _struct(
    "v1.PodStatus",
    phase=STR,
    conditions=ListOf(
        Struct(
            "v1.PodCondition",
            {**_CONDITION_FIELDS, "lastProbeTime": TIME, "lastTransitionTime": TIME},
        )
    ),
    message=STR,
    reason=STR,
    nominatedNodeName=STR,
    hostIP=STR,
    hostIPs=_IPS,
    podIP=STR,
    podIPs=_IPS,
    startTime=TIME,
    initContainerStatuses=ListOf(CONTAINER_STATUS),
    containerStatuses=ListOf(CONTAINER_STATUS),
    ephemeralContainerStatuses=ListOf(CONTAINER_STATUS),
    qosClass=STR,
    resize=STR,
)
POD = _struct(
    "v1.Pod", apiVersion=STR, kind=STR, metadata=OBJECT_META, spec=POD_SPEC, status=POD_STATUS
)
NODE_SPEC = _struct(
    "v1.NodeSpec",
    podCIDR=STR,
    podCIDRs=STRS,
    providerID=STR,
    unschedulable=BOOL,
    taints=ListOf(_struct("v1.Taint", key=STR, value=STR, effect=STR, timeAdded=TIME)),
)
NODE_STATUS = _struct(
    "v1.NodeStatus",
    capacity=RESOURCE_LIST,
    allocatable=RESOURCE_LIST,
    phase=STR,
    conditions=ListOf(
        Struct(
            "v1.NodeCondition",
            {**_CONDITION_FIELDS, "lastHeartbeatTime": TIME, "lastTransitionTime": TIME},
        )
    ),
    addresses=ListOf(_struct("v1.NodeAddress", type=STR, address=STR)),
)
NODE = _struct(
    "v1.Node", apiVersion=STR, kind=STR, metadata=OBJECT_META, spec=NODE_SPEC, status=NODE_STATUS
)

PDB = _struct(
    "v1.PodDisruptionBudget",
    metadata=OBJECT_META,
    spec=_struct(
        "v1.PodDisruptionBudgetSpec",
        minAvailable=INT_OR_STRING,
        maxUnavailable=INT_OR_STRING,
        selector=LABEL_SELECTOR,
        unhealthyPodEvictionPolicy=STR,
    ),
    status=_struct(
        "v1.PodDisruptionBudgetStatus",
        observedGeneration=I64,
        disruptionsAllowed=I32,
        currentHealthy=I32,
        desiredHealthy=I32,
        expectedPods=I32,
    ),
)

SCHEMAS: Final[Mapping[str, Struct]] = {
    "pods": POD,
    "nodes": NODE,
    "poddisruptionbudgets": PDB,
}
"""The built-in kinds (by plural) whose bodies are decoded."""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, float) or (isinstance(value, int) and value.bit_length() < 128):
        return f"number {value}"
    if isinstance(value, int):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Decoder:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def refuse(self, value: Any, parent: str, path: str, spec: Spec) -> BadRequest:
        what = _json_type(value)
        if not isinstance(spec, Scalar) or spec.go not in (I32.go, I64.go):
            what = what.split(" ")[0]
        return BadRequest(
            f'{self.kind} in version "v1" cannot be handled as a {self.kind}: json: cannot '
            f"unmarshal {what} into Go struct field {parent}.{path} of type {spec.go}"
        )

    def value(self, value: Any, spec: Spec, parent: str, path: str) -> Any:
        """The decoded value (a canonical quantity, a zero value for null), or a refusal."""
        if isinstance(spec, Struct):
            if value is None:
                return {}
            if not isinstance(value, dict):
                raise self.refuse(value, parent, path, spec)
            return self.struct(value, spec, path)
        if isinstance(spec, ListOf):
            if value is None:
                return []
            if not isinstance(value, list):
                raise self.refuse(value, parent, path, spec)
            return [self.value(v, spec.item, parent, path) for v in value]
        if isinstance(spec, MapOf):
            if value is None:
                return {}
            if not isinstance(value, dict):
                raise self.refuse(value, parent, path, spec)
            return {k: self.value(v, spec.value, parent, path) for k, v in value.items()}
        return self.scalar(value, spec, parent, path)

    def scalar(self, value: Any, spec: Scalar, parent: str, path: str) -> Any:
        if spec is QTY:
            return self.quantity(value, path)
        if value is None:
            return {BOOL.go: False, I32.go: 0, I64.go: 0}.get(spec.go, "")
        if spec is INT_OR_STRING:
            lo, hi = INT32
            ok = isinstance(value, str) or (type(value) is int and lo <= value <= hi)
        elif spec.go in ("string", "v1.Time"):
            ok = isinstance(value, str)
        elif spec.go == "bool":
            ok = isinstance(value, bool)
        else:
            lo, hi = INT32 if spec is I32 else INT64
            ok = type(value) is int and lo <= value <= hi
        if not ok:
            raise self.refuse(value, parent, path, spec)
        return value

    def quantity(self, value: Any, path: str) -> str:
        if value is None:
            return "0"
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return str(Quantity.parse(str(value)))
            except QuantityError:
                pass
        elif isinstance(value, str) and _QUANTITY.match(value.strip()):
            return value
        raise BadRequest(
            f'{self.kind} in version "v1" cannot be handled as a {self.kind}: quantities must '
            f"match the regular expression '{QUANTITY_PATTERN}' ({path}: {value!r:.60})"
        )

    def struct(self, obj: JSON, spec: Struct, path: str) -> JSON:
        parent = spec.go.rpartition(".")[2]
        out: JSON = {}
        for key, value in obj.items():
            field = spec.fields.get(key)
            if field is None:
                out[key] = value
                continue
            if value is None:
                continue  # null decodes to the zero value, which the server omits
            child = f"{path}.{key}" if path else key
            out[key] = self.value(value, field, parent, child)
        return out


def decode(plural: str, obj: JSON) -> JSON:
    """`obj` (a dict) as the real API server decodes a body of this core kind: the same
    object with null fields dropped and numeric quantities as strings, or BadRequest naming
    the first ill-typed field. Kinds without a schema come back unchanged."""
    schema = SCHEMAS.get(plural)
    if schema is None:
        return obj
    return _Decoder(schema.go.rpartition(".")[2]).struct(obj, schema, "")
