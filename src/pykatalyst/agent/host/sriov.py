"""The SR-IOV virtual functions (VFs) of a NIC, as Katalyst's SR-IOV resource plugin reads
them from sysfs.

A NIC is an SR-IOV physical function (PF) when its PCI function has `sriov_numvfs` and no
`physfn` link (a VF has one). Its VFs are the `virtfn<N>` links of that function (N is the
VF's index, the link's target its PCI address). For each VF:

- its representor: the netdev of the PF's PCI function (`<pf function>/net/*`) whose
  `phys_switch_id` is the PF's and whose `phys_port_name` names VF N (`pf<P>vf<N>`, or
  `N` on older kernels); `<pf>_<N>` when there is none (a PF in legacy mode);
- its own netdev (`<vf function>/net/*`, "" when it is bound to no network driver);
- its RDMA devices: the entries of `<vf function>/infiniband_verbs`, `infiniband_cm` and
  `infiniband_mad` (`uverbs3`, `umad3`, ...): the device nodes under `/dev/infiniband` a
  container needs. A VF with none is not RDMA-capable and is given to no pod;
- its queue count: the `rx-*` queues of its netdev (Katalyst asks ethtool for the
  combined channels, which is the same number on mlx5 VFs); -1 when it has no netdev;
- its NUMA node (the PF's when the VF's function does not say).

A machine without SR-IOV (a virtio NIC, a PF with `sriov_numvfs` 0) has no VFs: nothing
here fails for that.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from pykatalyst.agent.host.devices import function_numa, read_text

VIRTFN = re.compile(r"^virtfn(\d+)$")
PORT_NAME = re.compile(r"^(?:pf(\d+))?vf(\d+)$")
IB_DIRS = ("infiniband_verbs", "infiniband_cm", "infiniband_mad")


@dataclass(frozen=True, slots=True)
class VfDevice:
    """One virtual function of a PF."""

    pf: str  # the PF's interface name
    index: int
    pci_address: str
    rep_name: str  # its representor (Katalyst's `sriov_vf_result`)
    name: str = ""  # its own netdev ("" when bound to no network driver)
    netns: str = ""
    numa: int = -1
    pcie_switch: str = ""
    queue_count: int = -1  # -1: unknown
    ib_devices: tuple[str, ...] = ()

    @property
    def rdma(self) -> bool:
        """RDMA-capable: it has RDMA device nodes (Katalyst gives only these out)."""
        return bool(self.ib_devices)


def _entries(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def is_vf_netdev(entry: Path) -> bool:
    """The interface is a VF's own netdev (its PCI function has a `physfn` link)."""
    return (entry / "device" / "physfn").exists()


def is_representor(entry: Path) -> bool:
    """The interface is a VF's representor (`phys_port_name` pf<P>vf<N>)."""
    port = read_text(entry / "phys_port_name") or ""
    return bool(PORT_NAME.match(port)) and port.startswith("pf")


def is_pf(function: Path) -> bool:
    return (function / "sriov_numvfs").exists() and not (function / "physfn").exists()


def representors(net_dir: Path, pf: str, function: Path) -> dict[int, str]:
    """VF index -> representor name among the PF function's netdevs."""
    switch = read_text(net_dir / pf / "phys_switch_id")
    if not switch:
        return {}
    out: dict[int, str] = {}
    for name in _entries(function / "net"):
        if name == pf or read_text(net_dir / name / "phys_switch_id") != switch:
            continue
        port = read_text(net_dir / name / "phys_port_name") or ""
        m = PORT_NAME.match(port)
        if m:
            out[int(m.group(2))] = name
        elif port.isdigit():
            out[int(port)] = name
    return out


def read_vf(net_dir: Path, pf: str, index: int, vf_fn: Path, rep: str) -> VfDevice:
    netdevs = _entries(vf_fn / "net")
    name = netdevs[0] if netdevs else ""
    ib = tuple(d for sub in IB_DIRS for d in _entries(vf_fn / sub))
    queues = -1
    if name:
        queues = sum(1 for q in _entries(net_dir / name / "queues") if q.startswith("rx-"))
    return VfDevice(
        pf=pf,
        index=index,
        pci_address=vf_fn.name,
        rep_name=rep,
        name=name,
        numa=function_numa(net_dir.parent.parent, vf_fn),
        queue_count=queues,
        ib_devices=ib,
    )


def read_vfs(
    net_dir: Path, pf: str, function: Path | None, numa: int = -1, pcie_switch: str = ""
) -> tuple[VfDevice, ...]:
    """The VFs of the interface `pf` (its PCI function `function`), by index; none when
    it is not an SR-IOV PF or has no VF enabled."""
    if function is None or not is_pf(function):
        return ()
    reps = representors(net_dir, pf, function)
    out = []
    for link in _entries(function):
        m = VIRTFN.match(link)
        if m is None:
            continue
        index = int(m.group(1))
        vf_fn = (function / link).resolve()
        vf = read_vf(net_dir, pf, index, vf_fn, reps.get(index, f"{pf}_{index}"))
        out.append(replace(vf, numa=vf.numa if vf.numa >= 0 else numa, pcie_switch=pcie_switch))
    return tuple(sorted(out, key=lambda v: v.index))
