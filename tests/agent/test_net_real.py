"""Egress QoS on a real kernel: reclaimed traffic yields to shared traffic (v2 and v1).

Two network namespaces joined by a veth pair; the sending end is shaped as the agent shapes
a node's device (`net_policy.decide` -> `NetShaper`: HTB + nftables). Two TCP senders
run in cgroups of the unified hierarchy, one as a shared pod's container, one as a
reclaimed pod's; each sends as fast as it can to its own receiver on the other end.
Needs root, iproute2, nftables, and a kernel with HTB and nft's socket cgroupv2 match.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import KnobWrite
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.agent.host.netshape import NetShaper
from pykatalyst.agent.net_policy import NetPod, decide
from pykatalyst.api import names

LINK_MBIT = 40
SECONDS = 3.0
TX_IP, RX_IP = "10.231.77.1", "10.231.77.2"  # inside this test's own namespaces only
POD_NET = "10.231.77.64/26"  # pods in network namespaces of their own, behind the node

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
    hierarchy: Path  # where the senders' cgroups are: the unified root, or net_cls's (v1)
    cgroups: dict[str, str]  # level -> cgroup path relative to `hierarchy`
    netns: dict[str, str] = field(default_factory=dict)  # level -> the sender's, else tx

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
            procs_file = self.hierarchy / self.cgroups[level] / "cgroup.procs"
            script = f'echo $$ > {procs_file} && exec "$0" "$@"'
            argv = [sys.executable, "-c", SENDER, RX_IP, str(5201 + i), str(SECONDS + 3.0)]
            ns = self.netns.get(level, self.tx)
            procs.append(
                subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "sh", "-c", script, *argv])
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
        (r.hierarchy / cg).mkdir(parents=True)
    r.cgroups["device"] = vt
    r.run("ip", "-n", r.rx, "route", "add", POD_NET, "via", TX_IP)
    yield r


def _shape(r: Rig, with_pods: bool) -> NetShaper:
    cfg = NetworkConfig(enabled=True, device=r.cgroups["device"], link_mbit=LINK_MBIT)
    pods = [
        NetPod(level, level, (r.cgroups[level],))
        for level in (names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES)
        if with_pods
    ]
    plan = decide(cfg, pods, cgroup_version=2)
    shaper = NetShaper(netns=r.tx, cgroup2_mount=r.hierarchy)
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


def _measure(r: Rig) -> dict[str, Any]:
    """The shared sender alone, then both (the reclaimed one first: it has the link when
    the shared traffic comes), and what each HTB class sent meanwhile (Mbit)."""
    shared, reclaimed = names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES
    solo = r.rates([shared])[shared]
    before = _class_bytes(r)
    both = r.rates([reclaimed, shared])
    after = _class_bytes(r)
    sent = {h: (after[h] - before.get(h, 0)) * 8 / 1e6 for h in after}
    return {"solo": solo, "both": both, "sent": sent}


def _check(m: dict[str, Any]) -> None:
    shared, reclaimed = names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES
    cap = LINK_MBIT * NetworkConfig().egress_ratio
    solo, both, sent = m["solo"], m["both"], m["sent"]
    print(f"capacity {cap:.1f} Mbit/s  shared solo {solo:.1f}  both {both}  by class {sent}")
    if solo <= 0.8 * cap:
        pytest.skip(
            f"the shared sender alone reached only {solo:.1f} of {cap:.1f} Mbit/s: this "
            "machine is too loaded to fill the link, so the shaping cannot be judged"
        )
    assert both[shared] >= 0.85 * solo  # the shared sender keeps its rate
    # the reclaimed one is slowed to what the shared one leaves (HTB lends idle bandwidth),
    # not cut off
    assert 0 < both[reclaimed] <= max(cap - both[shared], 0.0) + 0.1 * cap
    # each sender's traffic went through its level's class, as the kernel counted it
    assert sent["1:40"] >= 0.8 * both[reclaimed] * SECONDS
    assert sent["1:30"] >= 0.8 * both[shared] * SECONDS


def test_reclaimed_traffic_yields_to_shared_traffic_v2(rig: Rig) -> None:
    _shape(rig, with_pods=True)
    _check(_measure(rig))
    # removing the shaping leaves the namespace's ruleset as it was
    assert NetShaper(netns=rig.tx, cgroup2_mount=rig.hierarchy).apply(None).ok
    listed = subprocess.run(
        ["ip", "netns", "exec", rig.tx, "nft", "list", "tables"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "pykatalyst" not in listed.stdout


def _net_cls_mount() -> Path | None:
    mounts = cgroupfs.parse_mounts(Path("/proc/self/mounts").read_text())
    found = (m for m in mounts if m.fs_type == "cgroup" and "net_cls" in m.options)
    return next((Path(m.mount_point) for m in found), None)


def v1_child(tx: str, rx: str, device: str) -> None:
    """The v1 run, in a mount namespace of its own (`unshare -m`): net_cls is mounted
    there when the machine does not mount it, so nothing outside sees the mount; the class
    ids are written by LinuxHost, the rules match them."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    existing = _net_cls_mount()
    mount = existing or Path(tempfile.mkdtemp(prefix="pykatalyst-netcls-"))
    if existing is None:
        subprocess.run(
            ["mount", "-t", "cgroup", "-o", "net_cls", "pykatalyst", str(mount)], check=True
        )
    base = f"pykatalyst-net-{secrets.token_hex(3)}"
    levels = (names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES)
    cgroups = {level: f"{base}/pod-{level}" for level in levels}
    try:
        for cg in cgroups.values():
            (mount / cg).mkdir(parents=True)
        cfg = NetworkConfig(enabled=True, device=device, link_mbit=LINK_MBIT)
        plan = decide(cfg, [NetPod(lv, lv, (cgroups[lv],)) for lv in levels], cgroup_version=1)
        writes = [KnobWrite(cg, k, v) for cg, ks in plan.knobs.items() for k, v in ks.items()]
        written = LinuxHost().apply(writes)
        assert not written.failed, written.failed
        shaped = NetShaper(netns=tx).apply(plan.shape)
        assert shaped.ok, shaped.error
        result = _measure(Rig(tx, rx, mount, {**cgroups, "device": device}))
        result["classid"] = (mount / cgroups[levels[1]] / "net_cls.classid").read_text().strip()
        print(json.dumps(result))
    finally:
        for cg in (*cgroups.values(), base):
            with contextlib.suppress(OSError):
                (mount / cg).rmdir()
        if existing is None:
            subprocess.run(["umount", str(mount)], check=False)
            mount.rmdir()


