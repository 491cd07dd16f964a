"""The scheduler's view of a pod read from a real API server: the ServiceAccount token
volume the API server gives each pod does not make every pod a template of its own."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.scheduler import podinfo
from tests.scheduler.sched_helpers import pod


def _served(name: str, token: str, **kw: Any) -> dict[str, Any]:
    """A pod as kube-apiserver stores it, with its own projected token volume."""
    raw = pod(name, {"cpu": "100m", "memory": "500Mi"}, **kw)
    raw["metadata"]["uid"] = f"uid-{name}"
    volume = f"kube-api-access-{token}"
    raw["spec"]["volumes"] = [
        {"name": volume, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
        ]}}
    ]  # fmt: skip
    mount = {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": volume}
    raw["spec"]["containers"][0]["volumeMounts"] = [dict(mount, readOnly=True)]
    return raw


@pytest.fixture
def derivations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods read in full (the others came from a template already read)."""
    seen: list[str] = []
    real = podinfo._derive

    def counting(raw: dict[str, Any]) -> Any:
        seen.append(raw["metadata"]["name"])
        return real(raw)

    monkeypatch.setattr(podinfo, "_derive", counting)
    monkeypatch.setattr(podinfo, "_TEMPLATE_CACHE", {})
    return seen


def test_pods_differing_only_in_their_token_volume_share_a_template(
    derivations: list[str],
) -> None:
    infos = [podinfo.pod_info(_served(f"p{i}", t)) for i, t in enumerate(["x7k2q", "b9zzt"])]
    assert derivations == ["p0"]
    assert [i.requests for i in infos] == [{"cpu": 100, "memory": 500 * 2**20}] * 2
    assert [i.name for i in infos] == ["p0", "p1"]


def test_any_other_difference_is_a_template_of_its_own(derivations: list[str]) -> None:
    podinfo.pod_info(_served("p0", "x7k2q"))
    other = _served("p1", "b9zzt")
    other["spec"]["volumes"].append({"name": "data", "emptyDir": {}})
    podinfo.pod_info(other)
    podinfo.pod_info(_served("p2", "aaaaa", tolerations=[{"operator": "Exists"}]))
    renamed = copy.deepcopy(_served("p3", "ccccc"))
    renamed["spec"]["volumes"][0]["name"] = "kube-api-access-longer-name"
    podinfo.pod_info(renamed)
    assert derivations == ["p0", "p1", "p2", "p3"]


@given(
    cpu=st.integers(0, 64_000),
    qos=st.sampled_from([None, "shared_cores", "reclaimed_cores", "dedicated_cores"]),
    node=st.sampled_from(["", "n1"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded"]),
)
def test_a_rebound_pod_reads_as_a_fresh_parse_of_the_new_version(
    cpu: int, qos: str | None, node: str, phase: str
) -> None:
    """A pod updated in its binding, status or version only keeps what was read from its
    spec (a slot-by-slot copy) and takes the new version's binding: every field equals a
    parse of the new version from scratch, and the earlier view is left as it was."""
    old_raw = pod("p", {"cpu": f"{cpu}m", "memory": "1Gi"}, qos=qos, uid="uid-p")
    old = podinfo.pod_info(old_raw)
    before = {name: getattr(old, name) for name in podinfo._POD_INFO_SLOTS}
    new_raw = copy.deepcopy(old_raw)
    new_raw["metadata"]["resourceVersion"] = "7"
    new_raw["status"] = {"phase": phase}
    if node:
        new_raw["spec"]["nodeName"] = node
    got = old.rebound(new_raw)
    fresh = podinfo.pod_info(new_raw)
    assert got is not old
    for name in podinfo._POD_INFO_SLOTS:
        assert getattr(got, name) == getattr(fresh, name), name
    assert {name: getattr(old, name) for name in podinfo._POD_INFO_SLOTS} == before
