"""The one list of what pykatalyst does with Katalyst's features, and what reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pykatalyst.api import names, support
from pykatalyst.api.config_fields import CONFIG_KINDS
from pykatalyst.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- support table: python -m pykatalyst.api.support -->"
END = "<!-- end of support table -->"


def test_the_readme_table_is_the_code_s_list() -> None:
    readme = (ROOT / "README.md").read_text()
    assert BEGIN in readme and END in readme
    table = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip() + "\n"
    assert table == support.markdown_table(), (
        "README.md's table differs from src/pykatalyst/api/support.py: paste the output of "
        "`python -m pykatalyst.api.support` between its markers"
    )


def test_every_katalyst_kind_is_in_the_list_once() -> None:
    # A CRD kind that installs is either acted on, or said not to be.
    listed = {kind for f in support.FEATURES for kind in f.kinds}
    crd_kinds = {k.kind for k in names.KATALYST_KINDS} - {names.CUSTOM_NODE_RESOURCE.kind}
    assert crd_kinds <= listed, crd_kinds - listed
    keys = [f.key for f in support.FEATURES]
    assert len(keys) == len(set(keys))


def test_what_acts_is_named_and_what_does_not_says_why() -> None:
    for f in support.FEATURES:
        assert f.note and f.katalyst and f.koordinator, f.key
        if f.acted_on:
            assert f.by, f"{f.key}: which component acts on it"
        else:
            assert not f.by, f"{f.key}: nothing acts on it, so no component is named"
            assert f.title in f.why_not()


def test_the_elastic_scaling_controllers_named_in_the_list_exist() -> None:
    from pykatalyst.runtime.controller import CONTROLLERS

    for key, controller in (
        ("spd", names.CONTROLLER_SPD),
        ("resource-recommend", names.CONTROLLER_RESOURCE_RECOMMEND),
        ("kvpa", names.CONTROLLER_VPA),
        ("ihpa", names.CONTROLLER_IHPA),
    ):
        f = support.feature(key)
        assert f.acted_on and f"controller ({controller})" in f.by, key
        assert controller in CONTROLLERS


def _validate(tmp_path: Path, text: str, *flags: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    f = tmp_path / "m.yaml"
    f.write_text(text)
    result = CliRunner().invoke(app, ["validate", "-f", str(f), "-o", "json", *flags])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize(
    "feature",
    [f for f in support.FEATURES if f.kinds and not f.acted_on and f.kinds[0] not in CONFIG_KINDS],
    ids=lambda f: f.key,
)
def test_validate_warns_about_a_kind_nothing_acts_on(
    tmp_path: Path, feature: support.Feature
) -> None:
    kind = feature.kinds[0]
    doc = f"apiVersion: x.katalyst.kubewharf.io/v1alpha1\nkind: {kind}\nmetadata: {{name: a}}\n"
    code, report = _validate(tmp_path, doc)
    assert code == 0
    (problem,) = report["problems"]
    assert problem["severity"] == "warning" and problem["value"] == kind
    assert problem["message"] == feature.why_not()
    strict, _ = _validate(tmp_path, doc, "--strict")
    assert strict == 1


POD = """apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    katalyst.kubewharf.io/qos_level: shared_cores
    katalyst.kubewharf.io/cpu_enhancement: '{"cpu_burst_policy":"static","cpu_burst_percent":"50"}'
spec:
  containers: [{name: c, image: i, resources: {requests: {cpu: "1"}}}]
"""


def test_validate_warns_about_pod_enhancements_the_agent_ignores(tmp_path: Path) -> None:
    code, report = _validate(tmp_path, POD)
    assert code == 0
    fields = {p["field"]: p for p in report["problems"]}
    burst = support.feature("cpu-burst")
    for key in ("cpu_burst_policy", "cpu_burst_percent"):
        (found,) = [p for f, p in fields.items() if f.endswith(key)]
        assert found["message"] == burst.why_not()
    assert len(report["pods"]) == 1  # the pod is still read
    assert _validate(tmp_path, POD, "--strict")[0] == 1


def test_an_overcommit_config_is_no_longer_said_to_be_ignored(tmp_path: Path) -> None:
    noc = (
        "apiVersion: overcommit.katalyst.kubewharf.io/v1alpha1\nkind: NodeOvercommitConfig\n"
        "metadata: {name: a}\nspec: {resourceOvercommitRatio: {cpu: '1.5'}}\n"
    )
    code, report = _validate(tmp_path, noc)
    assert code == 0 and report["problems"] == []


def test_a_folder_without_manifests_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("no manifests here")
    result = CliRunner().invoke(app, ["validate", "-f", str(tmp_path)])
    assert result.exit_code == 1
    assert "a folder with no manifests" in result.output


def test_a_kvpa_is_acted_on_and_gets_no_not_acted_on_warning(tmp_path: Path) -> None:
    kvpa = (
        "apiVersion: autoscaling.katalyst.kubewharf.io/v1alpha1\n"
        "kind: KatalystVerticalPodAutoscaler\nmetadata: {name: a, namespace: d}\n"
        "spec: {targetRef: {kind: Deployment, name: web, apiVersion: apps/v1}}\n"
    )
    code, report = _validate(tmp_path, kvpa)
    assert code == 0, report["problems"]
    assert not [p for p in report["problems"] if "does not act on" in p["message"]]
