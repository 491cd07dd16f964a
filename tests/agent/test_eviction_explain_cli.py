"""`katalyst explain`: the eviction records and Events, read back by a user."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pykatalyst.agent.eviction import (
    EvictionConfig,
    EvictionExecutor,
    EvictionManager,
    EvictionRecorder,
    EvictionSnapshot,
    ReclaimedCapacity,
)
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import VirtualClock
from tests.agent.eviction_pods import eviction_pod

GIB = 1 << 30
runner = CliRunner()


def evict_once(tmp_path: Path, dry_run: bool = False) -> tuple[Path, Path]:
    clock = VirtualClock(1000)
    cluster = MemoryCluster(clock=clock, namespaces=("default", "batch"))
    cluster.create(names.NODE, {"metadata": {"name": "n1"}})
    created = []
    for name in ("small", "big"):
        annotations = {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES}
        created.append(
            cluster.create(
                names.POD,
                {
                    "metadata": {"name": name, "namespace": "batch", "annotations": annotations},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
                },
            )
        )
    pods = tuple(
        eviction_pod(
            p["metadata"]["uid"],
            "batch",
            p["metadata"]["name"],
            names.QOS_RECLAIMED_CORES,
            reclaimed_milli_cpu=m,
        )
        for p, m in zip(created, (2000, 9000), strict=True)
    )
    records = tmp_path / "records.jsonl"
    cfg = EvictionConfig(dry_run=("*",) if dry_run else ())
    recorder = EvictionRecorder(path=records)
    plan = EvictionManager("n1", cfg).decide(
        EvictionSnapshot(0, "n1", pods, reclaimed=ReclaimedCapacity(1000, 100 * GIB))
    )
    EvictionExecutor(cluster, "n1", recorder).apply(plan)
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"kind": "EventList", "items": cluster.list(names.EVENT).items}))
    return records, events


def test_explain_a_pod_from_records(tmp_path: Path) -> None:
    records, _ = evict_once(tmp_path)
    result = runner.invoke(app, ["explain", "--records", str(records), "--pod", "batch/big"])
    assert result.exit_code == 0, result.output
    assert "eviction" in result.output
    assert names.EVICTION_PLUGIN_RECLAIMED_RESOURCE in result.output
    assert "batch/small" in result.output  # the ranking shows who else was considered


def test_explain_json_carries_every_term(tmp_path: Path) -> None:
    records, _ = evict_once(tmp_path)
    result = runner.invoke(app, ["explain", "--records", str(records), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    eviction = next(r for r in data if r["kind"] == "eviction")
    assert eviction["object"] == "Pod/batch/big"
    assert eviction["observed"] == 11000 and eviction["threshold"] == 5000
    assert eviction["operator"] == ">" and eviction["unit"] == "millicpu"
    assert eviction["window"]
    assert [r["pod"] for r in eviction["ranking"]] == ["batch/big", "batch/small"]


def test_explain_from_events_of_a_cluster(tmp_path: Path) -> None:
    _, events = evict_once(tmp_path)
    result = runner.invoke(app, ["explain", "--events", str(events), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {r["kind"] for r in data} == {"eviction", "condition-set"}
    eviction = next(r for r in data if r["kind"] == "eviction")
    assert eviction["object"] == "Pod/batch/big"
    assert eviction["plugin"] == names.EVICTION_PLUGIN_RECLAIMED_RESOURCE


def test_dry_run_records_are_marked(tmp_path: Path) -> None:
    records, events = evict_once(tmp_path, dry_run=True)
    result = runner.invoke(app, ["explain", "--records", str(records)])
    assert result.exit_code == 0, result.output
    assert "(dry run)" in result.output
    assert json.loads(events.read_text())["items"] == []  # dry run: no Events at all


def test_explain_needs_a_source_and_names_a_bad_file(tmp_path: Path) -> None:
    assert runner.invoke(app, ["explain"]).exit_code == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    result = runner.invoke(app, ["explain", "--records", str(bad)])
    assert result.exit_code == 1
    assert "bad.jsonl:1" in result.output
    missing = runner.invoke(app, ["explain", "--records", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 1 and "none.jsonl" in missing.output
