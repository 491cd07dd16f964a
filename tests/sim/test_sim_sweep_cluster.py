"""Sweeps sent to a Ray cluster by its address (`--ray-address`): a real head started with
`ray start`, joined as a user's cluster would be, by its GCS address; and an
address that cannot be joined, refused with the reason before anything runs or is written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pykatalyst.cli.main import app
from pykatalyst.sim.scenario import parse_scenario
from pykatalyst.sim.sweep import (
    HEADLINE,
    RayUnreachable,
    address_problem,
    parse_sweep,
    plan_sweep,
    run_sweep,
    unreachable_message,
)
from tests.sim.conftest import tiny

AUTH_ERROR = (
    "RPC error: InvalidAuthToken: Authentication token is missing or incorrect.\n"
    "Ensure that the token for the cluster is available in a local file"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scenario_data() -> dict[str, Any]:
    data = tiny(duration="40m")
    data["nodes"][0]["count"] = 1
    data["services"][0]["replicas"] = 1
    return data


@pytest.fixture
def ray_head() -> Iterator[str]:
    """A one-node Ray cluster of 2 cpus started as a user starts one (`ray start --head`),
    on ports of its own; yields its GCS address."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'pykatalyst[sweep]')")
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip(f"the ray command is not beside this Python ({ray_cli})")
    # Ray's unix socket paths live under its temp dir and must stay short
    temp = tempfile.mkdtemp(prefix="rh", dir="/tmp")
    gcs = _free_port()
    ports = {
        "--port": gcs,
        "--ray-client-server-port": _free_port(),
        "--dashboard-agent-listen-port": _free_port(),
        "--dashboard-agent-grpc-port": _free_port(),
        "--metrics-export-port": _free_port(),
        "--runtime-env-agent-port": _free_port(),
        "--node-manager-port": _free_port(),
        "--object-manager-port": _free_port(),
    }
    args = [str(ray_cli), "start", "--head", "--block", "--num-cpus", "2"]
    args += ["--temp-dir", temp]
    args += ["--include-dashboard=false", "--disable-usage-stats"]
    # a worker port range of its own, away from a local Ray's (10002-19999)
    args += ["--min-worker-port", "20100", "--max-worker-port", "20199"]
    for flag, port in ports.items():
        args += [flag, str(port)]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while address_problem(f"127.0.0.1:{gcs}", 0.5) is not None:
            if proc.poll() is not None:
                pytest.fail(f"`ray start --head` exited with {proc.returncode}")
            if time.monotonic() > deadline:
                pytest.fail("the Ray head did not answer within 90 s")
            time.sleep(0.2)
        yield f"127.0.0.1:{gcs}"
        assert proc.poll() is None, "the sweep stopped the cluster it was sent to"
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # `ray start --block` stops its processes
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_sweep_runs_on_a_ray_cluster_given_by_its_address(
    ray_head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    gcs = ray_head
    runs = plan_sweep(
        parse_scenario(_scenario_data()),
        parse_sweep({"axes": {"seed": [1, 2]}, "policies": ["vanilla"]}),
        "sweep.yaml",
    )
    alone, _ = run_sweep(runs, use_ray=False)
    on_cluster, how = run_sweep(runs, ray_address=gcs)
    assert how == f"on the Ray cluster at {gcs} (2 cpus)"
    assert [o.error for o in on_cluster] == [None, None]
    assert [o.figures for o in on_cluster] == [o.figures for o in alone]
    assert not ray.is_initialized()  # the sweep left the cluster, which still runs
    # the command, by the same address (Ray's client address, ray://, goes through a server
    # process Ray starts per client, which here failed to start one time in five)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(_scenario_data()))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"axes": {"seed": [1, 2]}, "policies": ["vanilla"]}))
    out = tmp_path / "out"
    args = ["sim", str(scenario), "--sweep", str(sweep), "--out", str(out), "-q"]
    res = CliRunner().invoke(app, [*args, "--ray-address", gcs])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert report["ran"] == f"on the Ray cluster at {gcs} (2 cpus)"
    headline = [{p: {n: f[n] for n in HEADLINE} for p, f in o.figures.items()} for o in alone]
    assert [r["figures"] for r in report["runs"]] == headline


def test_an_address_where_nothing_answers_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'pykatalyst[sweep]')")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(_scenario_data()))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"axes": {"seed": [1, 2]}, "policies": ["vanilla"]}))
    port = _free_port()  # closed again: nothing listens there
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        out = tmp_path / "out"
        args = ["sim", str(scenario), "--sweep", str(sweep), "--out", str(out)]
        started = time.monotonic()
        res = CliRunner().invoke(app, [*args, "--ray-address", address])
        assert res.exit_code == 2, res.output
        assert f"--ray-address {address}: nothing answers at 127.0.0.1:{port}" in res.output
        assert time.monotonic() - started < 30  # not Ray's minutes of retries
        assert not out.exists()


def test_a_cluster_that_refuses_the_sweep_is_reported_with_ray_s_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as listener:  # something answers at the address
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"

        def refuse(**kwargs: Any) -> None:
            try:
                raise RuntimeError(f"Failed to connect to GCS. {AUTH_ERROR}")
            except RuntimeError as exc:
                raise ConnectionError(f"Failed to connect to Ray cluster at {address}") from exc

        fake = types.SimpleNamespace(is_initialized=lambda: False, init=refuse)
        monkeypatch.setitem(sys.modules, "ray", fake)
        runs = plan_sweep(
            parse_scenario(_scenario_data()),
            parse_sweep({"axes": {"seed": [1]}, "policies": ["vanilla"]}),
            "sweep.yaml",
        )
        with pytest.raises(RayUnreachable) as err:
            run_sweep(runs, ray_address=address)
    text = str(err.value)
    assert text.startswith(f"--ray-address {address}: cannot join the Ray cluster there")
    assert "ConnectionError: Failed to connect to Ray cluster" in text
    assert "InvalidAuthToken" in text  # the cause, where Ray says why
    assert "RAY_AUTH_MODE=token" in text


def test_the_token_hint_comes_only_where_ray_speaks_of_a_token() -> None:
    plain = unreachable_message("h:1", ConnectionError("Failed to connect to Ray cluster at h:1"))
    assert plain == (
        "--ray-address h:1: cannot join the Ray cluster there "
        "(ConnectionError: Failed to connect to Ray cluster at h:1)"
    )
    assert "RAY_AUTH_MODE" not in plain
    assert "RAY_AUTH_MODE=token" in unreachable_message("h:1", ConnectionError(AUTH_ERROR))


@pytest.mark.parametrize("address", ["auto", "ray://head", "head", "ray://head:port"])
def test_addresses_without_a_port_are_left_to_ray(address: str) -> None:
    assert address_problem(address) is None


def test_a_port_out_of_range_is_named() -> None:
    assert address_problem("ray://head:70000") == "port 70000 is outside 0-65535"
