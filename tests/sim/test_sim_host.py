"""SimHost speaks the agent's Host protocol, and the knobs written are the knobs applied."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.host.base import CpuQuota, Knob, KnobWrite
from pykatalyst.agent.host.cgroupfs import check_knob_value, values_equal
from pykatalyst.sim.host import PodUsage, SimHost, milli_to_shares
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology


def _host() -> SimHost:
    topo = CPUTopology.synthetic(sockets=1, cores_per_socket=4, threads_per_core=2)
    host = SimHost(topo, 16 * 2**30, 2**30)
    host.start_pod("u1", "burstable", "app", 2500, None, 4 * 2**30)
    host.start_pod("u2", "besteffort", "task", 0, None, None)
    return host


def test_discover_lists_pods_in_kubelets_cgroupfs_layout() -> None:
    found = {p.pod_uid: p for p in _host().discover()}
    assert found["u1"].cgroup == "kubepods/burstable/podu1"
    assert found["u2"].cgroup == "kubepods/besteffort/podu2"
    c = found["u1"].containers[0]
    assert c.name == "app" and c.cgroup == f"kubepods/burstable/podu1/{c.container_id}"
    assert len(c.container_id) == 64


def test_kubelet_defaults_then_agent_writes_are_what_the_kernel_applies() -> None:
    host = _host()
    pod = next(p for p in host.discover() if p.pod_uid == "u2")
    knobs = host.read_knobs(pod.cgroup)
    assert knobs[Knob.CPUSET_CPUS] == CPUSet.parse("0-7")
    assert knobs[Knob.CPU_SHARES] == 2
    assert host.effective("u1").shares == milli_to_shares(2500) == 2560
    result = host.apply(
        [
            KnobWrite(pod.cgroup, Knob.CPUSET_CPUS, CPUSet.parse("2-7")),
            KnobWrite(pod.containers[0].cgroup, Knob.CPUSET_CPUS, CPUSet.parse("4-7")),
            KnobWrite(pod.cgroup, Knob.CPU_QUOTA, CpuQuota(150_000)),
            KnobWrite(pod.cgroup, Knob.CPU_IDLE, 1),
            KnobWrite("kubepods/besteffort/podgone", Knob.CPU_IDLE, 1),
            KnobWrite(pod.cgroup, Knob.CPUSET_CPUS, CPUSet.parse("9")),
        ]
    )
    assert len(result.applied) == 4
    assert [f.vanished for f in result.failed] == [True, False]
    eff = host.effective("u2")
    assert CPUSet.from_mask(eff.cpus) == CPUSet.parse("4-7")  # intersection down the tree
    assert eff.quota_cores == 1.5 and eff.idle
    assert "u2" in host.dirty


def test_sample_reports_what_the_physics_measured() -> None:
    host = _host()
    host.pod_usage = lambda uid: PodUsage(cpu_cores=1.5, memory=2**30) if uid == "u1" else None
    pod = next(p for p in host.discover() if p.pod_uid == "u1")
    sample = host.sample(60.0, [pod.cgroup, pod.containers[0].cgroup, "kubepods/other"])
    assert set(sample.cgroups) == {pod.cgroup, pod.containers[0].cgroup}
    assert sample.cgroups[pod.cgroup].cpu_usage_cores == 1.5
    assert sample.memory is not None and sample.memory.total == 16 * 2**30
    host.stop_pod("u1")
    assert {p.pod_uid for p in host.discover()} == {"u2"}


_KNOB_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.integers(min_value=0, max_value=2**16 - 1).map(CPUSet.from_mask),
    st.builds(
        CpuQuota,
        st.one_of(st.none(), st.integers(min_value=-10, max_value=10**7)),
        st.integers(min_value=0, max_value=2 * 10**6),
    ),
    # equal to an int quota, yet not a valid one
    st.integers(min_value=1000, max_value=10**6).map(lambda q: CpuQuota(float(q))),  # type: ignore[arg-type]
    st.floats(allow_nan=False),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Knob)), _KNOB_VALUES), max_size=20))
def test_knob_problems_are_the_cgroupfs_answers_however_often_asked(
    asks: list[tuple[Knob, object]],
) -> None:
    # The host remembers answers: True and 1, or quotas of 1000 and 1000.0 us, are equal
    # and hash alike, yet only the ints are valid; asking again must not change an answer.
    host = _host()
    twins = [
        (Knob.CPU_IDLE, 1),
        (Knob.CPU_IDLE, True),
        (Knob.CPU_QUOTA, CpuQuota(1000)),
        (Knob.CPU_QUOTA, CpuQuota(1000.0)),  # type: ignore[arg-type]
    ]
    for knob, value in [*asks, *asks, *twins, *twins]:
        assert host.knob_problem(knob, value) == check_knob_value(knob, value)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(Knob)), _KNOB_VALUES, _KNOB_VALUES)
def test_same_value_is_cgroupfs_equality_for_the_hosts_version_and_page(
    knob: Knob, a: object, b: object
) -> None:
    host = _host()
    want = values_equal(knob, a, b, host.cgroup_version, host.page_size)  # type: ignore[arg-type]
    assert host.same_value(knob, a, b) == want  # type: ignore[arg-type]
