from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.api.support import for_kind
from pykatalyst.cli.main import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INVALID_DIR = Path(__file__).parent / "data" / "invalid"
KATALYST_EXAMPLES = REPO.parent / "shared" / "katalyst-examples"

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def run_json(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = runner.invoke(app, [*args, "--output", "json"])
    return result.exit_code, json.loads(result.stdout)


def test_examples_validate_and_cover_every_level() -> None:
    code, report = run_json("validate", "-f", str(EXAMPLES / "pods"))
    assert code == 0, report["problems"]
    assert report["valid"] is True
    by_name = {p["name"]: p for p in report["pods"]}
    assert {p["qosLevel"] for p in report["pods"]} == set(names.QOS_LEVELS)
    assert by_name["dedicated-numa-exclusive"]["enhancements"] == {
        "numa_binding": True,
        "numa_exclusive": True,
        "oom_priority": 150,
    }
    assert by_name["shared-unlimited"]["k8sQoSClass"] == "Burstable"
    assert by_name["shared-unlimited"]["limits"] == {}
    assert by_name["reclaimed-normal"]["k8sQoSClass"] == "BestEffort"
    assert by_name["system-agent"]["enhancements"] == {"cpuset_pool": "system-agents"}
    deployment = by_name["batch-workers"]
    assert deployment["kind"] == "Deployment"
    assert deployment["template"] == "spec.template"
    assert deployment["requests"][names.RECLAIMED_MILLICPU] == "4k"
    assert deployment["containers"][0]["index"] == 0


def test_table_output_lists_each_pod() -> None:
    code, out = run("validate", "-f", str(EXAMPLES / "pods" / "dedicated-numa-binding.yaml"))
    assert code == 0
    assert "dedicated-numa-binding" in out
    assert "dedicated_cores" in out and "Guaranteed" in out and "numa_binding" in out


@pytest.mark.skipif(not KATALYST_EXAMPLES.is_dir(), reason="Katalyst's examples are not present")
def test_katalyst_examples_are_accepted_and_non_pods_skipped() -> None:
    code, report = run_json("validate", "-f", str(KATALYST_EXAMPLES))
    assert code == 0, report["problems"]
    # every pod is read; what pykatalyst does not act on yet is a warning naming the kind
    assert len(report["pods"]) == len({(p["file"], p["name"]) for p in report["pods"]}) >= 10
    skipped = {s["kind"] for s in report["skipped"]}
    assert {"ConfigMap", "EvictionConfiguration"} <= skipped
    assert {c["kind"] for c in report["configs"]} == {"KatalystCustomConfig"}
    warned = {p["value"] for p in report["problems"]}
    assert all(p["severity"] == "warning" and p["field"] == "kind" for p in report["problems"])
    not_acted_on = {k for k in skipped if (f := for_kind(k)) is not None and not f.acted_on}
    assert warned == not_acted_on and "EvictionConfiguration" in warned
    strict, _ = run_json("validate", "--strict", "-f", str(KATALYST_EXAMPLES))
    assert strict == 1


INVALID = {
    "unknown-level.yaml": (
        f"metadata.annotations[{names.QOS_LEVEL_ANNOTATION}]",
        "premium_cores",
        "can't get valid qos level",
    ),
    "exclusive-without-binding.yaml": (
        f"metadata.annotations[{names.MEMORY_ENHANCEMENT_ANNOTATION}].numa_binding",
        None,
        "dedicated_cores requires numa_binding",
    ),
    "bad-quantity.yaml": (
        "spec.containers[0].resources.requests[cpu]",
        "two",
        "invalid quantity",
    ),
}

# Katalyst runs these pods: a warning by default, an error with --strict.
LENIENT_DIR = INVALID_DIR.parent / "lenient"
LENIENT = {
    "malformed-enhancement.yaml": (
        f"metadata.annotations[{names.MEMORY_ENHANCEMENT_ANNOTATION}]",
        '{"numa_binding": "true",}',
        "Katalyst reads it as empty",
    ),
    "enhancement-not-allowed.yaml": (
        f"metadata.annotations[{names.CPU_ENHANCEMENT_ANNOTATION}].cpuset_pool",
        "batch",
        "cpuset_pool has no effect on reclaimed_cores",
    ),
    "dedicated-fractional-cpu.yaml": (
        "spec.containers[0].resources.requests.cpu",
        "1500m",
        "rounded up to 2",
    ),
    "reclaimed-native-cpu.yaml": (
        "spec.containers[0].resources.requests.cpu",
        "2",
        "asks for native cpu",
    ),
}


@pytest.mark.parametrize("name", sorted(LENIENT))
def test_pods_katalyst_runs_pass_with_a_warning_and_fail_strict(name: str) -> None:
    field, value, message = LENIENT[name]
    path = LENIENT_DIR / name
    code, report = run_json("validate", "-f", str(path))
    assert code == 0, report["problems"]
    assert report["valid"] is True and len(report["pods"]) == 1
    first = report["problems"][0]
    assert first["severity"] == "warning"
    assert (first["field"], first["value"]) == (field, value)
    assert message in first["message"]
    code, out = run("validate", "-f", str(path))
    assert code == 0 and "warning:" in out and message in out
    code, out = run("validate", "--strict", "-f", str(path))
    assert code == 1 and "error:" in out and message in out


@pytest.mark.parametrize("name", sorted(INVALID))
def test_each_invalid_example_gets_its_own_message(name: str) -> None:
    field, value, message = INVALID[name]
    path = INVALID_DIR / name
    code, report = run_json("validate", "-f", str(path))
    assert code == 1
    assert report["valid"] is False and report["pods"] == []
    first = report["problems"][0]
    assert (first["field"], first["value"]) == (field, value)
    assert message in first["message"]
    assert first["file"] == str(path)
    assert first["object"].startswith("Pod default/")
    assert first["accepted"]
    code, out = run("validate", "-f", str(path))
    assert code == 1
    assert message in out and field in out and str(path) in out


def test_invalid_messages_differ() -> None:
    messages = set()
    for folder, cases in ((INVALID_DIR, INVALID), (LENIENT_DIR, LENIENT)):
        for name in cases:
            _, report = run_json("validate", "-f", str(folder / name))
            messages.add(report["problems"][0]["message"])
    assert len(messages) == len(INVALID) + len(LENIENT)


def test_yaml_syntax_error_reports_file_and_line() -> None:
    path = INVALID_DIR / "syntax-error.yaml"
    code, out = run("validate", "-f", str(path))
    assert code == 1
    assert f"{path}:11: invalid YAML" in out


def test_workload_template_fields_are_prefixed(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ns}\nspec:\n"
        "  template:\n    metadata:\n      annotations:\n"
        "        katalyst.kubewharf.io/qos_level: gold\n"
        "    spec:\n      containers: [{name: a, image: x}]\n"
    )
    code, report = run_json("validate", "-f", str(tmp_path))
    assert code == 1
    problem = report["problems"][0]
    assert problem["object"] == "Job ns/j"
    assert problem["field"] == f"spec.template.metadata.annotations[{names.QOS_LEVEL_ANNOTATION}]"


