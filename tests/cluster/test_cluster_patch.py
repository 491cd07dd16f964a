"""Merge patch, JSON patch and the simplified strategic merge."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.cluster.patch import (
    PatchError,
    copy_json,
    copy_object,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


def _containers(value: Any) -> list[Any]:
    """Every dict and list inside `value`, itself included."""
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _containers(v))]
    return []


json_floats = st.floats(allow_nan=False, allow_infinity=False)
json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | json_floats | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=200)
@given(st.dictionaries(st.text(max_size=3), json_documents, max_size=5))
def test_copy_is_equal_and_shares_no_container(obj: dict[str, Any]) -> None:
    for copy in (copy_json(obj), copy_object(obj)):
        assert copy == obj
        assert list(copy) == list(obj)  # key order is kept: it shows in every response
        ids = {id(c) for c in _containers(obj)}
        assert not any(id(c) in ids for c in _containers(copy))
        # changing the copy anywhere leaves the original as it was
        before = repr(obj)
        for c in _containers(copy):
            if isinstance(c, dict):
                c["\x00new"] = 1
            else:
                c.append(1)
        assert repr(obj) == before


# RFC 7386 appendix A.
@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc_examples(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


@settings(max_examples=100)
@given(json_values, json_values)
def test_merge_patch_never_changes_its_inputs(target: Any, patch: Any) -> None:
    t, p = copy_json(target), copy_json(patch)
    merge_patch(target, patch)
    strategic_merge_patch(target, patch)
    assert target == t and patch == p


@settings(max_examples=100)
@given(st.dictionaries(st.text(max_size=3), json_values, max_size=4))
def test_json_patch_replace_root_and_test(doc: dict[str, Any]) -> None:
    ops = [{"op": "add", "path": "", "value": doc}, {"op": "test", "path": "", "value": doc}]
    assert json_patch({"x": 1}, ops) == doc


def test_json_patch_operations() -> None:
    doc = {"foo": ["bar", "baz"], "a/b": 1, "m~n": 2}
    assert json_patch(doc, [{"op": "add", "path": "/foo/1", "value": "qux"}])["foo"] == [
        "bar",
        "qux",
        "baz",
    ]
    assert json_patch(doc, [{"op": "add", "path": "/foo/-", "value": "end"}])["foo"][-1] == "end"
    assert json_patch(doc, [{"op": "remove", "path": "/a~1b"}]) == {"foo": ["bar", "baz"], "m~n": 2}
    assert json_patch(doc, [{"op": "replace", "path": "/m~0n", "value": 3}])["m~n"] == 3
    moved = json_patch(doc, [{"op": "move", "from": "/foo/0", "path": "/first"}])
    assert moved["first"] == "bar" and moved["foo"] == ["baz"]
    assert doc["foo"] == ["bar", "baz"]  # the input is untouched


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/foo/9", "value": 1}],
        [{"op": "add", "path": "/no/such/parent", "value": 1}],
        [{"op": "move", "from": "/foo", "path": "/foo/0"}],
    ],
)
def test_json_patch_errors(ops: list[dict[str, Any]]) -> None:
    with pytest.raises(PatchError) as err:
        json_patch({"foo": ["bar"]}, ops)
    assert not err.value.test_failed


def test_json_patch_test_is_type_strict() -> None:
    with pytest.raises(PatchError) as err:
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": True}])
    assert err.value.test_failed


def test_malformed_json_patch() -> None:
    for bad in ({"op": "add"}, [{"op": "frobnicate", "path": "/a"}], [{"path": "/a"}]):
        with pytest.raises(PatchError) as err:
            json_patch({}, bad)
        assert err.value.malformed


def test_strategic_merge_lists_by_key() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "image": "busybox"},
                {"name": "b", "image": "envoy"},
            ]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    patched = strategic_merge_patch(
        pod,
        {
            "spec": {
                "containers": [
                    {"name": "b", "image": "envoy:2"},
                    {"name": "a", "$patch": "delete"},
                    {"name": "c", "image": "nginx"},
                ]
            },
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]},
        },
    )
    assert patched["spec"]["containers"] == [
        {"name": "b", "image": "envoy:2"},
        {"name": "c", "image": "nginx"},
    ]
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Ready", "MemoryPressure"]
    # A node's taints have no merge key in the API: a strategic patch replaces them.
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    assert strategic_merge_patch(node, {"spec": {"taints": [{"key": "b"}]}}) == {
        "spec": {"taints": [{"key": "b"}]}
    }
    # Lists without a merge key are replaced, as in a merge patch.
    assert strategic_merge_patch({"spec": {"args": ["a"]}}, {"spec": {"args": ["b"]}}) == {
        "spec": {"args": ["b"]}
    }


@pytest.mark.parametrize(
    ("server", "patch", "merged"),
    [
        # What kube-apiserver 1.34 answers for these finalizer patches.
        (["x/a"], ["x/b"], ["x/b", "x/a"]),
        (["x/a", "x/c"], ["x/c", "x/b"], ["x/a", "x/c", "x/b"]),
        (["x/a", "x/c", "x/d"], ["x/d", "x/b", "x/a"], ["x/c", "x/d", "x/b", "x/a"]),
        (["x/a"], [], ["x/a"]),
    ],
)
def test_strategic_merge_unions_finalizers(
    server: list[str], patch: list[str], merged: list[str]
) -> None:
    result = strategic_merge_patch(
        {"metadata": {"finalizers": server}}, {"metadata": {"finalizers": patch}}
    )
    assert result["metadata"]["finalizers"] == merged


def test_strategic_delete_from_primitive_list() -> None:
    result = strategic_merge_patch(
        {"metadata": {"finalizers": ["x/a", "x/b"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x/a"]}},
    )
    assert result == {"metadata": {"finalizers": ["x/b"]}}


finalizer_lists = st.lists(st.sampled_from("abcdefg"), max_size=6)


@given(finalizer_lists, finalizer_lists)
def test_finalizer_merge_is_an_order_keeping_union(server: list[str], patch: list[str]) -> None:
    merged = strategic_merge_patch(
        {"metadata": {"finalizers": server}}, {"metadata": {"finalizers": patch}}
    )["metadata"]["finalizers"]
    assert sorted(merged) == sorted(set(server) | set(patch))
    patch_order = list(dict.fromkeys(patch))
    assert [f for f in merged if f in patch_order] == patch_order
    server_only = [f for f in dict.fromkeys(server) if f not in patch_order]
    assert [f for f in merged if f in server_only] == server_only
