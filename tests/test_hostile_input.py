"""Hostile and random input against every reader of pods and YAML: each returns a value
or raises the project's own error naming the field; none crashes or takes long."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pykatalyst.agent.config import ConfigError
from pykatalyst.agent.config import load_config as load_agent_config
from pykatalyst.agent.config import parse_config as parse_agent_config
from pykatalyst.agent.pods import parse_pod
from pykatalyst.api import names, yamlio
from pykatalyst.api.limits import PodShapeError, check_pod
from pykatalyst.api.manifests import ManifestError, load_documents
from pykatalyst.api.qos import QoSError, parse_numa_ids, parse_pod_qos
from pykatalyst.api.yamlio import YAMLInputError, load_yaml_all
from pykatalyst.cli.agent import load_pods
from pykatalyst.cli.main import app
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.controllers.backstop import read_reclaimed_pod
from pykatalyst.scheduler.config import SchedulerConfigError, load_config_text
from pykatalyst.scheduler.config import load_config as load_scheduler_config
from pykatalyst.scheduler.podinfo import pod_info as scheduler_pod_info
from pykatalyst.sim.csvfile import read_csv_column
from pykatalyst.sim.scenario import ScenarioError, load_scenario, parse_scenario
from tests import text_fuzz
from tests.pod_fuzz import (
    CLUSTER,
    ENTRY_POINTS,
    EXTENDER,
    _stored_then_extender,
    ill_typed_pods,
    stored_pods,
)

HOSTILE = Path(__file__).parent / "data" / "hostile"
HOSTILE_FILES = sorted(p for p in HOSTILE.iterdir() if p.suffix in (".yaml", ".json"))
# Each reader gets this much cpu time for any file of the corpus (the slowest measured is
# ~0.1 s); cpu time, not wall time, so a loaded machine does not read as a blow-up.
TIME_BOUND_S = 2.0

runner = CliRunner()


def _loadable_pods() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in HOSTILE_FILES:
        try:
            docs = load_documents(path)
        except ManifestError:
            continue
        out.extend((path.name, d.obj) for d in docs)
    return out


LOADABLE = _loadable_pods()


def test_the_corpus_holds_pods_that_load_and_files_that_do_not() -> None:
    assert len(HOSTILE_FILES) >= 20
    assert 10 <= len(LOADABLE) < len(HOSTILE_FILES)


@pytest.mark.parametrize("path", HOSTILE_FILES, ids=lambda p: p.name)
def test_validate_reports_each_hostile_file_without_a_traceback(path: Path) -> None:
    start = time.process_time()
    result = runner.invoke(app, ["validate", "--strict", "-f", str(path), "-o", "json"])
    assert time.process_time() - start < TIME_BOUND_S
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["files"][0]["file"] == str(path)
    assert report["problems"] and all(p["message"] for p in report["problems"])


def test_validate_of_a_folder_reports_every_file_and_fails() -> None:
    result = runner.invoke(app, ["validate", "-f", str(HOSTILE), "-o", "json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert sorted(f["file"] for f in report["files"]) == sorted(str(p) for p in HOSTILE_FILES)
    reported = {p["file"] for p in report["problems"]}
    assert str(HOSTILE / "tag-int.yaml") in reported
    assert str(HOSTILE / "ill-typed-affinity.yaml") in reported


def test_a_bad_file_does_not_hide_the_good_ones(tmp_path: Path) -> None:
    (tmp_path / "a-bad.yaml").write_text((HOSTILE / "tag-int.yaml").read_text())
    (tmp_path / "b-good.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: good}\n"
        "spec: {containers: [{name: app, resources: {requests: {cpu: '1'}}}]}\n"
    )
    result = runner.invoke(app, ["validate", "-f", str(tmp_path), "-o", "json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [p["name"] for p in report["pods"]] == ["good"]
    assert [f["valid"] for f in report["files"]] == [False, True]


@pytest.mark.parametrize(("name", "pod"), LOADABLE, ids=[n for n, _ in LOADABLE])
def test_every_reader_survives_each_hostile_pod_quickly(name: str, pod: dict[str, Any]) -> None:
    for entry, read in ENTRY_POINTS.items():
        start = time.process_time()
        read(pod)
        assert time.process_time() - start < TIME_BOUND_S, (name, entry)


@pytest.mark.parametrize(
    "name",
    [
        "huge-int-oom-priority.yaml",
        "huge-int-numa-number.yaml",
        "huge-int-numa-ids.yaml",
        "huge-int-cpu-burst-percent.yaml",
        "quantity-1e400.yaml",
        "quantity-huge-digits.yaml",
        "numa-ids-amplification.yaml",
        "overhead-abc.yaml",
        "ill-typed-affinity.yaml",
        "ill-typed-labels.yaml",
        "annotations-too-big.yaml",
    ],
)
def test_hostile_pods_are_refused_with_the_field_named(name: str) -> None:
    (doc,) = load_documents(HOSTILE / name)
    with pytest.raises(QoSError) as info:
        parse_pod_qos(doc.obj)
    assert info.value.field and info.value.accepted
    spec = parse_pod(doc.obj)
    assert spec.qos is None and spec.error
    assert scheduler_pod_info(doc.obj).problem
    assert read_reclaimed_pod(doc.obj)[0] is None


@pytest.mark.parametrize("name", ["huge-int-bare-json.yaml", "huge-int-top-level-json.yaml"])
def test_a_huge_bare_json_number_makes_the_enhancement_empty(name: str) -> None:
    (doc,) = load_documents(HOSTILE / name)
    qos = parse_pod_qos(doc.obj)
    assert qos.enhancements.as_dict() == {}
    assert "malformed JSON" in str(qos.warnings[0])


def test_numa_ids_cost_is_bounded() -> None:
    text = ",".join(f"{i * 4097}-{i * 4097 + 4096}" for i in range(60))
    start = time.process_time()
    assert parse_numa_ids(text) is None
    assert parse_numa_ids("0-1023") == tuple(range(1024))
    assert parse_numa_ids("0-1024") is None
    assert time.process_time() - start < 0.5


def test_unreadable_pods_are_skipped_by_the_scheduler_with_their_reason() -> None:
    (doc,) = load_documents(HOSTILE / "ill-typed-affinity.yaml")
    info = scheduler_pod_info(doc.obj)
    assert info.problem_reason == "InvalidPod"
    assert "spec.affinity" in info.problem and info.key == "default/affinity"


@pytest.fixture(params=yamlio._EVENT_PARSERS, ids=lambda cls: cls.__name__)
def event_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each YAML event parser there is: libyaml's when PyYAML has it, PyYAML's own."""
    monkeypatch.setattr(yamlio, "_EVENT_PARSERS", [request.param])


