"""The simulator's running pods as arrays: the cpu domains pods compete in, their cpus as
rows of booleans, and one step's cpu figures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def domains(nodes: list[int], masks: list[int]) -> tuple[np.ndarray, list[int], list[int]]:
    """Cpu domains: on each node, pods whose cpusets overlap compete in one domain (the
    union of their cpusets); disjoint cpusets (Katalyst's pools) are separate. From each
    pod's node and cpus (a mask): each pod's domain, and each domain's cpus and node."""
    by_node: dict[int, dict[int, list[int]]] = {}
    for i, node in enumerate(nodes):
        by_node.setdefault(node, {}).setdefault(masks[i], []).append(i)
    domain = np.empty(len(nodes), dtype=np.int64)
    dom_mask: list[int] = []
    dom_node: list[int] = []
    for nidx, by_mask in by_node.items():
        groups: list[tuple[int, list[int]]] = []
        for m, idxs in by_mask.items():
            union, members = m, list(idxs)
            rest = []
            for gm, gi in groups:
                if gm & union:
                    union |= gm
                    members.extend(gi)
                else:
                    rest.append((gm, gi))
            # merging can make the union touch groups it skipped: repeat until stable
            merged = True
            while merged:
                merged = False
                keep = []
                for gm, gi in rest:
                    if gm & union:
                        union |= gm
                        members.extend(gi)
                        merged = True
                    else:
                        keep.append((gm, gi))
                rest = keep
            groups = [*rest, (union, members)]
        for union, members in groups:
            domain[members] = len(dom_mask)
            dom_mask.append(union)
            dom_node.append(nidx)
    return domain, dom_mask, dom_node


def mask_rows(masks: list[int], cpus: int) -> np.ndarray:
    """The masks as rows of booleans, one column per cpu."""
    nbytes = (cpus + 7) // 8
    if not masks:
        return np.zeros((0, cpus), dtype=bool)
    raw = np.frombuffer(b"".join(m.to_bytes(nbytes, "little") for m in masks), np.uint8)
    rows = np.unpackbits(raw.reshape(len(masks), nbytes), axis=1, bitorder="little")[:, :cpus]
    return rows.astype(bool)


@dataclass(frozen=True, slots=True)
class CpuStep:
    """One step's cpu: per running pod its demand and grant and whether it is batch; per
    sharing domain the usage of normal, idle, normal batch and light batch pods, and its
    capacity (at least 1); per node and cpu the busy share of batch and of all pods."""

    demand: np.ndarray
    granted: np.ndarray
    batch: np.ndarray
    normal_use: np.ndarray
    idle_use: np.ndarray
    batch_normal: np.ndarray
    light_use: np.ndarray
    safe_cap: np.ndarray
    per_cpu_batch: np.ndarray
    per_cpu_all: np.ndarray
