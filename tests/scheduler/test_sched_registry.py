"""One registration per plugin: the extension points come from the hooks a class defines,
and the configuration loader, the framework and `--print-config` all read that one
registry."""

from __future__ import annotations

import pytest

from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.config import NodeResourcesFitArgs, load_config_text
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
    spec = reg.plugins()[name]
    assert spec.points == KUBE_POINTS[name]
    if spec.cls is not None:
        # a plugin that runs here extends exactly the points it has hooks for
        assert reg.hook_points(spec.cls) == spec.points


def test_a_plugin_that_runs_here_is_not_listed_as_not_implemented() -> None:
    for spec in reg.plugins().values():
        assert not (spec.cls is not None and spec.not_implemented), spec.name


def test_args_models_come_from_the_registration() -> None:
    assert reg.plugins()["NodeResourcesFit"].args is NodeResourcesFitArgs
    assert reg.plugins()["NodeResourcesFit"].cls is NodeResourcesFit
    assert NodeResourcesFit.name == "NodeResourcesFit"


def test_hooks_left_to_the_base_extend_nothing() -> None:
    class FilterOnly(Plugin):
        def filter(self, pod, state, snap):  # type: ignore[no-untyped-def]
            return None

    assert reg.hook_points(FilterOnly) == {"filter"}
    assert reg.hook_points(Plugin) == frozenset()


def test_a_name_registers_once_and_a_plugin_must_extend_something() -> None:
    class Nothing(Plugin):
        pass

    with pytest.raises(ValueError, match="registered twice"):
        reg.register("NodeName")(Nothing)
    with pytest.raises(ValueError, match="extends no extension point"):
        reg.register("NothingAtAll")(Nothing)
    assert "NothingAtAll" not in reg.plugins()


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