@pytest.mark.usefixtures("event_parser")
@pytest.mark.parametrize(
    "name",
    [
        "billion-laughs.yaml",
        "deep-nesting.yaml",
        "deep-nesting.json",
        "huge-number.yaml",
        "tag-python.yaml",
        "tag-int.yaml",
        "tag-timestamp.yaml",
    ],
)
def test_hostile_yaml_is_refused_with_file_and_position(name: str) -> None:
    path = HOSTILE / name
    with pytest.raises(YAMLInputError) as info:
        load_yaml_all(path.read_text(), str(path))
    assert str(info.value).startswith(f"{path}:") and info.value.line is not None


@pytest.mark.parametrize("tag", ["!!int x", "!!float 1e", "!!timestamp x", "!!binary aGk="])
def test_every_config_loader_refuses_odd_tags(tmp_path: Path, tag: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"kind: KubeSchedulerConfiguration\nvalue: {tag}\n")
    with pytest.raises(SchedulerConfigError, match=r"config.yaml:2:8"):
        load_scheduler_config(path)
    with pytest.raises(ConfigError, match=r"config.yaml:2:8"):
        load_agent_config(path)
    with pytest.raises(ScenarioError):
        load_scenario(path)
    with pytest.raises(ValueError, match=r"config.yaml:2:8"):
        load_pods(path)


@pytest.mark.usefixtures("event_parser")
def test_bare_dates_stay_strings_as_kubernetes_reads_them() -> None:
    assert load_yaml_all("a: 2024-01-01\nb: 2024-01-01T00:00:00Z\n") == [
        {"a": "2024-01-01", "b": "2024-01-01T00:00:00Z"}
    ]


@pytest.mark.usefixtures("event_parser")
def test_merge_keys_and_small_aliases_still_work() -> None:
    (doc,) = load_yaml_all("base: &b {cpu: '1'}\npod: {<<: *b, memory: 1Gi}\n")
    assert doc["pod"] == {"cpu": "1", "memory": "1Gi"}


def test_annotations_are_capped_at_the_api_servers_limit() -> None:
    pod = {"metadata": {"annotations": {"a": "x" * (256 * 1024 - 1)}}}
    check_pod(pod)
    pod["metadata"]["annotations"]["b"] = "xx"
    with pytest.raises(PodShapeError, match="annotations take"):
        check_pod(pod)


# --- fuzzing -----------------------------------------------------------------------------

_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(stored_pods())
def test_every_reader_is_total_on_stored_pods(pod: dict[str, Any]) -> None:
    for read in ENTRY_POINTS.values():
        read(pod)


@_FUZZ
@given(ill_typed_pods())
def test_every_reader_is_total_on_ill_typed_pods(pod: dict[str, Any]) -> None:
    for read in ENTRY_POINTS.values():
        read(pod)


_YAML_ALPHABET = "ab:-[]{}!&*<>,'\"\n 01.e#|?%@~"
_CONFIG_PREFIXES = ("", "kind: KubeSchedulerConfiguration\n", "name: s\nnodes:\n")


