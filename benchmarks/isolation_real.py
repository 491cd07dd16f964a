"""Isolation with software nobody here wrote: nginx under paced load beside stress-ng.

Real, on this machine (root, cgroup v1), through the node agent: a kubelet-like hierarchy
is built under a unique prefix (`CgroupTestbed`) and the agent (`Agent` over an in-memory
cluster holding the pods, as `benchmarks/isolation.py --mode agent`) finds the pods'
cgroups and writes their knobs.

- The shared_cores pod runs Debian's nginx (`nginx-light`) serving a 612-byte page on
  127.0.0.1, and the load generator beside it: open-loop, requests at a fixed rate
  (`--rate`), each on one of a pool of keep-alive connections, its latency measured from
  its *scheduled* arrival (wrk2's correction: a request that waits for a late one counts
  its wait). The client shares the pod with nginx because on this machine it has to run
  somewhere: as the service's caller it gets the service's protection.
- Reclaimed_cores pods run `stress-ng` antagonists, one kind at a time: `cpu` (a worker
  per cpu), `vm` (memory: workers touching `--vm-bytes` each), `io` (`--hdd` writers in
  a temp dir) and `net` (`--sock` TCP over loopback, the service's own path).

Modes, interleaved in rounds so that drifting background load hits each alike:
  solo           nginx and its client alone;
  <kind>-kubelet the antagonist with the kubelet's settings only (best-effort pods at 2
                 cpu shares), no agent;
  <kind>-agent   the same with the agent running (reclaimed pods under SCHED_IDLE, memory
                 limited to their reclaimed_memory, cpusets from its pools).

Prints p50/p99 per mode, the node's busy share (/proc/stat, other users included), the
pods' own busy share (their cpu time over cpus x wall time), the hypervisor's steal and
the background load before the runs; then one `<kind>_p99_over_solo` line per kind and as
the last line `service_p99_over_solo: <ratio> busy: <share>` for the cpu antagonist under
the agent. See docs/agent.md ("Isolation with real software") for what it shows and what
it cannot.

    sudo .venv/bin/python benchmarks/isolation_real.py --setup   # apt-get install once
    sudo .venv/bin/python benchmarks/isolation_real.py [--seconds 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
# benchmarks/isolation.py (the agent world over the testbed) and the testbed fixture
sys.path[:0] = [str(HERE), str(HERE.parent)]

from tests.fixtures.cgroup_testbed import (  # noqa: E402
    CgroupTestbed,
    testbed_unavailable_reason,
)

from isolation import (  # noqa: E402
    ROOT,
    AgentWorld,
    node_busy,
    pods_cpu_s,
    steal_ticks,
)
from pykatalyst.agent.host.linux import LinuxHost  # noqa: E402

PACKAGES = ("nginx-light", "stress-ng")
KINDS = ("cpu", "vm", "io", "net")
NGINX_CONF = """
worker_processes 1;
daemon off;
user root;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {dir}; proxy_temp_path {dir}; fastcgi_temp_path {dir};
  uwsgi_temp_path {dir}; scgi_temp_path {dir};
  keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{port}; root {dir}/www; }}
}}
"""
PAGE = "<html><body>" + "pykatalyst isolation benchmark. " * 18 + "</body></html>\n"

# The load generator, run inside the shared pod: open loop, latency from scheduled arrival.
CLIENT = r"""
import asyncio, json, sys, time
port, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
conns, out = int(sys.argv[4]), sys.argv[5]
REQ = b"GET /index.html HTTP/1.1\r\nHost: bench\r\n\r\n"
async def one(reader, writer):
    writer.write(REQ)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
