"""Katalyst's names in the config models, and the field-by-field effect table."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pykatalyst.api import config_fields, names
from pykatalyst.api.crdgen import crd, kind_specs


def _schema(kind: str) -> dict[str, Any]:
    spec = next(s for s in kind_specs() if s.kind == kind)
    version = next(k.version for k in names.KATALYST_KINDS if k.kind == kind)
    doc = crd(spec)["spec"]["versions"][spec.versions.index(version)]
    schema: dict[str, Any] = doc["schema"]["openAPIV3Schema"]
    return schema


def _model_paths(model: type[BaseModel], prefix: str) -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        path = f"{prefix}.{alias}" if prefix else alias
        out.append(path)
        inner = info.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            out += _model_paths(inner, path)
    return out


def _admits(schema: dict[str, Any], path: str) -> bool:
    node = schema
    for part in path.split("."):
        if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
            return True
        props = node.get("properties", {})
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
        if node.get("type") == "array":
            node = node["items"]
    return True


@pytest.mark.parametrize("kind", config_fields.CONFIG_KINDS)
def test_every_model_field_has_katalysts_name(kind: str) -> None:
    schema = _schema(kind)
    model = config_fields.MODELS[kind]
    wrong = [
        p
        for p in _model_paths(model, "")
        if p.split(".")[0] in ("spec", "status") and not _admits(schema, p)
    ]
    assert wrong == []


def test_every_field_said_to_take_effect_is_katalysts() -> None:
    for kind, table in config_fields.TAKES_EFFECT.items():
        schema = _schema(kind)
        for path in table:
            assert _admits(schema, path.replace("[]", "")), (kind, path)


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value


_AQC_EFFECTS = sorted(
    p for p in config_fields.TAKES_EFFECT[config_fields.AQC] if "*" not in p and "[]" not in p
)


@settings(deadline=None)  # the first example loads the schemas
@given(st.sets(st.sampled_from(_AQC_EFFECTS), min_size=1))
def test_fields_that_take_effect_are_reported_so(paths: set[str]) -> None:
    obj: dict[str, Any] = {"kind": config_fields.AQC, "apiVersion": "x/v1alpha1"}
    for path in paths:
        _set(obj, path, 1)
    uses = {u.path: u for u in config_fields.field_uses(obj)}
    assert set(uses) == paths
    assert all(u.takes_effect and u.known for u in uses.values())


def test_unimplemented_and_unknown_fields_are_told_apart() -> None:
    obj = {
        "kind": config_fields.AQC,
        "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
        "spec": {
            "paused": True,
            "config": {
                "evictionConfig": {"rootfsPressureEvictionConfig": {"gracePeriod": 1}},
                "evictionConfg": {},
            },
        },
    }
    uses = {u.path: u for u in config_fields.field_uses(obj)}
    paused = uses["spec.paused"]
    assert paused.takes_effect and paused.effect.startswith("controller (kcc)")
    rootfs = uses["spec.config.evictionConfig.rootfsPressureEvictionConfig.gracePeriod"]
    assert rootfs.known and not rootfs.takes_effect
    typo = uses["spec.config.evictionConfg"]
    assert not typo.known and "drops it" in typo.note


def test_a_bad_value_names_the_field_and_what_is_accepted() -> None:
    obj = {
        "kind": config_fields.AQC,
        "metadata": {"name": "a", "namespace": "b"},
        "spec": {"config": {"evictionConfig": {"cpuPressureEvictionConfig": {
            "minSuppressionToleranceDuration": "-5s"}}}},
    }  # fmt: skip
    (problem,) = config_fields.config_problems(obj)
    assert problem.field == (
        "spec.config.evictionConfig.cpuPressureEvictionConfig.minSuppressionToleranceDuration"
    )
    assert "accepted: a Go duration" in str(problem)
