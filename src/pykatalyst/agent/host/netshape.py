"""Egress shaping of a Linux network device: the `tc` and `nft` commands for a `NetShape`.

The device gets an HTB qdisc (handle ``MAJOR:``) with one root class ``MAJOR:1`` of the
shape's capacity and one class per QoS level under it. Packets are put into those classes
without a tc filter: HTB sends a packet whose priority (``skb->priority``) names one of its
classes straight to that class, and an nftables ``output`` rule sets the priority from the
sending socket — from its net_cls class id on cgroup v1 (``meta cgroup``), from its cgroup
on v2 (``socket cgroupv2``). This works on kernels built without the cgroup tc classifier
(``cls_cgroup``), which many are. Packets the node forwards (from pods in network
namespaces of their own) carry no socket: a ``forward`` rule sets their priority from their
source address.

nft resolves a ``socket cgroupv2`` path under /sys/fs/cgroup when it loads the rules; where
the unified hierarchy is mounted elsewhere (hybrid v1 machines: /sys/fs/cgroup/unified) the
command runs in a private mount namespace with that hierarchy bound over /sys/fs/cgroup.
Rules are loaded as one nft transaction (the table is replaced whole), and a rule for a cgroup
that no longer exists fails the transaction: the agent retries on its next tick.

Traffic is classified in the network namespace where the rules live: sent by its sockets
(host-network pods on the node's device), or forwarded by it.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from pykatalyst.agent.host.base import NetApplyResult, NetMatch, NetShape

__all__ = [
    "NFT_TABLE",
    "NetShaper",
    "Runner",
    "nft_script",
    "subprocess_runner",
    "tc_commands",
    "tc_handle",
    "tc_leftover_commands",
    "tc_remove_commands",
    "tc_stale_commands",
]

NFT_TABLE: Final = "pykatalyst"
# A run of one command: argv and stdin in, exit status and what it printed out.
Runner = Callable[[Sequence[str], str | None], tuple[int, str]]


def tc_handle(classid: int) -> str:
    """A class id in tc's notation: 0x00010040 -> '1:40' (both halves hex)."""
    return f"{classid >> 16:x}:{classid & 0xFFFF:x}"


def _major(shape: NetShape) -> int:
    majors = {c.classid >> 16 for c in shape.classes}
    if len(majors) != 1 or 0 in majors:
        raise ValueError(f"shape classes must share one tc major > 0, not {sorted(majors)}")
    return majors.pop()


def tc_commands(shape: NetShape) -> list[list[str]]:
    """The tc commands that set the device's qdisc and classes (idempotent: `replace`)."""
    major = _major(shape)
    tc = ["tc", "class", "replace", "dev", shape.device]
    cap = f"{shape.capacity_bps}bit"
    root = f"{major:x}:"
    default = f"{shape.default_classid & 0xFFFF:x}"
    qdisc = ["tc", "qdisc", "replace", "dev", shape.device, "root", "handle", root]
    out = [
        [*qdisc, "htb", "default", default],
        [*tc, "parent", root, "classid", f"{root}1", "htb", "rate", cap, "ceil", cap],
    ]
    for c in shape.classes:
        rates = ["rate", f"{c.rate_bps}bit", "ceil", f"{c.ceil_bps}bit", "prio", str(c.prio)]
        out.append([*tc, "parent", f"{root}1", "classid", tc_handle(c.classid), "htb", *rates])
    return out


def tc_remove_commands(device: str) -> list[list[str]]:
    return [["tc", "qdisc", "del", "dev", device, "root"]]


def tc_stale_commands(shape: NetShape, before: NetShape | None) -> list[list[str]]:
    """Deleting the classes of `before` on the same device that `shape` no longer has (a
    bandwidth pod gone): a class left behind would keep its guaranteed rate."""
    if before is None or before.device != shape.device:
        return []
    now = {c.classid for c in shape.classes}
    gone = sorted({c.classid for c in before.classes} - now)
    return [["tc", "class", "del", "dev", shape.device, "classid", tc_handle(c)] for c in gone]


def tc_leftover_commands(shape: NetShape, listing: str) -> list[list[str]]:
    """Deleting the classes under the shape's root class that `tc class show` lists and
    the shape does not have: a bandwidth pod's class from before the agent restarted, its
    pod gone meanwhile (`replace` keeps the qdisc and its classes)."""
    root = f"{_major(shape):x}:1"
    keep = {tc_handle(c.classid) for c in shape.classes}
    found = re.findall(r"class htb (\S+) parent (\S+)", listing)
    gone = sorted({h for h, parent in found if parent == root and h not in keep})
    return [["tc", "class", "del", "dev", shape.device, "classid", h] for h in gone]


def _rule(m: NetMatch) -> str:
    prio = tc_handle(m.classid)
    if m.source is not None:
        try:
            addr = ipaddress.ip_address(m.source)
        except ValueError:
            raise ValueError(f"source {m.source!r} is not an IPv4 or IPv6 address") from None
        family = "ip" if addr.version == 4 else "ip6"
        return f"{family} saddr {addr} meta priority set {prio}"
    if m.cgroup is None:
        return f"meta cgroup {m.classid:#x} meta priority set {prio}"
    path = m.cgroup.strip("/")
    if not path or any(ch in path for ch in '"\n\\'):
        raise ValueError(f"cgroup path {m.cgroup!r} cannot go into an nft rule")
    return f'socket cgroupv2 level {path.count("/") + 1} "{path}" meta priority set {prio}'