async def worker(q, lat, errors):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while True:
        due = await q.get()
        if due is None:
            return
        try:
            await one(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            errors.append(1)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            continue
        lat.append(time.monotonic() - due)
async def main():
    q, lat, errors = asyncio.Queue(), [], []
    workers = [asyncio.create_task(worker(q, lat, errors)) for _ in range(conns)]
    await asyncio.sleep(0.3)
    t0 = time.monotonic() + 0.1
    n = int(seconds * rate)
    for i in range(n):
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        q.put_nowait(due)
    for _ in workers:
        q.put_nowait(None)
    await asyncio.gather(*workers)
    with open(out, "w") as f:
        json.dump({"lat": lat, "errors": len(errors), "late_s": time.monotonic() - t0 - seconds}, f)
asyncio.run(main())
"""


def antagonist(
    kind: str, ncpu: int, seconds: float, vm_bytes: str, tmp: Path, seq: int
) -> list[str]:
    """The stress-ng command line of one antagonist kind (it stops by itself). Each run's
    socket antagonist gets its own ports: the last run's may still be in TIME_WAIT."""
    base = ["stress-ng", "--timeout", f"{int(seconds) + 60}s", "--quiet"]  # killed sooner
    if kind == "cpu":
        return [*base, "--cpu", str(ncpu)]
    if kind == "vm":
        return [*base, "--vm", str(ncpu), "--vm-bytes", vm_bytes, "--vm-keep"]
    if kind == "io":
        return [*base, "--hdd", "1", "--hdd-bytes", "64M", "--temp-path", str(tmp)]
    port = 23000 + 50 * (seq % 200)
    return [*base, "--sock", str(ncpu), "--sock-port", str(port)]  # loopback only


@dataclass
class Result:
    name: str
    latencies_ms: list[float]
    node_busy: float
    pods_busy: float
    steal: float
    errors: int = 0

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def kill_pod(tb: CgroupTestbed, uid: str) -> None:
    """Kill every process of the pod (stress-ng and nginx fork workers), then remove it."""
    pod_dir = tb.base / "cpu" / tb.pod_cgroup(uid)
    for _ in range(3):
        pids = [
            int(p) for procs in pod_dir.rglob("cgroup.procs") for p in procs.read_text().split()
        ]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    tb.remove_pod(uid)


class Bench:
    def __init__(self, tb: CgroupTestbed, world: AgentWorld, args: argparse.Namespace) -> None:
        self.tb, self.world, self.args = tb, world, args
        self.ncpu = len(os.sched_getaffinity(0))
        self.tmp = Path(tempfile.mkdtemp(prefix="pykatalyst-isoreal-"))
        (self.tmp / "www").mkdir()
        (self.tmp / "www/index.html").write_text(PAGE)
        (self.tmp / "io").mkdir()
        conf = self.tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=self.tmp, port=args.port))
        self.shared = world.add_pod(
            "nginx", "nginx", world.names.QOS_SHARED_CORES, {"cpu": "1", "memory": "256Mi"}
        )
        tb.spawn(self.shared, "nginx", ["nginx", "-c", str(conf)])
        time.sleep(0.5)
        self._seq = 0

    def run(self, mode: str) -> Result:
        kind, _, how = mode.partition("-")
        seconds = self.args.seconds
        pods: list[tuple[str, str]] = []
        stress: subprocess.Popen[bytes] | None = None
        if kind in KINDS:
            self._seq += 1
            name = f"{kind}-{self._seq}"
            if how == "agent":
                req = {self.world.names.RECLAIMED_MILLICPU: str(1000 * self.ncpu)}
                if kind == "vm":
                    req[self.world.names.RECLAIMED_MEMORY] = self.args.reclaimed_memory
                uid = self.world.add_pod(name, "stress", self.world.names.QOS_RECLAIMED_CORES, req)
            else:
                uid = name
                self.tb.add_pod(uid, "besteffort", ["stress"])
            cmd = antagonist(
                kind, self.ncpu, seconds, self.args.vm_bytes, self.tmp / "io", self._seq
            )
            stress = self.tb.spawn(uid, "stress", cmd)
            pods.append((name, uid))
        agent_on = how == "agent"
        if agent_on:
            self.world.tick()
        time.sleep(1.0)  # the antagonist at full strength before the first request
        out = self.tmp / "client.json"
        meter = LinuxHost()
        meter.sample(time.monotonic(), [])
        t0, cpu0, (st0, tot0) = time.monotonic(), pods_cpu_s(self.tb), steal_ticks()
        argv = [sys.executable, "-c", CLIENT, str(self.args.port), str(self.args.rate)]
        client = self.tb.spawn(self.shared, "nginx", [*argv, str(seconds), "16", str(out)])
        while client.poll() is None:
            time.sleep(1.0 if agent_on else 0.25)
            if agent_on:
                self.world.tick()
        wall = time.monotonic() - t0
        busy = node_busy(meter, time.monotonic()) or 0.0
        pods_busy = (pods_cpu_s(self.tb) - cpu0) / (self.ncpu * wall)
        st1, tot1 = steal_ticks()
        data = json.loads(out.read_text()) if out.exists() else {"lat": [], "errors": -1}
        if stress is not None and stress.poll() is not None:
            # a run whose antagonist gave up measures nothing: say so rather than count it
            print(f"  warning: {mode}: stress-ng exited early (status {stress.returncode})")
        for name, uid in pods:
            if agent_on:
                self.world.delete_pod(name)
            kill_pod(self.tb, uid)
        if agent_on:
            self.world.tick()
        lat = [x * 1000 for x in data["lat"]]
        return Result(mode, lat, busy, pods_busy, (st1 - st0) / max(tot1 - tot0, 1), data["errors"])

    def close(self) -> None:
        kill_pod(self.tb, self.shared)
        shutil.rmtree(self.tmp, ignore_errors=True)


def setup() -> int:
    """Install what the benchmark runs (Debian packages), once."""
    missing = [
        p for p, exe in zip(PACKAGES, ("nginx", "stress-ng"), strict=True) if not shutil.which(exe)
    ]
    if not missing:
        print("nginx and stress-ng are installed")
        return 0
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False, env=env)
    return done.returncode


def summarize(merged: dict[str, list[Result]]) -> list[Result]:
    return [
        Result(
            name,
            [x for r in runs for x in r.latencies_ms],
            statistics.fmean(r.node_busy for r in runs),
            statistics.fmean(r.pods_busy for r in runs),
            statistics.fmean(r.steal for r in runs),
            sum(r.errors for r in runs),
        )
        for name, runs in merged.items()
    ]


