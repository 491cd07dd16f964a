"""pykatalyst's scheduler against the upstream kube-scheduler, on one real API server.

Each case gets a fresh namespace and a fresh set of fake Nodes (scheduler_perf style: a
Node created through the API with its status, a CNR beside it, no kubelet), labelled and
tainted for the case so that the real node and other users' pods are not involved. Then
`--running` pods are created already bound (spread over the nodes), the scheduler under
test is started as its own process (its own schedulerName, so the cluster's scheduler is
not involved) and `--pods` pending pods are created while it runs:

  a  kube-scheduler, kube's default profile, SchedulingBasic pods (100m / 500Mi)
  b  `katalyst scheduler`, the same default profile and pods
  c  `katalyst scheduler`, the qos-mix workload under the NUMA profile
     (examples/scheduler/katalyst-scheduler-numa.yaml)
  d  kube-scheduler calling `katalyst scheduler --extender` for every pod (qos-mix, on a
     smaller run: `--extender-scale`)

Nodes without a kubelet turn NotReady after the node monitor's grace period and get the
`node.kubernetes.io/not-ready` / `unreachable` taints: the benchmark pods tolerate both
(NoSchedule and NoExecute), so nothing is evicted and no Lease has to be kept fresh.

Per case it prints pods/s, the p50/p99 latency from creation (the ADDED event of the
benchmark's own watch) to bound (the first event with `spec.nodeName`), the cpu seconds of
the scheduler and of the kube-apiserver process (/proc), and the API server's request
latency from its `apiserver_request_duration_seconds` histogram. The last line is
`katalyst_over_kube_scheduler: <(b)/(a)>`. Everything created is deleted at the end, on
Ctrl-C too.

    python benchmarks/scheduler_vs_kube.py --nodes 5000 --running 1000 --pods 10000
    python benchmarks/scheduler_vs_kube.py --nodes 200 --running 50 --pods 500   # a minute
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pykatalyst.api import names
from pykatalyst.cluster.kube import KubeCluster
from pykatalyst.cluster.protocol import ApiError, NotFound
from scheduler_perf import cnr_status, kind_of
from scheduler_perf import node as perf_node
from scheduler_perf import pod as perf_pod

ROOT = Path(__file__).resolve().parent.parent
NUMA_CONFIG = ROOT / "examples" / "scheduler" / "katalyst-scheduler-numa.yaml"
EXTENDER_ENTRY = ROOT / "deploy" / "extender" / "kube-scheduler-extender.yaml"
KUBE_BIN = (
    Path(os.environ.get("PYKATALYST_K8S_BIN", ""))
    if os.environ.get("PYKATALYST_K8S_BIN")
    else Path.home() / ".cache" / "pykatalyst" / "k8s-v1.34.4" / "bin"
)
BENCH_KEY = "bench.pykatalyst.io/run"
CASES = {
    "a": ("kube-scheduler", "basic"),
    "b": ("katalyst", "basic"),
    "c": ("katalyst", "qos-mix"),
    "d": ("kube+extender", "qos-mix"),
}
# the request kinds whose API server latency is reported
REQUESTS = (("POST", "pods"), ("POST", "pods/binding"), ("POST", "events"), ("LIST", "pods"))


@dataclass
class Case:
    key: str
    scheduler: str
    workload: str
    nodes: int
    running: int
    pods: int
    run: str = field(default_factory=lambda: secrets.token_hex(3))

    @property
    def namespace(self) -> str:
        return f"bench-{self.key}-{self.run}"

    @property
    def scheduler_name(self) -> str:
        return f"bench-{self.key}-{self.run}"

    @property
    def selector(self) -> str:
        return f"{BENCH_KEY}={self.run}"


@dataclass
class Result:
    case: Case
    bound: int = 0
    seconds: float = 0.0
    create_seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    sched_cpu: float = 0.0
    apiserver_cpu: float = 0.0
    requests: dict[tuple[str, str], tuple[int, float, float]] = field(default_factory=dict)
    json_us: tuple[int, float, float] = (0, 0.0, 0.0)  # a pod's bytes, decode and encode µs
    note: str = ""
    backlog: bool = False

    @property
    def pods_per_s(self) -> float:
        counted = self.bound - 1 if self.backlog else self.bound
        return counted / self.seconds if self.seconds > 0 else 0.0


# --- objects --------------------------------------------------------------------------------


def fake_node(case: Case, i: int) -> dict[str, Any]:
    body = perf_node(i, case.workload)
    name = f"bench-{case.run}-{i}"
    meta = body["metadata"]
    meta["name"] = name
    meta["labels"].update({"kubernetes.io/hostname": name, BENCH_KEY: case.run})
    body["spec"] = {"taints": [{"key": BENCH_KEY, "value": case.run, "effect": "NoSchedule"}]}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "fake node of a benchmark",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
    ]
    return {"apiVersion": "v1", "kind": "Node", **body}


def bench_pod(case: Case, i: int, node_name: str = "") -> dict[str, Any]:
    kind = kind_of(i, case.workload)
    if node_name and case.workload != "basic":
        kind = ("shared", "reclaimed")[i % 2]
    body = perf_pod(i, kind, case.scheduler_name, node_name)
    body["metadata"]["namespace"] = case.namespace
    body["metadata"]["name"] = f"{'run' if node_name else 'pod'}-{i}"
    spec = body["spec"]
    spec["terminationGracePeriodSeconds"] = 0
    spec["tolerations"] = [
        {"key": BENCH_KEY, "operator": "Equal", "value": case.run, "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
    ]
    term = {"matchExpressions": [{"key": BENCH_KEY, "operator": "In", "values": [case.run]}]}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    return {"apiVersion": "v1", "kind": "Pod", **body}


# --- the API server: its process and its metrics ----------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def find_process(name: str, port: str = "") -> int | None:
    """The pid of a process called `name` (the one listening on `port` when several)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != name:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if port and f"--secure-port={port}" in cmdline:
            return int(entry.name)
        found.append(int(entry.name))
    return found[0] if found else None


