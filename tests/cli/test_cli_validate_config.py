"""`katalyst validate -f` on config objects: per field, whether it takes effect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.cli.main import app

AQC = {
    "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
    "kind": names.ADMIN_QOS_CONFIGURATION.kind,
    "metadata": {"name": "default", "namespace": "kube-system"},
    "spec": {
        "nodeLabelSelector": "pool=a",
        "config": {
            "reclaimedResourceConfig": {"enableReclaim": True},
            "evictionConfig": {
                "cpuPressureEvictionConfig": {"loadEvictionCoolDownTime": "300s"},
                "memoryPressureEvictionConfig": {"enableRSSOveruseEviction": True},
            },
            "reclaimedResourceConfg": {"typo": 1},
        },
    },
}
NOC = {
    "apiVersion": names.NODE_OVERCOMMIT_CONFIG.api_version,
    "kind": names.NODE_OVERCOMMIT_CONFIG.kind,
    "metadata": {"name": "pool-a"},
    "spec": {"nodeOvercommitSelectorVal": "a", "resourceOvercommitRatio": {"cpu": "1.5"}},
}


def _run(tmp_path: Path, *docs: dict[str, Any], fmt: str = "json") -> tuple[int, str]:
    path = tmp_path / "configs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(app, ["validate", "-f", str(path), "-o", fmt])
    return result.exit_code, result.stdout


def _fields(report: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    (entry,) = [c for c in report["configs"] if c["kind"] == kind]
    return {f["field"]: f for f in entry["fields"]}


def test_each_field_says_whether_it_takes_effect(tmp_path: Path) -> None:
    code, out = _run(tmp_path, AQC, NOC)
    report = json.loads(out)
    fields = _fields(report, names.ADMIN_QOS_CONFIGURATION.kind)
    enable = fields["spec.config.reclaimedResourceConfig.enableReclaim"]
    assert enable["takesEffect"] is True and enable["sets"] == "advisor.enable_reclaim"
    cool = fields["spec.config.evictionConfig.cpuPressureEvictionConfig.loadEvictionCoolDownTime"]
    assert cool["takesEffect"] is True and cool["value"] == "300s"
    rss = fields["spec.config.evictionConfig.memoryPressureEvictionConfig.enableRSSOveruseEviction"]
    assert rss["takesEffect"] is False and "does not implement" in rss["note"]
    selector = fields["spec.nodeLabelSelector"]
    assert selector["takesEffect"] is True and selector["sets"].startswith("controller (kcc)")
    # A field no Katalyst schema has is a warning (the API server would drop it), not an
    # error; so is one of Katalyst's that pykatalyst does not act on.
    typo = fields["spec.config.reclaimedResourceConfg"]
    assert typo["inKatalystSchema"] is False
    assert code == 0
    warned = {p["field"]: p for p in report["problems"]}
    assert set(warned) == {
        "spec.config.reclaimedResourceConfg",
        "spec.config.evictionConfig.memoryPressureEvictionConfig.enableRSSOveruseEviction",
    }
    assert all(p["severity"] == "warning" for p in warned.values())
    noc = _fields(report, names.NODE_OVERCOMMIT_CONFIG.kind)
    assert all(f["takesEffect"] for f in noc.values())
    assert noc["spec.resourceOvercommitRatio.cpu"]["sets"].startswith("controller (overcommit)")


def test_an_invalid_value_fails_naming_the_field_and_what_is_accepted(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(AQC))
    bad["spec"]["config"]["evictionConfig"]["cpuPressureEvictionConfig"][
        "loadEvictionCoolDownTime"
    ] = "5 minutes"
    code, out = _run(tmp_path, bad)
    assert code == 1
    (problem,) = [p for p in json.loads(out)["problems"] if p["severity"] == "error"]
    assert problem["field"].endswith("cpuPressureEvictionConfig.loadEvictionCoolDownTime")
    assert problem["value"] == "5 minutes"
    assert "accepted: a Go duration such as 30s" in problem["accepted"]


def test_the_table_shows_each_field(tmp_path: Path) -> None:
    code, out = _run(tmp_path, AQC, fmt="table")
    assert code == 0
    assert "AdminQoSConfiguration kube-system/default" in out
    assert "enableReclaim" in out and "advisor.enable_reclaim" in out
