"""`katalyst apiserver`: listening address, snapshots, and a run that saves on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pykatalyst.api.names import KATALYST_KINDS, NODE
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.apiserver import install_crds, load_state, save_state
from pykatalyst.cli.listen import parse_listen
from pykatalyst.cluster.connect import connect
from pykatalyst.cluster.protocol import NotFound


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        (":9000", ("127.0.0.1", 9000)),
        ("[::1]:0", ("::1", 0)),
        ("0.0.0.0:6443", ("0.0.0.0", 6443)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("8080", "expected HOST:PORT"), ("host:http", "not a number"), (":70000", "0-65535")],
)
def test_bad_listen_addresses_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_listen(text)


def test_state_round_trip(tmp_path: Path) -> None:
    store = MemoryCluster()
    store.create(NODE, {"metadata": {"name": "n1", "labels": {"pool": "a"}}})
    path = tmp_path / "state" / "cluster.json"
    save_state(store, path)
    loaded = load_state(path)
    assert loaded.get(NODE, "n1")["metadata"]["labels"] == {"pool": "a"}
    assert loaded.resource_version == store.resource_version
    assert list(path.parent.iterdir()) == [path], "no temporary files are left behind"
    assert load_state(tmp_path / "fresh.json").count(NODE) == 0


def test_damaged_state_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read a cluster snapshot"):
        load_state(path)
    path.write_text('{"items": []}')
    with pytest.raises(ValueError, match="not a cluster snapshot"):
        load_state(path)


def test_serve_and_save_on_sigterm(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from pykatalyst.cli.main import app; app()",
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--state",
            str(state),
            "--write-kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("serving the embedded cluster at http://127.0.0.1:"), first
        assert proc.stdout.readline().startswith("kubeconfig:")
        url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        assert first.split()[-1] == url
        cluster = connect(kubeconfig)
        cluster.create(NODE, {"metadata": {"name": "kept"}})
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert f"saved the cluster to {state}" in out
    assert load_state(state).get(NODE, "kept")["metadata"]["name"] == "kept"
    with pytest.raises(NotFound):
        load_state(state).get(NODE, "other")


def test_install_crds_from_a_folder(tmp_path: Path) -> None:
    store = MemoryCluster()
    crd_dir = Path(__file__).resolve().parents[2] / "deploy" / "crds"
    installed = install_crds(store, crd_dir)
    assert sorted(installed) == sorted(f"{k.plural}.{k.group}" for k in KATALYST_KINDS)
    assert install_crds(store, crd_dir) == [], "present CRDs are kept, not created twice"
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {}\n")
    with pytest.raises(ValueError, match=r"broken\.yaml"):
        install_crds(store, broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no YAML files"):
        install_crds(store, empty)


@pytest.mark.parametrize("command", [["scheduler", "--extender"], ["webhook"]])
def test_every_serving_command_refuses_a_bad_listen_address_alike(command: list[str]) -> None:
    from typer.testing import CliRunner

    from pykatalyst.cli.main import app

    result = CliRunner().invoke(app, [*command, "--listen", "localhost:http"])
    assert result.exit_code == 2
    assert "--listen 'localhost:http': port 'http' is not a number" in result.output