Histograms = dict[tuple[str, str], dict[float, float]]


def request_histograms(api: KubeCluster) -> Histograms:
    """apiserver_request_duration_seconds buckets (cumulative) per (verb, resource[/sub])."""
    text = api.get_raw("/metrics").decode("utf-8", "replace")
    out: Histograms = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request_duration_seconds":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            buckets = out.setdefault((labels.get("verb", ""), resource), {})
            le = float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + sample.value
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over cumulative buckets (linear within a bucket)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == float("inf"):
                return lower_bound
            span = count - lower_count
            return lower_bound + (le - lower_bound) * ((rank - lower_count) / span if span else 1)
        lower_bound, lower_count = le, count
    return bounds[-1]


def request_figures(before: Histograms, after: Histograms) -> dict[tuple[str, str], Any]:
    """Per reported request kind: (requests, p50 s, p99 s) over the interval."""
    out: dict[tuple[str, str], tuple[int, float, float]] = {}
    for key in REQUESTS:
        old, new = before.get(key, {}), after.get(key, {})
        delta = {le: new[le] - old.get(le, 0.0) for le in new}
        count = int(delta.get(float("inf"), 0.0))
        if count:
            out[key] = (count, histogram_quantile(0.5, delta), histogram_quantile(0.99, delta))
    return out


# --- creating and deleting ---------------------------------------------------------------------


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], workers: int) -> None:
    pool = ThreadPoolExecutor(workers)
    try:
        for _ in pool.map(fn, items):
            pass
    except BaseException:
        # Ctrl-C: create nothing more, and do not wait here for the requests in flight
        # (each up to its timeout on a loaded API server): the schedulers are stopped and
        # the cleanup runs first; the process waits for those requests as it exits.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def make_nodes(api: KubeCluster, case: Case, workers: int) -> None:
    def one(i: int) -> None:
        api.create(names.NODE, fake_node(case, i))
        cnr = api.create(
            names.CUSTOM_NODE_RESOURCE,
            {
                "metadata": {"name": f"bench-{case.run}-{i}", "labels": {BENCH_KEY: case.run}},
                "spec": {},
            },
        )
        cnr["status"] = cnr_status()
        api.update_status(names.CUSTOM_NODE_RESOURCE, cnr)

    parallel(one, range(case.nodes), workers)


