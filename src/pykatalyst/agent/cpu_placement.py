"""The cpu placement that must survive a restart: dedicated cpus, SNB nodes, pool cpusets.

Katalyst keeps this in its cpu plugin's checkpoint (cpu_plugin_state); without it a
restarted agent would place dedicated pods afresh, in whatever order it sees them, and
could swap two pods' cpus under their running processes. Here:

- `encode` / `decode` turn a `CpuState` into a versioned, checksummed JSON document
  bound to one node and one cpu topology, and back; anything else is refused with the
  reason (`CpuStateError`).
- `CpuCheckpoint` is the file: written atomically (temp + fsync + rename), and only
  when the state changed.
- `from_cgroups` rebuilds the state from the cpusets the Host reports, for a start
  without a usable checkpoint: pods keep the cpus they run on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykatalyst.agent.cpu_policy import DedicatedAssignment
from pykatalyst.agent.enforcer import atomic_write
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

CPU_STATE_KIND = "pykatalyst-agent-cpu-state"
CPU_STATE_VERSION = 1
CPU_STATE_FILE = "agent-cpu-state.json"


class CpuStateError(ValueError):
    """A cpu state checkpoint that must not be trusted (corrupt, foreign, impossible)."""


@dataclass(frozen=True, slots=True)
class CpuState:
    dedicated: Mapping[str, DedicatedAssignment] = field(default_factory=dict)
    snb: Mapping[str, int] = field(default_factory=dict)
    pools: Mapping[str, CPUSet] = field(default_factory=dict)


def topology_fingerprint(topo: CPUTopology) -> str:
    """A digest of the cpu layout: a checkpoint from another layout is foreign."""
    cpus = [(i.cpu, i.core, i.socket, i.numa) for i in (topo.info(c) for c in topo.all_cpus)]
    return hashlib.sha256(json.dumps(cpus).encode()).hexdigest()[:16]


def _payload(state: CpuState) -> dict[str, Any]:
    return {
        "dedicated": {
            uid: {"cpuset": str(a.cpuset), "numas": list(a.numas), "exclusive": a.exclusive}
            for uid, a in sorted(state.dedicated.items())
        },
        "snb": {uid: n for uid, n in sorted(state.snb.items())},
        "pools": {name: str(c) for name, c in sorted(state.pools.items())},
    }


def _checksum(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def encode(state: CpuState, node: str, topo: CPUTopology) -> str:
    payload = _payload(state)
    doc = {
        "kind": CPU_STATE_KIND,
        "version": CPU_STATE_VERSION,
        "node": node,
        "topology": topology_fingerprint(topo),
        "state": payload,
        "checksum": _checksum(payload),
    }
    return json.dumps(doc, sort_keys=True, indent=1)


def _cpus(text: object, topo: CPUTopology, what: str) -> CPUSet:
    if not isinstance(text, str):
        raise CpuStateError(f"{what}: a cpuset must be a string, got {text!r}")
    try:
        cpus = CPUSet.parse(text)
    except ValueError as exc:
        raise CpuStateError(f"{what}: {exc}") from exc
    if not cpus.issubset(topo.all_cpus):
        raise CpuStateError(f"{what}: cpus {cpus - topo.all_cpus} are not on this machine")
    return cpus


def _check_header(doc: object, node: str, topo: CPUTopology) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("kind") != CPU_STATE_KIND:
        raise CpuStateError("not a pykatalyst cpu state checkpoint")
    if doc.get("version") != CPU_STATE_VERSION:
        raise CpuStateError(
            f"version {doc.get('version')!r}; this agent reads version {CPU_STATE_VERSION}"
        )
    if doc.get("node") != node:
        raise CpuStateError(f"written for node {doc.get('node')!r}, this is {node!r}")
    if doc.get("topology") != topology_fingerprint(topo):
        raise CpuStateError("written for another cpu topology")
    payload = doc.get("state")
    if not isinstance(payload, dict) or doc.get("checksum") != _checksum(payload):
        raise CpuStateError("checksum mismatch: the file is corrupt")
    return payload


def decode(text: str, node: str, topo: CPUTopology) -> CpuState:
    """The state in `text`, or CpuStateError saying why it cannot be trusted."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CpuStateError(f"not JSON: {exc}") from exc
    payload = _check_header(doc, node, topo)
    try:
        dedicated: dict[str, DedicatedAssignment] = {}
        taken = CPUSet()
        for uid, a in dict(payload.get("dedicated", {})).items():
            cpus = _cpus(a["cpuset"], topo, f"dedicated[{uid}]")
            if not cpus.isdisjoint(taken):
                raise CpuStateError(f"dedicated[{uid}]: cpus {cpus & taken} are given twice")
            taken = taken | cpus
            numas = tuple(int(n) for n in a["numas"])
            dedicated[uid] = DedicatedAssignment(uid, cpus, numas, bool(a["exclusive"]))
        snb = {str(u): int(n) for u, n in dict(payload.get("snb", {})).items()}
        pools = {
            str(name): _cpus(c, topo, f"pools[{name}]")
            for name, c in dict(payload.get("pools", {})).items()
        }
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, CpuStateError):
            raise
        raise CpuStateError(f"malformed state: {exc!r}") from exc
    bad = {u: n for u, n in snb.items() if n not in topo.numa_nodes}
    if bad:
        raise CpuStateError(f"snb: NUMA nodes {sorted(set(bad.values()))} do not exist")
    return CpuState(dedicated, snb, pools)


