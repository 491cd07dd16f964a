"""How MemoryCluster writes a patch: the patched object is decoded once (the typed decode
of built-in kinds is stable, so decoding again would change nothing), and the stored
versions share what a patch leaves alone without any caller reaching them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api.names import NODE
from pykatalyst.apiserver.decode import decode
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.patch import copy_json
from pykatalyst.cluster.protocol import BadRequest

quantities = st.none() | st.integers(0, 10**6) | st.sampled_from(["1", "500m", "2Gi", "0.5"])
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
resources = st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), quantities, max_size=3)
conditions = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["Ready", "DiskPressure"])},
        optional={"status": scalars, "lastHeartbeatTime": scalars, "reason": scalars},
    ),
    max_size=3,
)
node_bodies = st.fixed_dictionaries(
    {"metadata": st.just({"name": "n1"})},
    optional={
        "spec": st.fixed_dictionaries({}, optional={"unschedulable": scalars, "podCIDR": scalars}),
        "status": st.fixed_dictionaries(
            {}, optional={"capacity": resources, "allocatable": resources, "conditions": conditions}
        ),
        "extra": scalars,
    },
)


@settings(max_examples=200)
@given(node_bodies)
def test_decoding_a_decoded_node_changes_nothing(body: dict[str, Any]) -> None:
    try:
        once = decode("nodes", body)
    except BadRequest:
        return  # refused bodies are never stored, so never decoded twice
    assert decode("nodes", once) == once


def test_a_patched_node_is_stored_as_decoded() -> None:
    mc = MemoryCluster(seed=1)
    mc.create(NODE, {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}})
    patch = {"status": {"capacity": {"cpu": 8, "memory": None}, "phase": None}}
    out = mc.patch(NODE, "n1", patch, subresource="status")
    assert out["status"]["capacity"] == {"cpu": "8"}
    assert mc.get(NODE, "n1")["status"] == out["status"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=10,
)
node_patches = st.fixed_dictionaries(
    {},
    optional={
        "spec": st.fixed_dictionaries({}, optional={"extra": json_values, "more": json_values}),
        "status": st.fixed_dictionaries({}, optional={"extra": json_values}),
        "metadata": st.fixed_dictionaries(
            {}, optional={"annotations": st.dictionaries(st.sampled_from("ab"), st.text())}
        ),
    },
)


def _scribble(value: Any) -> None:
    """Change every dict and list inside `value` in place."""
    if isinstance(value, dict):
        for v in list(value.values()):
            _scribble(v)
        value["scribbled"] = True
    elif isinstance(value, list):
        for v in value:
            _scribble(v)
        value.append("scribbled")


@settings(max_examples=60)
@given(st.lists(node_patches, min_size=1, max_size=6))
def test_patches_keep_every_version_and_share_nothing_with_callers(
    patches: list[dict[str, Any]],
) -> None:
    mc = MemoryCluster(seed=1)
    created = mc.create(NODE, {"metadata": {"name": "n1"}, "spec": {"extra": {"a": [{}]}}})
    watch = mc.watch(NODE, resource_version=created["metadata"]["resourceVersion"])
    versions = [created]
    for p in patches:
        out = mc.patch(NODE, "n1", p)
        if out["metadata"]["resourceVersion"] != versions[-1]["metadata"]["resourceVersion"]:
            versions.append(copy_json(out))
        _scribble(out)  # a caller changing what it got changes nothing stored
        assert mc.get(NODE, "n1") == versions[-1]
    # every version a watcher reads is the one written then, untouched by later writes
    assert [e.object for e in watch.next_events()] == versions[1:]
