"""Two `katalyst scheduler --leader-elect` replicas on the real API server: one binds, the
other takes over within the lease duration once the leader is killed, and no pod is bound
twice."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

from pykatalyst.api import names
from tests.e2e.conftest import Component, Kubectl, component_kubeconfig, wait_until
from tests.e2e.fake_nodes import FakeNodes, fake_nodes, renamed_config

__all__ = ["fake_nodes"]

LEASE_S = 6
# What a replica printed must be in its log when it is killed.
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}
BOUND = re.compile(r"^bound (\S+) -> (\S+)", re.M)


def _bound_by(comp: Component) -> list[str]:
    return [m.group(1) for m in BOUND.finditer(comp.log())]


def test_the_follower_takes_over_when_the_leader_dies(
    kubectl: Kubectl,
    namespace: str,
    fake_nodes: FakeNodes,
    components: Callable[..., Component],
    tmp_path: Path,
) -> None:
    for i in range(2):
        fake_nodes.add(f"n{i}")
    sched_name = f"e2e-leader-{fake_nodes.run}"
    config = renamed_config(None, sched_name, tmp_path / "sched.yaml")
    lease = f"e2e-scheduler-{fake_nodes.run}"
    common = [
        "scheduler", "--config", str(config), "--kubeconfig",
        component_kubeconfig("scheduler"), "--leader-elect", "--lease-name", lease,
        "--lease-duration", f"{LEASE_S}s", "--renew-deadline", "4s", "--retry-period", "1s",
    ]  # fmt: skip
    try:
        replicas = {
            who: components(f"scheduler-{who}", *common, "--identity", who, env=UNBUFFERED)
            for who in "ab"
        }

        def holder() -> str:
            got = kubectl.json("get", "lease", lease, "-n", names.SYSTEM_NAMESPACE)
            return str(got["spec"].get("holderIdentity") or "")

        leader = wait_until("a replica to take the lease", holder, 60)
        follower = "b" if leader == "a" else "a"

        def create(prefix: str, n: int) -> None:
            for i in range(n):
                kubectl.apply(
                    fake_nodes.pod(f"{prefix}-{i}", namespace, {"cpu": "100m"},
                                   scheduler=sched_name)
                )  # fmt: skip

        def all_bound(n: int) -> bool:
            placed = fake_nodes.placements(namespace)
            return len(placed) == n and all(placed.values())

        create("first", 4)
        wait_until("the leader to bind the first pods", lambda: all_bound(4), 60)
        assert not _bound_by(replicas[follower]), "the follower bound pods while following"
        replicas[leader].kill(signal.SIGKILL)
        create("second", 4)
        # The lease expires LEASE_S after the last renewal; the follower retries every 1s.
        wait_until("the follower to take over", lambda: holder() == follower, LEASE_S + 10)
        wait_until("the new leader to bind the new pods", lambda: all_bound(8), 30)
        first = _bound_by(replicas[leader])
        want = sorted(f"{namespace}/second-{i}" for i in range(4))
        # A replica prints its bindings after its loop (the killed one may not have), so the
        # last line can follow the binding the API server already shows: wait for it.
        try:
            wait_until(
                "the new leader to print its bindings",
                lambda: sorted(_bound_by(replicas[follower])) == want,
                15,
            )
        except AssertionError:
            assert sorted(_bound_by(replicas[follower])) == want  # says what it printed
        assert set(first) <= {f"{namespace}/first-{i}" for i in range(4)}
        scheduled = [
            e
            for e in kubectl.json("get", "events", "-n", namespace)["items"]
            if e.get("reason") == "Scheduled"
        ]
        per_pod: dict[str, int] = {}
        for e in scheduled:
            pod = e["involvedObject"]["name"]
            per_pod[pod] = per_pod.get(pod, 0) + int(e.get("count") or 1)
        assert per_pod and max(per_pod.values()) == 1, f"a pod was bound twice: {per_pod}"
    finally:
        kubectl.run("delete", "lease", lease, "-n", names.SYSTEM_NAMESPACE, check=False)