def make_namespace(api: KubeCluster, case: Case) -> None:
    api.create(
        names.NAMESPACE, {"metadata": {"name": case.namespace, "labels": {BENCH_KEY: case.run}}}
    )
    deadline = time.monotonic() + 60
    # pods are refused until the controller manager has made the namespace's ServiceAccount
    sa = names.Kind("", "v1", "ServiceAccount", "serviceaccounts", True, ())
    while time.monotonic() < deadline:
        try:
            api.get(sa, "default", case.namespace)
            return
        except NotFound:
            time.sleep(0.2)
    raise RuntimeError(f"namespace {case.namespace}: no default ServiceAccount after 60s")


def cleanup(api: KubeCluster, case: Case, wait_for_pods: bool = True) -> None:
    """Delete the case's pods, namespace, CNRs and nodes (each step even if another fails).

    Between cases the pods are deleted first, in one request the API server carries out
    pod by pod, so that the next case is not measured while thousands of deletions run.
    After Ctrl-C nothing waits on them: the namespace and the fake nodes go at once and
    the controller manager removes their pods in the background (the namespace controller
    the pending ones, pod GC those bound to a node that no longer exists)."""
    steps: list[Callable[[], Any]] = [
        lambda: api.delete(names.NAMESPACE, case.namespace),
        lambda: api.delete_collection(names.CUSTOM_NODE_RESOURCE, label_selector=case.selector),
        lambda: api.delete_collection(names.NODE, label_selector=case.selector),
    ]
    if wait_for_pods:
        steps.insert(
            0, lambda: api.delete_collection(names.POD, case.namespace, grace_period_seconds=0)
        )
    for step in steps:
        try:
            step()
        except NotFound:
            pass
        except ApiError as exc:
            print(f"  cleanup of {case.namespace}: {exc.message}", file=sys.stderr)


# --- the schedulers under test ------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scheduler_config(case: Case, kubeconfig: str, qps: float, extender: str = "") -> dict[str, Any]:
    """A KubeSchedulerConfiguration with one profile answering to the case's name only."""
    if case.workload == "basic":
        raw: dict[str, Any] = {"profiles": [{}]}
    else:
        raw = yaml.safe_load(NUMA_CONFIG.read_text())
    raw.update(
        apiVersion="kubescheduler.config.k8s.io/v1",
        kind="KubeSchedulerConfiguration",
        clientConnection={"kubeconfig": kubeconfig, "qps": qps, "burst": int(qps)},
        leaderElection={"leaderElect": False},
    )
    raw["profiles"][0]["schedulerName"] = case.scheduler_name
    if extender:
        (entry,) = yaml.safe_load(EXTENDER_ENTRY.read_text())["extenders"]
        entry.pop("managedResources")  # every pod goes to the extender
        raw["extenders"] = [dict(entry, urlPrefix=extender)]
        raw["profiles"] = [
            {
                "schedulerName": case.scheduler_name,
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"ignoredResourceGroups": [names.RESOURCE_GROUP]},
                    }
                ],
            }
        ]
    return raw


@dataclass
class Process:
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def cpu(self) -> float:
        return proc_cpu_seconds(self.proc.pid) if self.proc is not None else 0.0

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def tail(self, n: int = 15) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-n:])


# set by --profile: run `katalyst` under cProfile, writing <dir>/<case>-<role>.prof
PROFILE_DIR: Path | None = None


def katalyst_cmd(case: Case, role: str) -> list[str]:
    exe = str(Path(sys.executable).parent / "katalyst")
    if PROFILE_DIR is None:
        return [exe]
    out = PROFILE_DIR / f"{case.key}-{role}.prof"
    return [sys.executable, "-m", "cProfile", "-o", str(out), exe]


