"""One entry per plugin in one map: the extension points come from the hooks a class
defines, and the configuration loader, the framework and `--print-config` all read the
registry they are handed (the in-tree one unless told otherwise)."""

from __future__ import annotations

import pytest

from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import NodeResourcesFitArgs
from pykatalyst.scheduler.config import load_config_text
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.intree import in_tree_registry
from pykatalyst.scheduler.plugins.base import CycleState, Key, Plugin
from pykatalyst.scheduler.plugins.resources import NodeResourcesFit
from tests.scheduler.sched_helpers import framework, policy_text

# kube-scheduler's in-tree plugins and the extension points each implements (v1.34), and
# Katalyst's three scheduler plugins
KUBE_POINTS = {
    "SchedulingGates": {"preEnqueue"},
    "PrioritySort": {"queueSort"},
    "NodeUnschedulable": {"filter"},
    "NodeName": {"filter"},
    "TaintToleration": {"filter", "preScore", "score"},
    "NodeAffinity": {"preFilter", "filter", "preScore", "score"},
    "NodePorts": {"preFilter", "filter"},
    "NodeResourcesFit": {"preFilter", "filter", "preScore", "score"},
    "VolumeRestrictions": {"preFilter", "filter"},
    "NodeVolumeLimits": {"filter"},
    "VolumeBinding": {"preFilter", "filter", "reserve", "preBind"},
    "VolumeZone": {"preFilter", "filter"},
    "PodTopologySpread": {"preFilter", "filter", "preScore", "score"},
    "InterPodAffinity": {"preFilter", "filter", "preScore", "score"},
    "DefaultPreemption": {"postFilter"},
    "NodeResourcesBalancedAllocation": {"preScore", "score"},
    "ImageLocality": {"score"},
    "DefaultBinder": {"bind"},
    "QoSAwareNodeResourcesFit": {"preFilter", "filter", "score", "reserve"},
    "NodeResourceTopology": {"filter", "score", "reserve"},
    "NodeOvercommitment": {"preFilter", "filter", "reserve"},
}


@pytest.mark.parametrize("name", sorted(KUBE_POINTS))
def test_each_plugin_extends_the_points_its_upstream_twin_does(name: str) -> None:
    spec = in_tree_registry()[name]
    assert spec.points == KUBE_POINTS[name]
    if spec.cls is not None:
        # a plugin that runs here extends exactly the points it has hooks for
        assert reg.hook_points(spec.cls) == spec.points


def test_a_plugin_that_runs_here_is_not_listed_as_not_implemented() -> None:
    for spec in in_tree_registry().values():
        assert not (spec.cls is not None and spec.not_implemented), spec.name


def test_args_models_come_from_the_registration() -> None:
    assert in_tree_registry()["NodeResourcesFit"].args is NodeResourcesFitArgs
    assert in_tree_registry()["NodeResourcesFit"].cls is NodeResourcesFit
    assert NodeResourcesFit.name == "NodeResourcesFit"


def test_hooks_left_to_the_base_extend_nothing() -> None:
    class FilterOnly(Plugin):
        def filter(self, pod, state, snap):  # type: ignore[no-untyped-def]
            return None

    assert reg.hook_points(FilterOnly) == {"filter"}
    assert reg.hook_points(Plugin) == frozenset()


def test_an_entry_names_its_class_and_a_plugin_must_extend_something() -> None:
    class Nothing(Plugin):
        name = "NothingAtAll"

    with pytest.raises(ValueError, match="is named 'NothingAtAll'"):
        reg.plugin("NodeName", Nothing)
    with pytest.raises(ValueError, match="extends no extension point"):
        reg.plugin("NothingAtAll", Nothing)
    assert "NothingAtAll" not in in_tree_registry()


def test_every_entry_is_filed_under_its_own_name() -> None:
    for name, spec in in_tree_registry().items():
        assert spec.name == name
        assert spec.cls is None or spec.cls.name == name


ONLY_FILTER = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - plugins:
      filter:
        enabled: [{name: OnlyEvenNodes}]
"""


def test_a_registry_handed_in_adds_a_plugin_to_config_and_framework() -> None:
    class OnlyEvenNodes(Plugin):
        name = "OnlyEvenNodes"

        def filter(self, pod, state, snap):  # type: ignore[no-untyped-def]
            return None

    with pytest.raises(ValueError, match="unknown plugin 'OnlyEvenNodes'"):
        load_config_text(ONLY_FILTER)
    registry = {**in_tree_registry(), "OnlyEvenNodes": reg.plugin("OnlyEvenNodes", OnlyEvenNodes)}
    profile = load_config_text(ONLY_FILTER, registry=registry).profiles[0]
    assert "OnlyEvenNodes" in profile.plugins_at("filter")
    fw = Framework(profile, 100, 0, registry)
    assert isinstance(fw.plugins["OnlyEvenNodes"], OnlyEvenNodes)
    assert any(isinstance(p, OnlyEvenNodes) for p in fw.filters)


def test_a_plugin_enabled_at_a_point_it_lacks_is_refused() -> None:
    text = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - plugins:
      reserve:
        enabled: [{name: NodeResourcesBalancedAllocation}]
"""
    with pytest.raises(ValueError, match="does not extend reserve"):
        load_config_text(text)


@pytest.mark.parametrize("policy", ["spread", "binpack", "custom"])
def test_katalysts_policies_load_and_run_their_reserve_plugin(policy: str) -> None:
    try:
        text = policy_text(policy)
    except FileNotFoundError:
        pytest.skip("Katalyst's example policies are not checked out next to this repository")
    fw = framework(text)
    assert [p.name for p in fw.reservers] == ["QoSAwareNodeResourcesFit"]
    assert "QoSAwareNodeResourcesFit" in [p.name for p in fw.pre_filters]


def test_cycle_state_keys_are_typed_and_distinct() -> None:
    count: Key[int] = Key("count")
    other: Key[int] = Key("count")  # same text, another key
    state = CycleState()
    state[count] = 3
    assert state.get(count) == 3
    assert state.get(other) is None and other not in state
    assert state.get(other, 7) == 7
    assert state.pop(count) == 3 and count not in state
