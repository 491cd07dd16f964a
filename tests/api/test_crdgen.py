"""The CRD emitter: deploy/crds is what the compact descriptions say, and the shorthand
means what its docstring promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api import crdgen, names

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_deploy_crds_are_what_the_descriptions_emit() -> None:
    files = crdgen.rendered()
    on_disk = {p.name: p.read_text() for p in CRD_DIR.glob("*.yaml")}
    assert sorted(on_disk) == sorted(files), "run: python -m pykatalyst.api.crdgen deploy/crds"
    stale = [name for name, text in files.items() if on_disk[name] != text]
    assert not stale, f"stale, rerun the emitter: {stale}"


def test_every_kind_the_code_names_has_a_description() -> None:
    specs = {s.kind: s for s in crdgen.kind_specs()}
    for kind in names.KATALYST_KINDS:
        spec = specs[kind.kind]
        assert (spec.group, spec.plural) == (kind.group, kind.plural)
        assert spec.short_names == kind.short_names
        assert (spec.scope == "Namespaced") is kind.namespaced
        assert kind.version in spec.versions


def test_the_shorthand() -> None:
    got = crdgen.schema(
        {
            "name!": "string enum=a|b",
            "size": "quantity",
            "count": "integer format=int32 min=0 max=10",
            "level": "integer enum=1|2",
            "labels": {"*": "string"},
            "items": [{"k!": "string"}, "list=map keys=k"],
            "blob": "object",
            "raw": "any",
            "open": {"~": "open", "x": "boolean"},
            "re": "string pattern=^a b$",
            "d": 'string default="none"',
        }
    )
    props = got["properties"]
    assert got["required"] == ["name"]
    assert props["name"] == {"type": "string", "enum": ["a", "b"]}
    assert props["size"]["x-kubernetes-int-or-string"] is True
    assert props["size"]["pattern"] == crdgen.QUANTITY_PATTERN
    assert props["count"] == {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10}
    assert props["level"]["enum"] == [1, 2]
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["items"]["x-kubernetes-list-type"] == "map"
    assert props["items"]["x-kubernetes-list-map-keys"] == ["k"]
    assert props["items"]["items"]["required"] == ["k"]
    assert props["blob"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["raw"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert props["open"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["re"]["pattern"] == "^a b$"
    assert props["d"]["default"] == "none"


@pytest.mark.parametrize(
    ("desc", "message"),
    [
        ("float", "unknown type 'float'"),
        ("string colour=red", "unknown option 'colour'"),
        ("string red", "is not key=value"),
        ([], "a list is [item]"),
        (3, "is not a mapping"),
    ],
)
def test_a_bad_description_names_where(desc: Any, message: str) -> None:
    with pytest.raises(crdgen.CRDSpecError, match=r"spec\.x") as exc:
        crdgen.schema({"x": desc}, "spec")
    assert message in str(exc.value)


_LEAF = st.sampled_from(["string", "integer", "number", "boolean", "quantity", "object"])
_DESC = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=1),
        st.dictionaries(st.from_regex(r"[a-z][a-zA-Z]{0,6}", fullmatch=True), inner, max_size=4),
    ),
    max_leaves=12,
)


def _paths(desc: Any, path: str) -> set[str]:
    if isinstance(desc, list):
        return {path} | _paths(desc[0], path + "[]")
    if isinstance(desc, dict):
        out = {path}
        for key, value in desc.items():
            out |= _paths(value, f"{path}.{key}")
        return out
    return {path}


def _schema_paths(node: dict[str, Any], path: str) -> set[str]:
    out = {path}
    for key, child in node.get("properties", {}).items():
        out |= _schema_paths(child, f"{path}.{key}")
    if "items" in node:
        out |= _schema_paths(node["items"], path + "[]")
    return out


@given(_DESC)
def test_every_described_field_is_in_the_schema_and_the_yaml_round_trips(desc: Any) -> None:
    got = crdgen.schema(desc)
    assert _schema_paths(got, "") == _paths(desc, "")
    assert yaml.safe_load(yaml.dump(got, Dumper=crdgen._Dumper)) == got