@contextmanager
def schedulers(case: Case, kubeconfig: str, qps: float, tmp: Path) -> Iterator[list[Process]]:
    """The case's scheduler processes (the one that binds first)."""
    procs: list[Process] = []
    path = tmp / f"{case.key}-config.yaml"
    try:
        if case.scheduler == "katalyst":
            path.write_text(yaml.safe_dump(scheduler_config(case, kubeconfig, qps)))
            cmd = [
                *katalyst_cmd(case, "scheduler"),
                "scheduler",
                "--config",
                str(path),
                "--kubeconfig",
                kubeconfig,
            ]
            procs.append(Process(cmd, tmp / f"{case.key}-katalyst.log").start())
        else:
            extender = ""
            if case.scheduler == "kube+extender":
                port = free_port()
                ext_cfg = tmp / f"{case.key}-extender.yaml"
                ext_cfg.write_text(yaml.safe_dump(scheduler_config(case, kubeconfig, qps)))
                cmd = [
                    *katalyst_cmd(case, "extender"),
                    "scheduler",
                    "--extender",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--config",
                    str(ext_cfg),
                    "--kubeconfig",
                    kubeconfig,
                ]
                procs.append(Process(cmd, tmp / f"{case.key}-extender.log").start())
                extender = f"http://127.0.0.1:{port}"
            path.write_text(yaml.safe_dump(scheduler_config(case, kubeconfig, qps, extender)))
            cmd = [
                str(KUBE_BIN / "kube-scheduler"),
                f"--config={path}",
                "--secure-port=0",
                "--bind-address=127.0.0.1",
                "-v=1",
            ]
            procs.insert(0, Process(cmd, tmp / f"{case.key}-kube-scheduler.log").start())
        yield procs
    finally:
        for p in procs:
            p.stop()
            said = [x for x in p.tail(5).splitlines() if "informer relists" in x]
            if said:
                print(f"  {p.log.stem}: {said[-1].split(': ', 1)[-1]}")


# --- measuring --------------------------------------------------------------------------------


class BindWatch:
    """The case namespace's pods as a watch shows them: when each was first seen (its
    creation) and when first seen bound."""

    def __init__(self, api: KubeCluster, namespace: str) -> None:
        self.last: dict[str, Any] = {}  # the last pod seen, as the API server served it
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self._api = api
        self._namespace = namespace
        self._watch = api.watch(names.POD, namespace=namespace)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                events = self._watch.next_events(timeout=0.2)
            except ApiError as exc:  # start over: the new watch lists what is there
                print(f"  benchmark watch: {exc.message}; watching again", file=sys.stderr)
                self._watch.close()
                self._watch = self._api.watch(names.POD, namespace=self._namespace)
                continue
            now = time.monotonic()
            for ev in events:
                if ev.type not in ("ADDED", "MODIFIED"):
                    continue
                name = ev.object["metadata"]["name"]
                self.last = ev.object
                self.added.setdefault(name, now)
                if (ev.object.get("spec") or {}).get("nodeName"):
                    self.bound.setdefault(name, now)

    def wait_bound(self, wanted: Iterable[str], timeout: float) -> bool:
        want = set(wanted)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if want.issubset(self.bound):
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._watch.close()


def warm_up(api: KubeCluster, case: Case, watch: BindWatch, procs: list[Process]) -> None:
    """One pod bound before measuring: the scheduler has started and synced its caches."""
    pod = bench_pod(case, 0)
    pod["metadata"]["name"] = "warm-up"
    api.create(names.POD, pod, case.namespace)
    if not watch.wait_bound(["warm-up"], 180):
        logs = "\n".join(f"--- {p.log.name}\n{p.tail()}" for p in procs)
        raise RuntimeError(f"case {case.key}: the warm-up pod was not bound in 180s\n{logs}")


def create_pending(api: KubeCluster, case: Case, workers: int) -> None:
    parallel(
        lambda i: api.create(names.POD, bench_pod(case, i), case.namespace),
        range(case.pods),
        workers,
    )


