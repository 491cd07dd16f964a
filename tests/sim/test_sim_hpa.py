"""The simulator's HPA rule, checked against cases of the HPA's documentation and of
kube-controller-manager's own tests (replica_calculator_test.go, horizontal_test.go)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.sim.hpa import HPA, external_average_value_replicas, resource_replicas


def test_the_documented_ratio_rule_and_tolerance() -> None:
    # docs: current 200m, desired 100m -> double; current 50m -> halve
    assert resource_replicas(4, 4, 0, 200.0, 100.0) == 8
    assert resource_replicas(4, 4, 0, 50.0, 100.0) == 2
    # within the 0.1 tolerance nothing changes
    assert resource_replicas(4, 4, 0, 105.0, 100.0) == 4
    assert resource_replicas(4, 4, 0, 91.0, 100.0) == 4


def test_upstream_replica_calculator_cases() -> None:
    # TestReplicaCalcScaleDown: 5 pods at 100,300,500,250,250 m of 1 cpu, target 50 %
    assert resource_replicas(5, 5, 0, 28.0, 50.0) == 3
    # TestReplicaCalcScaleUpUnreadyLessScale: 3 pods, 1 unready; ready at 50 % and 70 %
    assert resource_replicas(3, 2, 1, 60.0, 30.0) == 4
    # TestReplicaCalcScaleUpUnreadyNoScale: 2 unready; the one ready pod at 40 %
    assert resource_replicas(3, 1, 2, 40.0, 30.0) == 3
    # TestReplicaCalcScaleUpCMExternal-like: AverageValue 8600 over a 4400 per-pod target
    assert external_average_value_replicas(1, 8600.0, 4400.0) == 2
    assert external_average_value_replicas(2, 8600.0, 4400.0) == 2


def test_default_behavior_scale_up_is_at_most_double_or_four_pods_per_period() -> None:
    hpa = HPA(1, 100)
    assert hpa.decide(10, 1, 0.0) == 5  # max(2, 1 + 4)
    assert hpa.decide(40, 10, 100.0) == 20  # max(20, 14)
    # within the same 15 s period the pods already added count
    hpa2 = HPA(1, 100)
    assert hpa2.decide(40, 10, 0.0) == 20
    assert hpa2.decide(40, 20, 5.0) == 20  # the period started at 10: limit 20


def test_default_behavior_holds_scale_down_for_five_minutes() -> None:
    hpa = HPA(1, 100)
    assert hpa.decide(10, 10, 0.0) == 10
    for t in range(15, 300, 15):
        assert hpa.decide(2, 10, float(t)) == 10
    assert hpa.decide(2, 10, 315.0) == 2


@given(
    current=st.integers(1, 50),
    ready=st.integers(1, 50),
    util=st.floats(1, 500),
    target=st.floats(10, 100),
)
def test_the_proposal_moves_toward_the_metric(
    current: int, ready: int, util: float, target: float
) -> None:
    ready = min(ready, current)
    out = resource_replicas(current, ready, current - ready, util, target)
    if util > target * 1.1:
        assert out >= current
    if util < target * 0.9 and ready == current:
        assert out <= current