def test_strict_turns_warnings_into_failures(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "kind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        '    katalyst.kubewharf.io/cpu_enhancement: \'{"future_knob": "1"}\'\n'
        "spec:\n  containers: [{name: a, image: x}]\n"
    )
    code, report = run_json("validate", "-f", str(tmp_path))
    assert code == 0
    assert report["problems"][0]["severity"] == "warning"
    assert report["pods"][0]["warnings"]
    code, _ = run("validate", "-f", str(tmp_path), "--strict")
    assert code == 1


def test_missing_path_fails() -> None:
    code, out = run("validate", "-f", "/no/such/place")
    assert code == 1
    assert "no such file or folder" in out


def test_an_unreadable_gpu_rdma_pairing_is_an_error_naming_the_annotation(
    tmp_path: Path,
) -> None:
    aff = names.GPU_RDMA_AFFINITY_ANNOTATION
    (tmp_path / "p.yaml").write_text(
        f"kind: Pod\nmetadata:\n  name: p\n  annotations:\n    {aff}: always\n"
        "spec:\n  containers: [{name: a, image: x}]\n"
    )
    code, report = run_json("validate", "-f", str(tmp_path))
    assert code == 1
    problem = report["problems"][0]
    assert problem["field"] == f"metadata.annotations[{aff}]" and problem["value"] == "always"
    assert problem["accepted"] == "pcie_switch, numa, preferred, none"
    (tmp_path / "p.yaml").write_text(
        f"kind: Pod\nmetadata:\n  name: p\n  annotations:\n    {aff}: pcie_switch\n"
        "spec:\n  containers: [{name: a, image: x}]\n"
    )
    assert run_json("validate", "-f", str(tmp_path))[0] == 0