def measure(
    api: KubeCluster,
    case: Case,
    start_schedulers: Callable[[], AbstractContextManager[list[Process]]],
    apiserver: int | None,
    args: argparse.Namespace,
) -> Result:
    """Streaming (default): the scheduler runs, then the pods are created, and each pod's
    latency runs from its creation. Backlog: the pods are created first, then the
    scheduler starts; pods/s runs from its first binding, latency from its start."""
    result = Result(case)
    watch = BindWatch(api, case.namespace)
    wanted = [f"pod-{i}" for i in range(case.pods)]
    try:
        if args.backlog:
            create_pending(api, case, args.workers)
        hist0, api_cpu0 = request_histograms(api), proc_cpu_seconds(apiserver or 0)
        with start_schedulers() as procs:
            start = time.monotonic()
            if not args.backlog:
                warm_up(api, case, watch, procs)
                hist0, api_cpu0 = request_histograms(api), proc_cpu_seconds(apiserver or 0)
                sched_cpu0 = sum(p.cpu() for p in procs)
                start = time.monotonic()
                create_pending(api, case, args.workers)
                result.create_seconds = time.monotonic() - start
            else:
                sched_cpu0 = 0.0
            if not watch.wait_bound(wanted, args.timeout):
                result.note = f"timed out after {args.timeout:.0f}s"
            result.sched_cpu = sum(p.cpu() for p in procs) - sched_cpu0
        result.apiserver_cpu = proc_cpu_seconds(apiserver or 0) - api_cpu0
        result.requests = request_figures(hist0, request_histograms(api))
        result.json_us = json_cost(watch.last)
        tally(result, watch, wanted, start, args.backlog)
    finally:
        watch.close()
    return result


def tally(result: Result, watch: BindWatch, wanted: list[str], start: float, backlog: bool) -> None:
    done = [n for n in wanted if n in watch.bound]
    result.bound = len(done)
    if not done:
        return
    last = max(watch.bound[n] for n in done)
    if backlog:
        result.seconds = last - min(watch.bound[n] for n in done)
        result.backlog = True  # the first binding starts the clock
        result.latencies = [watch.bound[n] - start for n in done]
    else:
        result.seconds = last - min(watch.added.get(n, start) for n in wanted)
        result.latencies = [watch.bound[n] - watch.added.get(n, start) for n in done]


def run_case(
    api: KubeCluster, case: Case, args: argparse.Namespace, tmp: Path, apiserver: int | None
) -> Result:
    label = f"({case.key}) {case.scheduler}, {case.workload}"
    print(
        f"{label}: {case.nodes} nodes, {case.running} running, {case.pods} pending pods "
        f"in {case.namespace}",
        flush=True,
    )
    interrupted = False
    try:
        make_namespace(api, case)
        t0 = time.monotonic()
        make_nodes(api, case, args.workers)
        parallel(
            lambda i: api.create(
                names.POD, bench_pod(case, i, f"bench-{case.run}-{i % case.nodes}"), case.namespace
            ),
            range(case.running),
            args.workers,
        )
        print(f"  set up in {time.monotonic() - t0:.1f}s", flush=True)
        return measure(
            api,
            case,
            lambda: schedulers(case, args.kubeconfig, args.qps, tmp),
            apiserver,
            args,
        )
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        cleanup(api, case, wait_for_pods=not interrupted)


def json_cost(obj: dict[str, Any], rounds: int = 2000) -> tuple[int, float, float]:
    """What a watch event of this pod costs a Python client: its size, and the µs to
    decode (json.loads, as KubeWatch does per event) and to encode it."""
    if not obj:
        return (0, 0.0, 0.0)
    line = json.dumps({"type": "MODIFIED", "object": obj}).encode()
    t0 = time.perf_counter()
    for _ in range(rounds):
        json.loads(line)
    t1 = time.perf_counter()
    for _ in range(rounds):
        json.dumps(obj)
    t2 = time.perf_counter()
    return (len(line), (t1 - t0) / rounds * 1e6, (t2 - t1) / rounds * 1e6)


# --- reporting -----------------------------------------------------------------------------------