def report(merged: dict[str, list[Result]], background: float, load: str) -> None:
    results = {r.name: r for r in summarize(merged)}
    print(f"background before the runs: node busy {background:.2f}, loadavg {load}")
    head = f"{'mode':<12} {'requests':>8} {'p50_ms':>8} {'p99_ms':>8} {'max_ms':>8}"
    print(f"{head} {'node_busy':>9} {'pods_busy':>9} {'steal':>6} {'errors':>6}")
    for r in results.values():
        print(
            f"{r.name:<12} {len(r.latencies_ms):>8} {r.pct(0.5):>8.3f} {r.pct(0.99):>8.3f} "
            f"{max(r.latencies_ms, default=0):>8.3f} {r.node_busy:>9.3f} {r.pods_busy:>9.3f} "
            f"{r.steal:>6.3f} {r.errors:>6}"
        )
    for name, runs in merged.items():
        rounds = "  ".join(f"{r.pct(0.99):.2f}/{r.pods_busy:.2f}/{r.node_busy:.2f}" for r in runs)
        print(f"{name:<12} per round p99_ms/pods_busy/node_busy: {rounds}")
    solo = results["solo"].pct(0.99)
    for kind in KINDS:
        if f"{kind}-agent" not in results:
            continue
        kub, agent = results[f"{kind}-kubelet"], results[f"{kind}-agent"]
        print(
            f"{kind}_p99_over_solo: kubelet {kub.pct(0.99) / solo:.2f}  "
            f"agent {agent.pct(0.99) / solo:.2f}  busy {agent.pods_busy:.2f}"
        )
    cpu = results.get("cpu-agent")
    if cpu is not None:
        print(f"service_p99_over_solo: {cpu.pct(0.99) / solo:.2f} busy: {cpu.pods_busy:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup", action="store_true", help="apt-get install nginx-light stress-ng")
    ap.add_argument("--seconds", type=float, default=6.0, help="load per run")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--rate", type=float, default=400.0, help="requests per second")
    ap.add_argument("--kinds", default=",".join(KINDS), help="antagonists, comma-separated")
    ap.add_argument("--port", type=int, default=18080, help="nginx port on 127.0.0.1")
    ap.add_argument("--vm-bytes", default="128M", help="memory each vm worker touches")
    ap.add_argument(
        "--reclaimed-memory", default="192Mi", help="the vm pod's reclaimed_memory request"
    )
    ap.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write each mode's figures to FILE (benchmarks/calibrate_sim.py reads it)",
    )
    args = ap.parse_args()
    if args.setup:
        return setup()
    for exe in ("nginx", "stress-ng"):
        if shutil.which(exe) is None:
            print(f"{exe} not found: run with --setup first", file=sys.stderr)
            return 2
    reason = testbed_unavailable_reason()
    if reason is not None:
        print(f"needs a writable cgroup v1 hierarchy: {reason}", file=sys.stderr)
        return 2
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := [k for k in kinds if k not in KINDS]:
        print(f"--kinds: unknown {unknown}; accepted: {', '.join(KINDS)}", file=sys.stderr)
        return 2
    probe = LinuxHost()
    probe.sample(time.monotonic(), [])
    time.sleep(1.0)
    background = node_busy(probe, time.monotonic()) or 0.0
    load = Path("/proc/loadavg").read_text().split(" ", 3)[:3]
    modes = ["solo", *(f"{k}-{h}" for k in kinds for h in ("kubelet", "agent"))]
    print(
        f"cpus: {os.cpu_count()}  rate {args.rate:.0f} req/s  {args.seconds:.0f} s per run  "
        f"{args.rounds} rounds  kinds: {', '.join(kinds)}  (from {ROOT.name})"
    )
    merged: dict[str, list[Result]] = {m: [] for m in modes}
    with CgroupTestbed(kubepods_shares=262144, move_memory=True) as tb:
        world = AgentWorld(tb, overlap=True, idle_root=True)
        bench = Bench(tb, world, args)
        try:
            for _ in range(args.rounds):
                for mode in modes:
                    merged[mode].append(bench.run(mode))
        finally:
            bench.close()
    report(merged, background, " ".join(load))
    if args.json is not None:
        write_json(args.json, merged, background)
    return 0


def write_json(path: Path, merged: dict[str, list[Result]], background: float) -> None:
    """Each mode's figures, for comparing with the simulator's latency model."""
    modes = {
        r.name: {
            "p50_ms": r.pct(0.5),
            "p99_ms": r.pct(0.99),
            "pods_busy": r.pods_busy,
            "node_busy": r.node_busy,
            "steal": r.steal,
            "requests": len(r.latencies_ms),
        }
        for r in summarize(merged)
    }
    cpus = len(os.sched_getaffinity(0))
    path.write_text(json.dumps({"cpus": cpus, "background": background, "modes": modes}))


if __name__ == "__main__":
    sys.exit(main())
