"""Properties of the per-pod resize decision over generated pods, targets, strategies and
kubelet answers."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import vpa
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.vpa import Target
from pykatalyst.controllers import resize
from pykatalyst.controllers.resize import ResizeConfig, ResizeMemory, decide_pod

STRATEGIES = (vpa.STRATEGY_OFF, vpa.STRATEGY_INPLACE, vpa.STRATEGY_BEST_EFFORT_INPLACE)
CFG = ResizeConfig(deferred_timeout_s=300, in_progress_timeout_s=3600)
milli = st.integers(1, 4000)
KUBELET = st.sampled_from(
    [
        None,
        {"type": "PodResizePending", "reason": "Infeasible", "message": "no room"},
        {"type": "PodResizePending", "reason": "Deferred", "message": "later"},
        {"type": "PodResizeInProgress", "reason": "", "message": ""},
        {"type": "PodResizeInProgress", "reason": "Error", "message": "failed"},
    ]
)


def _pod(req: int, lim: int, mem_lim: int, reported: bool, cond: Any) -> dict[str, Any]:
    res = {
        "requests": {"cpu": f"{req}m", "memory": "64Mi"},
        "limits": {"cpu": f"{lim}m", "memory": f"{mem_lim}Mi"},
    }
    status: dict[str, Any] = {"phase": "Running", "conditions": []}
    if reported:
        status["containerStatuses"] = [{"name": "c", "resources": copy.deepcopy(res)}]
    if cond is not None:
        status["conditions"].append({"status": "True", **cond})
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": res}]},
        "status": status,
    }


@settings(max_examples=300, deadline=None)
@given(
    milli,
    milli,
    milli,
    milli,
    st.integers(64, 256),
    st.integers(64, 256),
    st.sampled_from(STRATEGIES),
    KUBELET,
    st.booleans(),
    st.floats(0, 10_000),
    st.booleans(),
)
def test_decisions_respect_the_strategy_and_the_kubelet(
    req: int,
    lim: int,
    t_req: int,
    t_lim: int,
    mem_lim: int,
    t_mem: int,
    strategy: str,
    cond: Any,
    reported: bool,
    waited: float,
    static_node: bool,
) -> None:
    req, lim = min(req, lim), max(req, lim)
    t_req, t_lim = min(t_req, t_lim), max(t_req, t_lim)
    pod = _pod(req, lim, mem_lim, reported, cond)
    target = Target(
        {"cpu": Quantity.from_milli(t_req)},
        {"cpu": Quantity.from_milli(t_lim), "memory": Quantity.parse(f"{t_mem}Mi")},
    )
    targets = {"c": target}
    memory = ResizeMemory(vpa.annotation_text(targets), 0.0, 0.0)
    d = decide_pod(pod, targets, strategy, memory, waited, CFG, static_node=static_node)
    assert d.outcome in resize.OUTCOMES
    reached = resize.reached(resize.actual_shapes(pod), targets)
    assert (d.outcome == resize.APPLIED) == reached
    if strategy == vpa.STRATEGY_OFF:
        assert d.outcome in (resize.OFF, resize.APPLIED)
    if d.outcome == resize.EVICT:
        assert strategy == vpa.STRATEGY_BEST_EFFORT_INPLACE
    if d.outcome == resize.RESIZE:
        assert vpa.differs(pod, targets) and not vpa.check_legal(pod, targets)
        assert t_mem >= mem_lim, "a memory-limit decrease is never tried in place"
        (c,) = d.resize_body["spec"]["containers"] if d.resize_body else [None]
        assert c is not None and c["resources"]["limits"]["cpu"] == str(Quantity.from_milli(t_lim))
        assert c["resources"]["requests"]["memory"] == "64Mi", "untargeted figures are kept"
    if d.outcome == resize.WAITING and cond is not None and cond["reason"] == "Deferred":
        assert waited < CFG.deferred_timeout_s
    assert d.memory is not None and d.memory.wanted == vpa.annotation_text(targets)


def test_a_new_target_restarts_the_deferred_clock() -> None:
    pod = _pod(100, 200, 128, True, {"type": "PodResizePending", "reason": "Deferred"})
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "300m"
    targets = {"c": Target(None, {"cpu": Quantity.parse("300m")})}
    old = ResizeMemory("something else", 0.0)
    d = decide_pod(pod, targets, vpa.STRATEGY_BEST_EFFORT_INPLACE, old, 1000.0, CFG)
    assert d.outcome == resize.WAITING and d.memory is not None
    assert d.memory.deferred_since == 1000.0
    later = decide_pod(pod, targets, vpa.STRATEGY_BEST_EFFORT_INPLACE, d.memory, 1301.0, CFG)
    assert later.outcome == resize.EVICT and later.reason == resize.WHY_DEFERRED