@pytest.mark.skipif(len(yamlio._EVENT_PARSERS) < 2, reason="PyYAML is built without libyaml")
def test_both_event_parsers_read_the_examples_alike() -> None:
    examples = sorted((Path(__file__).parents[1] / "examples").rglob("*.yaml"))
    assert examples
    for path in examples:
        read = []
        for parser in yamlio._EVENT_PARSERS:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(yamlio, "_EVENT_PARSERS", [parser])
                read.append(load_yaml_all(path.read_text(), str(path)))
        assert read[0] == read[1], path


@_FUZZ
@given(st.sampled_from(_CONFIG_PREFIXES), st.text(alphabet=_YAML_ALPHABET, max_size=60))
def test_the_yaml_reader_and_every_config_loader_are_total(prefix: str, text: str) -> None:
    text = prefix + text
    try:
        docs = load_yaml_all(text, "fuzz.yaml")
    except YAMLInputError as exc:
        assert str(exc).startswith("fuzz.yaml")
        docs = []
    with contextlib.suppress(SchedulerConfigError):
        load_config_text(text, "fuzz.yaml")
    for doc in docs:
        with contextlib.suppress(ConfigError):
            parse_agent_config(doc)
        with contextlib.suppress(ScenarioError):
            parse_scenario(doc)


@_FUZZ
@given(st.one_of(stored_pods(), ill_typed_pods()))
def test_the_api_server_stores_or_refuses_every_pod_and_the_extender_answers(
    pod: dict[str, Any],
) -> None:
    # a refusal is a 400 (a value of the wrong JSON type, named) or a 422 (a value the
    # Pod's validation refuses); what is stored, the extender judges without an Error
    answer = _stored_then_extender(pod)
    assert answer in (400, 409, 422) or isinstance(answer, dict), answer


def test_an_ill_typed_pod_is_refused_by_the_api_server_naming_the_field() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"affinity": "x", "containers": [{"name": "c", "image": "i"}]},
    }
    with pytest.raises(ApiError) as err:
        CLUSTER.create(names.POD, pod)
    assert err.value.code == 400 and "PodSpec.spec.affinity of type v1.Affinity" in str(err.value)
    assert EXTENDER.filter({"Pod": pod, "NodeNames": ["node-1"]}, 0.0)["Error"] == (
        "pod default/p not found in the cluster"
    )


def test_an_unreadable_pod_never_stalls_the_agent_parse_of_others() -> None:
    good = {
        "metadata": {"name": "ok", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
    }
    bad = {"metadata": {"name": "bad", "namespace": "default", "uid": "u2", "labels": [1]}}
    specs = [parse_pod(p) for p in (bad, good)]
    assert specs[0].error and "metadata.labels" in specs[0].error
    assert specs[1].error is None and specs[1].request_cores == 1.0
    assert specs[1].level == names.QOS_SHARED_CORES


# --- fuzzing text: what a user's files can hold --------------------------------------------

_YAML_TEXT = st.lists(st.sampled_from(text_fuzz.YAML_TOKENS), min_size=1, max_size=16).map("".join)
_CSV_TEXT = st.lists(st.sampled_from(text_fuzz.CSV_TOKENS), min_size=1, max_size=24).map("".join)


@_FUZZ
@given(st.sampled_from(text_fuzz.YAML_PREFIXES), _YAML_TEXT)
def test_every_text_reader_is_total_on_hostile_yaml(prefix: str, text: str) -> None:
    """Explicit tags with empty values (`!!int ""`), aliases, merge keys, directives: each
    reader returns or raises its own error, never a traceback."""
    for read in text_fuzz.TEXT_READERS.values():
        read(prefix + text)


@_FUZZ
@given(_YAML_TEXT, st.binary(max_size=4))
def test_the_manifest_reader_is_total_on_hostile_files(text: str, tail: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass") + tail)
        for read in text_fuzz.FILE_READERS.values():
            read(path)


@_FUZZ
@given(_CSV_TEXT, st.binary(max_size=4))
def test_the_csv_readers_are_total_and_refuse_what_is_not_a_finite_number(
    text: str, tail: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        path.write_bytes(text.encode() + tail)
        for read in text_fuzz.CSV_READERS.values():
            read(path)


@pytest.mark.parametrize("text", ['kind: !!int ""\n', '!!float ""\n', "- !!int\n"])
def test_an_explicit_number_tag_with_no_value_is_refused_with_its_position(text: str) -> None:
    with pytest.raises(YAMLInputError, match=r"^f.yaml:\d+:\d+: invalid YAML: .* is not"):
        load_yaml_all(text, "f.yaml")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400"])
def test_a_demand_csv_refuses_values_that_are_not_finite_and_non_negative(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "load.csv"
    path.write_text(f"requests\n1\n{value}\n")
    read_csv_column.cache_clear()
    with pytest.raises(ValueError, match=rf"load\.csv:3: column 'requests' holds '{value}'"):
        read_csv_column(str(path), "requests")


def test_a_demand_csv_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "load.csv"
    path.write_bytes(b"requests\n1\n\xff\xfe\n")
    read_csv_column.cache_clear()
    with pytest.raises(ValueError, match=r"load\.csv: not UTF-8 text"):
        read_csv_column(str(path), "requests")