def test_reclaimed_traffic_yields_to_shared_traffic_v1(rig: Rig) -> None:
    if "net_cls" not in Path("/proc/cgroups").read_text():
        pytest.skip("this kernel has no net_cls controller")
    code = "import sys; from tests.agent.test_net_real import v1_child; v1_child(*sys.argv[1:])"
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", code, rig.tx, rig.rx, rig.cgroups["device"]],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["classid"] == str(0x10040)  # Katalyst's knob, as the agent writes it
    _check(result)


def _pod_namespaces(r: Rig, tag: str) -> dict[str, str]:
    """A network namespace per level, as a CNI gives a pod: a veth pair into the node (tx),
    an address of the pod's own, its default route through the node, which forwards."""
    out = {}
    r.run("ip", "netns", "exec", r.tx, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    for i, level in enumerate((names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES)):
        ns, node_end, pod_end = f"{r.tx}-p{i}", f"v{tag}n{i}", f"v{tag}p{i}"
        gw, ip = f"10.231.77.{65 + 4 * i}", f"10.231.77.{66 + 4 * i}"
        r.run("ip", "netns", "add", ns)
        r.netns[level] = ns
        r.run("ip", "link", "add", node_end, "netns", r.tx, "type", "veth", "peer", "name", pod_end)
        r.run("ip", "link", "set", pod_end, "netns", ns)
        r.run("ip", "-n", r.tx, "addr", "add", f"{gw}/30", "dev", node_end)
        r.run("ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", pod_end)
        for netns, dev in ((r.tx, node_end), (ns, pod_end), (ns, "lo")):
            r.run("ip", "-n", netns, "link", "set", dev, "up")
        r.run("ip", "-n", ns, "route", "add", "default", "via", gw)
        out[level] = ip
    return out


def test_traffic_from_pods_in_their_own_namespaces_is_classified_by_address(rig: Rig) -> None:
    """What a CNI's pods send reaches the node's device forwarded, without its socket: the
    agent classifies it by the pods' addresses (status.podIPs), not their cgroups."""
    addresses = _pod_namespaces(rig, rig.tx.rsplit("-", 1)[-1])
    try:
        cfg = NetworkConfig(enabled=True, device=rig.cgroups["device"], link_mbit=LINK_MBIT)
        pods = [NetPod(lv, lv, (), (addr,)) for lv, addr in addresses.items()]
        plan = decide(cfg, pods, cgroup_version=2)
        assert NetShaper(netns=rig.tx).apply(plan.shape).ok
        _check(_measure(rig))
    finally:
        for ns in rig.netns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_a_bandwidth_pod_keeps_its_request_and_reclaimed_traffic_gets_what_is_left(
    rig: Rig,
) -> None:
    """A shared pod asking 28 of the 37.6 Mbit/s keeps ~28 against another shared sender
    (in one class they would split the link); a reclaimed sender alone is held to the
    9.6 Mbit/s the request leaves, though the link is idle."""
    shared, reclaimed = names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES
    base = Path(rig.cgroups[shared]).parent
    rig.cgroups["db"] = str(base / "poddb")
    (rig.hierarchy / rig.cgroups["db"]).mkdir()
    try:
        device = rig.cgroups["device"]
        cfg = NetworkConfig(enabled=True, device=device, link_mbit=LINK_MBIT)
        pods = [
            NetPod("default/db", shared, (rig.cgroups["db"],), (), 28, device),
            NetPod("default/web", shared, (rig.cgroups[shared],)),
            NetPod("default/batch", reclaimed, (rig.cgroups[reclaimed],)),
        ]
        plan = decide(cfg, pods, cgroup_version=2)
        shaper = NetShaper(netns=rig.tx, cgroup2_mount=rig.hierarchy)
        assert shaper.apply(plan.shape).ok
        cap = LINK_MBIT * cfg.egress_ratio
        alone = rig.rates([reclaimed])[reclaimed]
        both = rig.rates([shared, "db"])
        print(f"capacity {cap:.1f}  reclaimed alone {alone:.1f}  db and web {both}")
        if both["db"] + both[shared] <= 0.8 * cap:
            pytest.skip(
                f"the senders reached only {both} of {cap:.1f} Mbit/s: this machine is too "
                "loaded to fill the link, so the shaping cannot be judged"
            )
        assert both["db"] >= 0.9 * 28
        assert 0 < alone <= (cap - 28) * 1.1
        assert shaper.apply(None).ok
    finally:
        (rig.hierarchy / rig.cgroups["db"]).rmdir()
