"""Pod admissions per second through `katalyst webhook` over HTTPS, and their latency.

Starts the webhook as its own process on 127.0.0.1 (a self-signed pair), then keeps
`--concurrency` AdmissionReview requests in flight over keep-alive connections, as
kube-apiserver does, alternating the validating and the mutating route with a mix of valid
pods, pods with a warning and pods refused. Latency is measured at the client, so it bounds
the time spent inside the webhook from above (it includes the TLS transport and the
client's own work on the same machine); the webhook's own figure is read from its
`katalyst_webhook_admission_duration_seconds` histogram (request read to response built)
as the upper bound of the bucket that holds the 99th percentile."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

QOS = "katalyst.kubewharf.io/qos_level"
MEM = "katalyst.kubewharf.io/memory_enhancement"


def _review(i: int) -> bytes:
    annotations = [
        {QOS: "shared_cores"},
        {QOS: "shared_cores", MEM: '{"numa_binding":"true","numa_exclusive":"true"}'},
        {QOS: "gold_cores"},
        {QOS: "dedicated_cores", MEM: '{"numa_binding":"true"}'},
    ][i % 4]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": "default", "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "2", "memory": "4Gi"},
                        "limits": {"cpu": "2", "memory": "4Gi"},
                    },
                }
            ]
        },
    }
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    req = {
        "uid": f"uid-{i}",
        "kind": gvk,
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": "default",
        "name": f"pod-{i}",
        "object": pod,
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
    return json.dumps(body).encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_ready(url: str, trust: ssl.SSLContext, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(300):
            if proc.poll() is not None:
                raise SystemExit("the webhook exited before it was ready")
            try:
                async with s.get(url + "/readyz", ssl=trust) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("the webhook never became ready")


async def _load(url: str, trust: ssl.SSLContext, seconds: float, concurrency: int) -> list[float]:
    bodies = [_review(i) for i in range(64)]
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    conn = aiohttp.TCPConnector(limit=concurrency, ssl=trust)
    async with aiohttp.ClientSession(connector=conn) as s:

        async def worker(k: int) -> None:
            i = k
            while time.perf_counter() < deadline:
                path = "/validate/pods" if i % 2 else "/mutate/pods"
                start = time.perf_counter()
                async with s.post(url + path, data=bodies[i % len(bodies)]) as r:
                    await r.read()
                    if r.status != 200:
                        raise SystemExit(f"{path}: HTTP {r.status}")
                latencies.append(time.perf_counter() - start)
                i += concurrency

        await asyncio.gather(*(worker(k) for k in range(concurrency)))
    return latencies


async def _server_p99_ms(url: str, trust: ssl.SSLContext) -> float:
    """The upper bound of the histogram bucket holding the webhook's 99th percentile."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics", ssl=trust) as r:
        text = await r.text()
    buckets: dict[float, float] = {}
    name = "katalyst_webhook_admission_duration_seconds_bucket{"
    for line in text.splitlines():
        if line.startswith(name):
            labels, value = line[len(name) :].rsplit("} ", 1)
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
    total = buckets.get(float("inf"), 0.0)
    for bound in sorted(buckets):
        if buckets[bound] >= 0.99 * total:
            return bound * 1000
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        katalyst = str(Path(sys.executable).parent / "katalyst")
        cmd = [katalyst, "webhook", "--embedded", "--self-signed", str(certs)]
        cmd += ["--listen", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"https://127.0.0.1:{port}"
            while not (certs / "ca.crt").exists() and proc.poll() is None:
                time.sleep(0.05)
            trust = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            asyncio.run(_wait_ready(url, trust, proc))
            asyncio.run(_load(url, trust, 0.5, args.concurrency))  # warm up
            started = time.perf_counter()
            latencies = asyncio.run(_load(url, trust, args.seconds, args.concurrency))
            elapsed = time.perf_counter() - started
            inside_p99 = asyncio.run(_server_p99_ms(url, trust))
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(f"requests: {len(latencies)} in {elapsed:.1f}s, concurrency {args.concurrency}")
    print(f"at the client: p50_ms: {p50:.2f} p99_ms: {p99:.2f}")
    # the webhook's own p99 (warm-up included), as the bound of its histogram bucket
    print(f"admissions/s: {len(latencies) / elapsed:.0f} p99_ms: {inside_p99:.2f}")


if __name__ == "__main__":
    main()