class CpuCheckpoint:
    """The cpu state file of one node; `save` writes only when the state changed."""

    def __init__(self, path: Path, node: str, topo: CPUTopology) -> None:
        self.path = path
        self.node = node
        self.topo = topo
        self._last: str | None = None

    def load(self) -> CpuState | None:
        """The saved state; None when there is no file; CpuStateError when it is refused."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CpuStateError(f"unreadable: {exc}") from exc
        state = decode(text, self.node, self.topo)
        self._last = text
        return state

    def save(self, state: CpuState) -> bool:
        text = encode(state, self.node, self.topo)
        if text == self._last:
            return False
        atomic_write(self.path, text)
        self._last = text
        return True


def from_cgroups(
    topo: CPUTopology,
    dedicated: Mapping[str, tuple[CPUSet, bool]],
    snb: Mapping[str, CPUSet],
) -> CpuState:
    """The placement the cgroups show: each dedicated pod keeps the cpus it runs on, each
    SNB pod the NUMA node its cpus lie in.

    `dedicated` is (cpuset, exclusive) by uid, in placement order; a cpuset that spans
    the whole machine (never narrowed) or overlaps an earlier pod's is not kept — that
    pod is placed afresh.
    """
    out: dict[str, DedicatedAssignment] = {}
    taken = CPUSet()
    for uid, (cpus, exclusive) in dedicated.items():
        if not cpus or cpus == topo.all_cpus or not cpus.issubset(topo.all_cpus):
            continue
        if not cpus.isdisjoint(taken):
            continue
        numas = tuple(topo.numas_of(cpus))
        out[uid] = DedicatedAssignment(uid, cpus, numas, exclusive, {"restored": "cgroup"})
        taken = taken | cpus
    nodes: dict[str, int] = {}
    for uid, cpus in snb.items():
        on = topo.numas_of(cpus) if cpus and cpus.issubset(topo.all_cpus) else []
        if len(on) == 1 and cpus != topo.all_cpus:
            nodes[uid] = on[0]
    return CpuState(out, nodes, {})


def checkpoint_for(
    setting: str | None, node: str, topo: CPUTopology, state_dir_file: Path | None
) -> CpuCheckpoint | None:
    """The checkpoint `cpu_state_path` names: 'auto' is agent-cpu-state.json beside
    `state_dir_file` (the enforcer's checkpoint), so none when that is not kept either."""
    if not setting:
        return None
    if setting == "auto":
        if state_dir_file is None:
            return None
        return CpuCheckpoint(state_dir_file.with_name(CPU_STATE_FILE), node, topo)
    return CpuCheckpoint(Path(setting), node, topo)
