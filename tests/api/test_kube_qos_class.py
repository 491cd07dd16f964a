"""One Kubernetes QoS class: the API server's (status.qosClass on create) and the
components' (read from a pod) are the same rule, the kubelet's."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api.qos import k8s_qos_class
from pykatalyst.apiserver.pods import default_pod, pod_qos_class

_AMOUNT = st.sampled_from(["0", "100m", "1", "2", "1Gi", "512Mi"])
_SIDE = st.dictionaries(st.sampled_from(["cpu", "memory"]), _AMOUNT, max_size=2)
_CONTAINER = st.fixed_dictionaries({}, optional={"requests": _SIDE, "limits": _SIDE}).map(
    lambda res: {"name": "c", "resources": res}
)


@given(
    containers=st.lists(_CONTAINER, min_size=1, max_size=3),
    inits=st.lists(_CONTAINER, max_size=2),
)
def test_the_api_server_and_the_components_agree(
    containers: list[dict[str, Any]], inits: list[dict[str, Any]]
) -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {"containers": containers, "initContainers": inits},
    }
    default_pod(pod)  # as the API server does first: requests default to limits
    assert pod_qos_class(pod["spec"]) == k8s_qos_class(pod)


def test_the_three_classes() -> None:
    def spec(req: dict[str, str], lim: dict[str, str]) -> dict[str, Any]:
        return {"containers": [{"name": "c", "resources": {"requests": req, "limits": lim}}]}

    both = {"cpu": "1", "memory": "1Gi"}
    assert pod_qos_class(spec(both, both)) == "Guaranteed"
    assert pod_qos_class(spec({"cpu": "1"}, both)) == "Burstable"
    assert pod_qos_class(spec({}, {})) == "BestEffort"
    assert pod_qos_class(spec({"cpu": "0"}, {})) == "BestEffort"