def report(result: Result) -> None:
    c = result.case
    lat = np.array(result.latencies) * 1000 if result.latencies else np.array([np.nan])
    print(
        f"  pods/s {result.pods_per_s:.1f} ({result.bound}/{c.pods} bound in "
        f"{result.seconds:.1f}s"
        f"{'' if result.backlog else f'; created in {result.create_seconds:.1f}s'})"
        f"{'  ' + result.note if result.note else ''}"
    )
    since = "scheduler start" if result.backlog else "creation"
    print(
        f"  {since} -> bound ms: p50 {np.percentile(lat, 50):.0f}  p99 {np.percentile(lat, 99):.0f}"
    )
    per = 1000 / max(result.bound, 1)
    print(
        f"  cpu s: scheduler {result.sched_cpu:.1f} ({result.sched_cpu * per:.2f} per 1000 "
        f"pods), kube-apiserver {result.apiserver_cpu:.1f}"
    )
    size, decode, encode = result.json_us
    if size:
        print(
            f"  json: a pod's watch event is {size} bytes; decode {decode:.0f} µs, "
            f"encode {encode:.0f} µs"
        )
    for (verb, resource), (count, p50, p99) in result.requests.items():
        print(
            f"  apiserver {verb} {resource}: {count} requests, "
            f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
        )


def build_cases(args: argparse.Namespace) -> list[Case]:
    cases = []
    for key in args.cases:
        scheduler, workload = CASES[key]
        scale = args.extender_scale if key == "d" else 1
        cases.append(
            Case(
                key,
                scheduler,
                workload,
                max(1, int(args.nodes * scale)),
                int(args.running * scale),
                max(1, int(args.pods * scale)),
            )
        )
    return cases


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--running", type=int, default=1000, help="pods bound before measuring")
    ap.add_argument("--pods", type=int, default=10000, help="pending pods measured")
    ap.add_argument("--cases", default="abcd", help="which cases, in order (default abcd)")
    ap.add_argument("--extender-scale", type=float, default=0.1, help="case d's sizes")
    ap.add_argument(
        "--qps",
        type=float,
        default=5000,
        help="clientConnection qps and burst of the schedulers (scheduler_perf's)",
    )
    ap.add_argument("--workers", type=int, default=8, help="threads creating objects")
    ap.add_argument(
        "--backlog",
        action="store_true",
        help="create the pending pods before the scheduler starts (its own capacity, "
        "without the API server creating pods meanwhile)",
    )
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for binds")
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""))
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run katalyst under cProfile (main thread), writing DIR/<case>-<role>.prof",
    )
    args = ap.parse_args(argv)
    if not args.kubeconfig or not Path(args.kubeconfig).is_file():
        ap.error("--kubeconfig (or $KUBECONFIG): an admin kubeconfig of the cluster is required")
    bad = sorted(set(args.cases) - set(CASES))
    if bad or not args.cases:
        ap.error(f"--cases {args.cases!r}: use letters of {''.join(CASES)}")
    if ("a" in args.cases or "d" in args.cases) and not (KUBE_BIN / "kube-scheduler").is_file():
        ap.error(f"no kube-scheduler at {KUBE_BIN} (scripts/k8s-build.sh builds it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global PROFILE_DIR
    PROFILE_DIR = args.profile
    if PROFILE_DIR is not None:
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # clean up on SIGTERM too
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # started in the background by a shell: Ctrl-C never comes, SIGTERM still cleans up
        print("SIGINT is ignored in this process (started in the background): stop it with SIGTERM")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it is: kill -USR1 <pid>
    api = KubeCluster.from_kubeconfig(args.kubeconfig, qps=0, pool_size=4 * args.workers)
    port = api.host.rsplit(":", 1)[-1]
    apiserver = find_process("kube-apiserver", port)
    print(
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cpus, "
        f"kube-apiserver pid {apiserver or 'not found (no cpu figures)'}"
    )
    results: dict[str, Result] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="sched-vs-kube-") as tmp:
            for case in build_cases(args):
                results[case.key] = run_case(api, case, args, Path(tmp), apiserver)
                report(results[case.key])
    except KeyboardInterrupt:
        print(
            "interrupted: everything created was deleted "
            "(the controller manager removes the namespace's pods in the background)",
            file=sys.stderr,
        )
        return 130
    finally:
        api.close()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    a, b, c = (results.get(k) for k in "abc")
    if a is not None and a.pods_per_s > 0:
        if c is not None:
            print(f"qos_mix_numa_over_kube_scheduler: {c.pods_per_s / a.pods_per_s:.2f}")
        if b is not None:
            print(f"katalyst_over_kube_scheduler: {b.pods_per_s / a.pods_per_s:.2f}")
    complete = all(r.bound == r.case.pods for r in results.values())
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
