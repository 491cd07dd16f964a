"""The node-status overcommit mutation: Katalyst's ratio rule and rounding."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity
from pykatalyst.cluster.patch import json_patch
from pykatalyst.webhook.nodes import admit_node, multiply
from tests.webhook.helpers import node, node_request


def _mutated(annotations: dict[str, str] | None, **kw: str) -> dict:  # type: ignore[type-arg]
    obj = node(annotations, **kw)
    verdict = admit_node(node_request(obj))
    assert verdict.allowed
    return json_patch(obj, verdict.patch or [])  # type: ignore[no-any-return]


def test_ratio_multiplies_allocatable_and_capacity_and_keeps_the_originals() -> None:
    out = _mutated(
        {
            names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "1.5",
            names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION: "1.2",
        }
    )
    assert out["status"]["allocatable"]["cpu"] == "12"
    assert out["status"]["capacity"]["cpu"] == "12"
    assert Quantity.parse(out["status"]["allocatable"]["memory"]).value() == int(32 * 2**30 * 1.2)
    assert out["status"]["allocatable"]["pods"] == "110"
    ann = out["metadata"]["annotations"]
    assert ann[names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION] == "8"
    assert ann[names.ORIGINAL_CAPACITY_MEMORY_ANNOTATION] == "32Gi"


def test_the_agents_realtime_ratio_bounds_the_set_one() -> None:
    out = _mutated(
        {
            names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "2",
            names.REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION: "1.25",
        }
    )
    assert out["status"]["allocatable"]["cpu"] == "10"


def test_cpu_is_truncated_to_millicores_as_katalyst_rounds() -> None:
    out = _mutated({names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "1.3333"}, cpu="3")
    assert out["status"]["allocatable"]["cpu"] == "3999m"


def test_controller_computed_values_win_over_the_ratio() -> None:
    out = _mutated(
        {
            names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "2",
            names.OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION: "11",
            names.OVERCOMMIT_CAPACITY_CPU_ANNOTATION: "12",
        }
    )
    assert out["status"]["allocatable"]["cpu"] == "11"
    assert out["status"]["capacity"]["cpu"] == "12"


def test_no_ratio_a_ratio_below_one_or_garbage_leaves_status_alone() -> None:
    for ann in (
        None,
        {names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "0.5"},
        {names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "lots"},
    ):
        out = _mutated(ann)
        assert out["status"]["allocatable"]["cpu"] == "8"
        assert out["metadata"]["annotations"][names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION] == "8"


def test_only_status_updates_are_touched() -> None:
    obj = node({names.CPU_OVERCOMMIT_RATIO_ANNOTATION: "2"})
    assert admit_node(node_request(obj, sub_resource="")).patch is None


@given(
    milli=st.integers(min_value=1, max_value=10**7),
    ratio=st.floats(min_value=1.0, max_value=10.0, allow_nan=False),
)
def test_multiply_never_rounds_up_and_loses_under_a_millicore(milli: int, ratio: float) -> None:
    out = multiply("cpu", Quantity.from_milli(milli), ratio).milli_value()
    assert out <= milli * ratio < out + 1


@given(
    value=st.integers(min_value=1, max_value=2**50),
    ratio=st.floats(min_value=1.0, max_value=10.0, allow_nan=False),
)
def test_multiply_memory_is_whole_bytes_truncated(value: int, ratio: float) -> None:
    assert multiply("memory", Quantity.from_bytes(value), ratio).value() == int(value * ratio)
