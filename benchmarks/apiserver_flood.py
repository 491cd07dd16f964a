"""Idle watches and silent sockets against the embedded API server, on loopback.

    python benchmarks/apiserver_flood.py [--watches 250] [--sockets 2000] [--idle 2]

Opens the watches (each a real `?watch=true` GET), then the silent sockets (connect, send
nothing), and prints how many were served, refused (429) or closed by the server, with
the process's resident memory before, at the peak and after. Every loop is bounded in
count and time."""

from __future__ import annotations

import argparse
import contextlib
import resource
import socket
import time

from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import RealClock
from pykatalyst.runtime import apiserver as runtime_apiserver
from pykatalyst.runtime.apiserver import ApiServer


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_watch(host: str, port: int) -> tuple[socket.socket, int]:
    sock = socket.create_connection((host, port), timeout=10)
    sock.sendall(b"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
    head = sock.recv(4096).decode(errors="replace")
    return sock, int(head.split()[1]) if head else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--watches", type=int, default=250)
    ap.add_argument("--sockets", type=int, default=2000)
    ap.add_argument("--idle", type=float, default=2.0, help="the server's idle timeout (s)")
    args = ap.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    runtime_apiserver.IDLE_TIMEOUT_S = args.idle
    server = ApiServer(MemoryCluster(clock=RealClock()), bookmark_seconds=0)
    server.start()
    host, port = "127.0.0.1", server.port
    base = rss_mib()
    watches, codes = [], {}
    started = time.monotonic()
    for _ in range(args.watches):
        sock, code = open_watch(host, port)
        codes[code] = codes.get(code, 0) + 1
        (watches.append(sock) if code == 200 else sock.close())
    print(
        f"{args.watches} watches in {time.monotonic() - started:.1f}s: {codes}; "
        f"RSS {base:.0f} -> {rss_mib():.0f} MiB"
    )
    silent = []
    for _ in range(args.sockets):
        silent.append(socket.create_connection((host, port), timeout=10))
    peak = rss_mib()
    deadline = time.monotonic() + args.idle + 20
    closed = 0
    for s in silent:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            closed += s.recv(1) == b""
    waited = time.monotonic() - started
    print(
        f"{args.sockets} silent sockets: {closed} closed by the server "
        f"(idle timeout {args.idle:g}s); RSS at peak {peak:.0f} MiB"
    )
    ok = socket.create_connection((host, port), timeout=10)
    ok.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    status_line = ok.recv(64).split(b"\r\n")[0].decode()
    print(f"still answering: {status_line} after {waited:.1f}s")
    for s in silent + watches + [ok]:
        s.close()
    server.stop()
    print(f"after closing everything: RSS {rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
