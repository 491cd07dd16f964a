"""The support list (`api/support.py`) is written by hand; these tests hold it to the code, so
that it cannot drift: every name a row gives is defined once in `api/names.py`; every
enhancement and Katalyst resource name there has a row; what a row says is acted on is read
by the component the row names, and what a row says nothing acts on is read by no component.

"Read" is seen in the source: a kind or resource name by its constant of `api/names.py`
(`names.TIDE_NODE_POOL`), an enhancement by the field of the parsed enhancements it fills
(`qos.enhancements.numa_binding`). `api/` parses and names everything, and `cli/` explains
and validates everything, so neither counts as acting."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from pykatalyst.api import names, support

SRC = Path(support.__file__).resolve().parents[1]
NOT_ACTING = ("api", "cli")  # packages that name, parse and explain, but act on nothing

# What a row's `by` names -> the packages that component lives in.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "agent": ("agent",),
    "scheduler": ("scheduler",),
    "webhook": ("webhook",),
    "controller": ("controllers",),
    "metrics": ("metricsapi",),
    "device-plugin": ("agent/deviceplugin",),
    "recommend": ("recommend",),
    "sim": ("sim",),
    "explain": ("cli",),
}


@cache
def _identifiers(package: str) -> frozenset[str]:
    """Every name and attribute the package's code uses (docstrings and comments aside)."""
    found: set[str] = set()
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.alias):
                found.add(node.asname or node.name)
    return frozenset(found)


def _acting_packages() -> list[str]:
    return sorted(
        p.name
        for p in SRC.iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
        if p.name not in NOT_ACTING
    )


def _constants() -> dict[str, str]:
    """`api/names.py`'s string constants and kind names: value -> identifiers."""
    out: dict[str, list[str]] = {}
    for ident, value in vars(names).items():
        if not ident.isupper():
            continue
        if isinstance(value, names.Kind):
            out.setdefault(value.kind, []).append(ident)
        elif isinstance(value, str):
            out.setdefault(value, []).append(ident)
    return {v: " ".join(ids) for v, ids in out.items()}


def _by(feature: support.Feature) -> list[str]:
    """The components a row names: "controller (kcc), agent" -> ["controller", "agent"]."""
    return [re.sub(r"\s*\(.*\)$", "", part.strip()) for part in feature.by.split(",") if part]


def _named(feature: support.Feature) -> list[tuple[str, str]]:
    return [
        *(("kind", k) for k in feature.kinds),
        *(("enhancement", e) for e in feature.enhancements),
        *(("resource", r) for r in feature.resources),
    ]


ROWS = [(f, what, key) for f in support.FEATURES for what, key in _named(f)]


def _reads(package: str, what: str, key: str) -> bool:
    used = _identifiers(package)
    if what == "enhancement":
        return key in used  # the parsed enhancement's field of that name
    return any(ident in used for ident in _constants()[key].split())


def test_every_name_a_row_gives_is_defined_once_in_names() -> None:
    constants = _constants()
    enhancements = {v for k, v in vars(names).items() if k.startswith("ENH_")}
    for feature, what, key in ROWS:
        assert key in constants, f"{feature.key}: {what} {key!r} is not defined in api/names.py"
        if what == "enhancement":
            assert key in enhancements, f"{feature.key}: {key!r} is not an ENH_ name"


def test_every_enhancement_and_katalyst_resource_has_a_row() -> None:
    for ident, value in vars(names).items():
        if ident.startswith("ENH_"):
            assert support.for_enhancement(value) is not None, f"{ident}: no support row"
        prefix = f"{names.RESOURCE_GROUP}/"
        if isinstance(value, str) and value.startswith(prefix) and ident.isupper():
            assert support.for_resource(value) is not None, f"{ident}: no support row"


def test_every_component_a_row_names_exists() -> None:
    from pykatalyst.runtime.controller import CONTROLLERS

    for feature in support.FEATURES:
        for component in _by(feature):
            assert component in COMPONENTS, f"{feature.key}: unknown component {component!r}"
        for controller in re.findall(r"controller \((\w+)\)", feature.by):
            assert controller in CONTROLLERS, f"{feature.key}: no controller {controller!r}"


@pytest.mark.parametrize(
    ("feature", "what", "key"),
    [r for r in ROWS if r[0].acted_on],
    ids=lambda v: v.key if isinstance(v, support.Feature) else str(v),
)
def test_what_a_row_says_is_acted_on_is_read_by_a_component_it_names(
    feature: support.Feature, what: str, key: str
) -> None:
    packages = [p for c in _by(feature) for p in COMPONENTS[c] if p not in NOT_ACTING]
    readers = [p for p in packages if _reads(p, what, key)]
    assert readers, (
        f"{feature.key} says {', '.join(_by(feature))} act(s) on {what} {key!r}, and none of "
        f"{packages} reads it: fix the row's `by` or its status"
    )


@pytest.mark.parametrize(
    ("feature", "what", "key"),
    [r for r in ROWS if not r[0].acted_on],
    ids=lambda v: v.key if isinstance(v, support.Feature) else str(v),
)
def test_what_a_row_says_nothing_acts_on_is_read_by_no_component(
    feature: support.Feature, what: str, key: str
) -> None:
    readers = [p for p in _acting_packages() if _reads(p, what, key)]
    assert not readers, (
        f"{feature.key} says nothing acts on {what} {key!r}, and {readers} read(s) it: "
        "flip the row (status, by, note) now that something does"
    )
