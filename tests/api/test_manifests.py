from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api import names
from pykatalyst.api.manifests import (
    ManifestError,
    find_manifest_files,
    iter_documents,
    load_documents,
    pod_template,
)
from pykatalyst.api.qos import parse_pod_qos

REPO = Path(__file__).resolve().parents[2]
KATALYST_EXAMPLES = REPO.parent / "shared" / "katalyst-examples"

TEMPLATE = {
    "metadata": {"annotations": {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES}},
    "spec": {"containers": [{"name": "a", "image": "x"}]},
}


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Deployment", ("spec", "template")),
        ("StatefulSet", ("spec", "template")),
        ("DaemonSet", ("spec", "template")),
        ("ReplicaSet", ("spec", "template")),
        ("Job", ("spec", "template")),
        ("CronJob", ("spec", "jobTemplate", "spec", "template")),
    ],
)
def test_pod_templates_of_workloads(tmp_path: Path, kind: str, path: tuple[str, ...]) -> None:
    node: dict[str, Any] = TEMPLATE
    for key in reversed(path):
        node = {key: node}
    obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}, **node}
    file = tmp_path / "w.yaml"
    file.write_text(yaml.safe_dump(obj))
    (doc,) = load_documents(file)
    template = pod_template(doc)
    assert template is not None
    assert parse_pod_qos(template.pod).level == names.QOS_RECLAIMED_CORES
    assert template.field_prefix == ".".join(path)


def test_multi_document_files_and_lists(tmp_path: Path) -> None:
    path = tmp_path / "many.yml"
    path.write_text(
        "kind: Pod\nmetadata: {name: a}\n---\n---\n"
        "kind: List\nitems:\n- {kind: Pod, metadata: {name: b}}\n- {kind: ConfigMap}\n"
    )
    docs = load_documents(path)
    assert [(d.kind, d.index) for d in docs] == [("Pod", 0), ("Pod", 1), ("ConfigMap", 2)]
    assert pod_template(docs[2]) is None


def test_folders_are_searched_recursively(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text("kind: Pod\n")
    (tmp_path / "b.json").write_text('{"kind": "Pod"}')
    (tmp_path / "notes.txt").write_text("not a manifest")
    files = find_manifest_files([tmp_path])
    assert sorted(p.name for p in files) == ["a.yaml", "b.json"]
    assert len(list(iter_documents([tmp_path]))) == 2


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: Pod\nmetadata:\n  name: x\n bad: indent\n")
    with pytest.raises(ManifestError) as info:
        load_documents(path)
    assert info.value.line == 4
    assert str(info.value).startswith(f"{path}:4: invalid YAML")


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file"):
        find_manifest_files([tmp_path / "nope"])


def test_scalar_document_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("just a string\n")
    with pytest.raises(ManifestError, match="not a Kubernetes object"):
        load_documents(path)


@pytest.mark.skipif(not KATALYST_EXAMPLES.is_dir(), reason="Katalyst's examples are not present")
def test_every_katalyst_example_pod_is_accepted() -> None:
    levels = []
    for doc in iter_documents([KATALYST_EXAMPLES]):
        template = pod_template(doc)
        if template is None:
            assert doc.kind in (
                "ConfigMap",
                "KatalystCustomConfig",
                "EvictionConfiguration",
                "ResourceRecommend",
            )
            continue
        levels.append(parse_pod_qos(template.pod).level)
    assert set(levels) == {
        names.QOS_DEDICATED_CORES,
        names.QOS_SHARED_CORES,
        names.QOS_RECLAIMED_CORES,
    }
