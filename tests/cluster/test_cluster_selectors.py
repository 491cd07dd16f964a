"""Label and field selector parsing and matching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.cluster.protocol import BadRequest
from pykatalyst.cluster.selectors import (
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
)

keys = st.sampled_from(["app", "tier", "example.com/role", "a_b.c-d"])
values = st.text(alphabet="abcxyz019", min_size=1, max_size=5)
labelsets = st.dictionaries(keys, values, max_size=4)


@st.composite
def requirements(draw: st.DrawFn) -> tuple[str, str, frozenset[str]]:
    key = draw(keys)
    op = draw(st.sampled_from(["=", "!=", "in", "notin", "exists", "!"]))
    vals = frozenset(draw(st.lists(values, min_size=1, max_size=3)))
    if op in ("=", "!="):
        vals = frozenset([next(iter(sorted(vals)))])
    return key, op, vals


def render(key: str, op: str, vals: frozenset[str]) -> str:
    if op == "exists":
        return key
    if op == "!":
        return f"!{key}"
    if op in ("=", "!="):
        return f"{key}{op}{next(iter(vals))}"
    return f"{key} {op} ({', '.join(sorted(vals))})"


def expected(labels: dict[str, str], key: str, op: str, vals: frozenset[str]) -> bool:
    present = key in labels
    if op == "exists":
        return present
    if op == "!":
        return not present
    if op in ("=", "in"):
        return present and labels[key] in vals
    return not present or labels[key] not in vals


@settings(max_examples=200)
@given(st.lists(requirements(), min_size=1, max_size=4), labelsets)
def test_label_selector_matches_the_conjunction_of_its_clauses(
    reqs: list[tuple[str, str, frozenset[str]]], labels: dict[str, str]
) -> None:
    text = ",".join(render(*r) for r in reqs)
    sel = parse_label_selector(text)
    assert sel.matches(labels) == all(expected(labels, *r) for r in reqs)
    # The canonical form parses back to the same selector.
    assert parse_label_selector(str(sel)) == sel


@pytest.mark.parametrize(
    "bad",
    ["app in web", "app in (web", "=web", "app=web,", "app=web tier=x", "Bad Key=x", "app=a b"],
)
def test_malformed_label_selectors_are_rejected(bad: str) -> None:
    with pytest.raises(BadRequest) as err:
        parse_label_selector(bad)
    assert err.value.code == 400


def test_structured_selector() -> None:
    sel = label_selector_from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }
    )
    assert sel.matches({"app": "web", "tier": "front"})
    assert not sel.matches({"app": "web", "tier": "front", "canary": "1"})
    assert not sel.matches({"app": "web"})
    with pytest.raises(BadRequest, match="Exists"):
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Has"}]})


def test_field_selector_on_missing_fields_matches_the_empty_string() -> None:
    sel = parse_field_selector("spec.nodeName=", "pods")
    assert sel.matches({"metadata": {"name": "p"}, "spec": {}})
    assert not sel.matches({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}})


def test_field_selector_names_the_supported_fields() -> None:
    with pytest.raises(BadRequest) as err:
        parse_field_selector("spec.nodeName=n1", "configmaps")
    assert "spec.nodeName" in err.value.message and "metadata.name" in err.value.message
    with pytest.raises(BadRequest):
        parse_field_selector("metadata.name", "pods")
