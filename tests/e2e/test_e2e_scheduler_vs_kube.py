"""benchmarks/scheduler_vs_kube.py at tiny sizes on the real API server: every case runs
(kube-scheduler, `katalyst scheduler` with the default and the NUMA profile, kube-scheduler
with the extender), prints its figures and the ratio, and leaves nothing behind, also
when interrupted. No node lock: the fake nodes have no kubelet and no agent runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from tests.e2e.conftest import REPO, Kubectl
from tests.e2e.fake_nodes import kube_bin

SCRIPT = REPO / "benchmarks" / "scheduler_vs_kube.py"
BENCH_KEY = "bench.pykatalyst.io/run"


def _command(kubeconfig: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPT), "--kubeconfig", kubeconfig, *args]


def _left_over(kubectl: Kubectl, namespaces: list[str]) -> list[str]:
    """What the runs created that is still there (a namespace being deleted is gone)."""
    left = []
    for kind in ("nodes", "kcnr"):
        out = kubectl.run("get", kind, "-l", BENCH_KEY, "-o", "name").stdout.split()
        left += out
    for ns in namespaces:
        got = kubectl.run("get", "namespace", ns, "-o", "jsonpath={.status.phase}", check=False)
        if got.returncode == 0 and got.stdout.strip() != "Terminating":
            left.append(f"namespace/{ns}")
    return left


def test_every_case_reports_its_figures_and_cleans_up(kubeconfig: str, kubectl: Kubectl) -> None:
    kube_bin("kube-scheduler")
    proc = subprocess.run(
        _command(
            kubeconfig,
            *("--nodes", "12", "--running", "6", "--pods", "30", "--extender-scale", "0.5"),
        ),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    namespaces = re.findall(r" in (bench-[a-d]-[0-9a-f]{6})$", out, re.M)
    assert [ns[6] for ns in namespaces] == list("abcd")
    figures = re.findall(r"^  pods/s ([0-9.]+) \((\d+)/(\d+) bound", out, re.M)
    assert [(b, n) for _, b, n in figures] == [("30", "30")] * 3 + [("15", "15")], out
    assert all(float(rate) > 0 for rate, _, _ in figures)
    assert re.search(r"^  creation -> bound ms: p50 \d+  p99 \d+$", out, re.M), out
    assert re.search(r"^  apiserver POST pods/binding: \d+ requests, p50 ", out, re.M), out
    assert "kube-apiserver pid " in out and "not found" not in out
    ratio = re.search(r"^katalyst_over_kube_scheduler: ([0-9.]+)$", out.rstrip().splitlines()[-1])
    assert ratio is not None and float(ratio.group(1)) > 0, out[-500:]
    assert _left_over(kubectl, namespaces) == []


def _as_from_a_terminal() -> None:
    # A process started in the background by a shell (as the e2e lanes are, and as a CI
    # runner may start the whole suite) inherits SIGINT ignored, and so would the benchmark:
    # Ctrl-C reaches a foreground process, whose SIGINT is the default one.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_an_interrupted_run_deletes_what_it_created(kubeconfig: str, kubectl: Kubectl) -> None:
    proc = subprocess.Popen(
        _command(kubeconfig, "--nodes", "12", "--running", "4", "--pods", "2000", "--cases", "b"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=_as_from_a_terminal,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 180
    exited = False
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "set up in" in line:
                break
        assert any("set up in" in x for x in lines), "".join(lines)
        time.sleep(8)  # the scheduler runs and pods are being created
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=180)
            exited = True
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the benchmark prints where each thread is
            time.sleep(2)
            proc.kill()
            rest, _ = proc.communicate()
            raise AssertionError(
                "the benchmark did not exit within 180s of Ctrl-C:\n"
                + ("".join(lines) + rest)[-8000:]
            ) from None
    finally:
        if not exited:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            # killed before its own cleanup, it leaves its schedulers (in their own sessions)
            subprocess.run(["pkill", "-f", "sched-vs-kube-"], check=False)
    out = "".join(lines) + rest
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted: everything created was deleted" in out
    namespaces = re.findall(r" in (bench-b-[0-9a-f]{6})$", out, re.M)
    assert len(namespaces) == 1
    assert _left_over(kubectl, namespaces) == []
    # its scheduler process is gone too (its command line names the run's temporary dir)
    ps = subprocess.run(["pgrep", "-f", "sched-vs-kube-"], capture_output=True, text=True)
    assert ps.returncode == 1, ps.stdout