def nft_script(shape: NetShape | None) -> str:
    """The nft transaction that replaces the agent's table (None: removes it). Deeper
    cgroups come last, so that their rule wins over an ancestor's (the last set counts)."""
    head = [f"table inet {NFT_TABLE}", f"delete table inet {NFT_TABLE}"]
    if shape is None:
        return "\n".join(head) + "\n"
    unique = dict.fromkeys(shape.matches)
    matches = sorted(
        (m for m in unique if m.source is None),
        key=lambda m: (-1 if m.cgroup is None else m.cgroup.count("/"), m.cgroup or "", m.classid),
    )
    # one rule per address; were an address listed twice, the last rule would count
    forwarded = sorted((m for m in unique if m.source is not None), key=lambda m: m.classid)
    body = [
        f"table inet {NFT_TABLE} {{",
        "  chain egress {",
        "    type filter hook output priority 0; policy accept;",
        *(f"    {_rule(m)}" for m in matches),
        "  }",
        *(
            [
                "  chain forwarded {",
                "    type filter hook forward priority 0; policy accept;",
                *(f"    {_rule(m)}" for m in forwarded),
                "  }",
            ]
            if forwarded
            else []
        ),
        "}",
    ]
    return "\n".join(head + body) + "\n"


def subprocess_runner(argv: Sequence[str], stdin: str | None) -> tuple[int, str]:
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return done.returncode, (done.stderr or done.stdout).strip()


class NetShaper:
    """Runs the commands of a shape. `netns` names a network namespace (/run/netns/NAME)
    to shape inside instead of the caller's; `cgroup2_mount` is where the unified hierarchy
    is mounted (needed for cgroup-v2 matches)."""

    def __init__(
        self,
        run: Runner = subprocess_runner,
        netns: str | None = None,
        cgroup2_mount: Path | None = None,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self._run = run
        self._netns = netns
        self._cgroup2 = cgroup2_mount
        self._which = which
        self._device: str | None = None
        self._applied: NetShape | None = None

    def _wrap(self, argv: list[str], bind_cgroup2: bool) -> list[str]:
        if self._netns is not None:
            argv = ["nsenter", f"--net=/run/netns/{self._netns}", *argv]
        if bind_cgroup2 and self._cgroup2 is not None and self._cgroup2 != Path("/sys/fs/cgroup"):
            script = 'mount --make-rprivate / && mount --bind "$0" /sys/fs/cgroup && exec "$@"'
            argv = ["unshare", "-m", "sh", "-c", script, str(self._cgroup2), *argv]
        return argv

    def _step(
        self, argv: list[str], stdin: str | None, bind: bool, ran: list[str]
    ) -> tuple[int, str]:
        ran.append(" ".join(argv))
        return self._run(self._wrap(argv, bind), stdin)

    def _sweep(self, shape: NetShape, ran: list[str]) -> None:
        """The first time this shaper shapes a device: delete classes of ours it does not
        know (a failure leaves them: they only hold a guarantee nobody uses)."""
        rc, listing = self._step(["tc", "class", "show", "dev", shape.device], None, False, ran)
        if rc == 0:
            for argv in tc_leftover_commands(shape, listing):
                self._step(argv, None, False, ran)

    def apply(self, shape: NetShape | None) -> NetApplyResult:
        missing = [t for t in ("tc", "nft") if self._which(t) is None]
        if missing:
            return NetApplyResult(
                False, f"{' and '.join(missing)} not found (install iproute2, nftables)", True
            )
        ran: list[str] = []
        steps: list[tuple[list[str], str | None, bool]] = []
        if shape is None:
            if self._device is not None:
                steps += [(c, None, False) for c in tc_remove_commands(self._device)]
            steps.append((["nft", "-f", "-"], nft_script(None), False))
        else:
            if self._device is not None and self._device != shape.device:
                steps += [(c, None, False) for c in tc_remove_commands(self._device)]
            steps += [(c, None, False) for c in tc_commands(shape)]
            v2 = any(m.cgroup is not None for m in shape.matches)
            steps.append((["nft", "-f", "-"], nft_script(shape), v2))
            # after the rules: no packet is sent to a class about to go
            steps += [(c, None, False) for c in tc_stale_commands(shape, self._applied)]
        for argv, stdin, bind in steps:
            rc, said = self._step(argv, stdin, bind, ran)
            if rc != 0 and shape is not None and argv[:3] == ["tc", "qdisc", "replace"]:
                # HTB cannot change its qdisc in place (shaping left by an earlier run, or
                # another default class): the device's shaping starts over.
                self._step(tc_remove_commands(shape.device)[0], None, False, ran)
                rc, said = self._step(argv, stdin, bind, ran)
            if rc != 0 and argv[:3] not in (["tc", "qdisc", "del"], ["tc", "class", "del"]):
                return NetApplyResult(
                    False, f"{' '.join(argv)}: exit {rc}: {said}", False, tuple(ran)
                )
        if shape is not None and (self._applied is None or self._applied.device != shape.device):
            self._sweep(shape, ran)
        self._device = None if shape is None else shape.device
        self._applied = shape
        return NetApplyResult(True, commands=tuple(ran))
