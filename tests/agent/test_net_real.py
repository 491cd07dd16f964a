"""Egress QoS on a real kernel: reclaimed traffic yields to shared traffic.

Two network namespaces joined by a veth pair; the sending end is shaped as the agent shapes
a node's device (`net_policy.decide` -> `NetShaper`: HTB + nftables). Two TCP senders
run in cgroups of the unified hierarchy, one as a shared pod's container, one as a
reclaimed pod's; each sends as fast as it can to its own receiver on the other end.
Needs root, iproute2, nftables, and a kernel with HTB and nft's socket cgroupv2 match.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.netshape import NetShaper
from pykatalyst.agent.net_policy import NetPod, decide
from pykatalyst.api import names

LINK_MBIT = 40
SECONDS = 3.0
TX_IP, RX_IP = "10.231.77.1", "10.231.77.2"  # inside this test's own namespaces only

RECEIVER = r"""
import socket, sys, time
port, secs = int(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], port)); s.listen(1); s.settimeout(30)
print("ready", flush=True)
c, _ = s.accept(); c.settimeout(0.5)
n, t0 = 0, None
while t0 is None or time.monotonic() - t0 < secs:
    try:
        b = c.recv(1 << 16)
    except socket.timeout:
        continue
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
print(n * 8 / secs / 1e6, flush=True)
"""
SENDER = r"""
import socket, sys, time
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        break
    except OSError:
        time.sleep(0.1)
buf, t0 = b"x" * 65536, time.monotonic()
try:
    while time.monotonic() - t0 < float(sys.argv[3]):
        c.send(buf)
except OSError:
    pass
"""


def _unified_mount() -> Path | None:
    mounts = cgroupfs.parse_mounts(Path("/proc/self/mounts").read_text())
    return next((Path(m.mount_point) for m in mounts if m.fs_type == "cgroup2"), None)


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for network namespaces, tc and nftables"
    for tool in ("ip", "tc", "nft", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install iproute2 nftables util-linux)"
    unified = _unified_mount()
    if unified is None:
        return "no cgroup2 hierarchy mounted (nft matches sockets by their v2 cgroup)"
    if not os.access(unified, os.W_OK):
        return f"cannot create cgroups in {unified}"
    return None


@dataclass
class Rig:
    tx: str
    rx: str
    unified: Path
    cgroups: dict[str, str]  # level -> cgroup path relative to the unified root

    @property
    def _in_rx(self) -> list[str]:
        return ["ip", "netns", "exec", self.rx]

    def run(self, *argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, timeout=30)

    def rates(self, senders: list[str]) -> dict[str, float]:
        """Mbit/s each level's sender got over the same SECONDS."""
        receivers = {}
        for i, level in enumerate(senders):
            port = str(5201 + i)
            receivers[level] = subprocess.Popen(
                [*self._in_rx, sys.executable, "-c", RECEIVER, RX_IP, port, str(SECONDS)],
                stdout=subprocess.PIPE,
                text=True,
            )
        for p in receivers.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        procs = []
        for i, level in enumerate(senders):
            procs_file = self.unified / self.cgroups[level] / "cgroup.procs"
            script = f'echo $$ > {procs_file} && exec "$0" "$@"'
            argv = [sys.executable, "-c", SENDER, RX_IP, str(5201 + i), str(SECONDS + 3.0)]
            procs.append(
                subprocess.Popen(
                    ["nsenter", f"--net=/run/netns/{self.tx}", "sh", "-c", script, *argv]
                )
            )
        out = {}
        for level, p in receivers.items():
            text, _ = p.communicate(timeout=30)
            out[level] = float(text.strip() or 0)
        for sp in procs:
            sp.wait(timeout=30)
        return out


@pytest.fixture
def rig() -> Iterator[Rig]:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(reason)
    unified = _unified_mount()
    assert unified is not None
    tag = secrets.token_hex(3)
    tx, rx = f"pkt-tx-{tag}", f"pkt-rx-{tag}"
    base = f"pykatalyst-net-{tag}"
    cgroups = {
        names.QOS_SHARED_CORES: f"{base}/podshared",
        names.QOS_RECLAIMED_CORES: f"{base}/podreclaimed",
    }
    r = Rig(tx, rx, unified, cgroups)
    try:
        for ns in (tx, rx):
            r.run("ip", "netns", "add", ns)
        yield from _setup(r, tag)
    finally:
        for ns in (tx, rx):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        for cg in (*cgroups.values(), base):
            with contextlib.suppress(OSError):
                (unified / cg).rmdir()


def _setup(r: Rig, tag: str) -> Iterator[Rig]:
    vt, vr = f"v{tag}t", f"v{tag}r"
    r.run("ip", "link", "add", vt, "type", "veth", "peer", "name", vr)
    r.run("ip", "link", "set", vt, "netns", r.tx)
    r.run("ip", "link", "set", vr, "netns", r.rx)
    for ns, dev, ip in ((r.tx, vt, TX_IP), (r.rx, vr, RX_IP)):
        r.run("ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", dev)
        r.run("ip", "-n", ns, "link", "set", dev, "up")
        r.run("ip", "-n", ns, "link", "set", "lo", "up")
    for cg in r.cgroups.values():
        (r.unified / cg).mkdir(parents=True)
    r.cgroups["device"] = vt
    yield r


def _shape(r: Rig, with_pods: bool) -> NetShaper:
    cfg = NetworkConfig(enabled=True, device=r.cgroups["device"], link_mbit=LINK_MBIT)
    pods = [
        NetPod(level, level, (r.cgroups[level],))
        for level in (names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES)
        if with_pods
    ]
    plan = decide(cfg, pods, cgroup_version=2)
    shaper = NetShaper(netns=r.tx, cgroup2_mount=r.unified)
    result = shaper.apply(plan.shape)
    assert result.ok, result.error
    return shaper


def _class_bytes(r: Rig) -> dict[str, int]:
    """Bytes each HTB class of the shaped device has sent (the kernel's own count)."""
    out = subprocess.run(
        ["ip", "netns", "exec", r.tx, "tc", "-s", "class", "show", "dev", r.cgroups["device"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes", out)
    return {handle: int(n) for handle, n in found}


def test_reclaimed_traffic_yields_to_shared_traffic(rig: Rig) -> None:
    shared, reclaimed = names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES
    cap = LINK_MBIT * NetworkConfig().egress_ratio
    _shape(rig, with_pods=True)
    solo = rig.rates([shared])[shared]
    before = _class_bytes(rig)
    # The reclaimed sender starts first: it has the link when the shared traffic comes.
    both = rig.rates([reclaimed, shared])
    after = _class_bytes(rig)
    sent = {h: (after[h] - before.get(h, 0)) * 8 / 1e6 for h in after}
    print(f"capacity {cap:.1f} Mbit/s  shared solo {solo:.1f}  both {both}  by class {sent}")
    assert solo > 0.8 * cap
    assert both[shared] >= 0.85 * solo  # the shared sender keeps its rate
    assert 0 < both[reclaimed] <= 0.15 * cap  # the reclaimed one is slowed, not cut off
    # each sender's traffic went through its level's class, as the kernel counted it
    assert sent["1:40"] >= 0.8 * both[reclaimed] * SECONDS
    assert sent["1:30"] >= 0.8 * both[shared] * SECONDS
    # removing the shaping leaves the namespace's ruleset as it was
    assert NetShaper(netns=rig.tx, cgroup2_mount=rig.unified).apply(None).ok
    listed = subprocess.run(
        ["ip", "netns", "exec", rig.tx, "nft", "list", "tables"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "pykatalyst" not in listed.stdout
