"""The enforcer: diff, safe ordering, reporting once, forgetting, checkpoints."""

from __future__ import annotations

import errno
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent.enforcer import DesiredStateError, Enforcer
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import (
    ApplyResult,
    CpuQuota,
    Knob,
    KnobValue,
    KnobWrite,
    WriteFailure,
)
from pykatalyst.agent.host.linux import LinuxHost
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.wrapped_host import WrappedHost
from tests.fixtures.fake_node import FakeNode, FakePod, make_kubelet_tree

C = CPUSet.parse
A_UID, B_UID = "aaaa-1", "bbbb-2"


def _node(tmp_path: Path, version: int = 1) -> FakeNode:
    return make_kubelet_tree(
        tmp_path / "node",
        [FakePod(A_UID, "burstable", ("app",)), FakePod(B_UID, "besteffort", ("job",))],
        version=version,
    )


def _enforcer(node: FakeNode, tmp_path: Path, **kw: object) -> Enforcer:
    return Enforcer(node.host(), checkpoint=tmp_path / "enforcer.json", clock=VirtualClock(), **kw)  # type: ignore[arg-type]


def test_only_differences_are_written_and_a_second_pass_writes_nothing(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    enf = _enforcer(node, tmp_path)
    cg = node.pod_cgroup(A_UID)
    desired: dict[str, dict[Knob, KnobValue]] = {
        cg: {Knob.CPU_SHARES: 1024, Knob.CPU_IDLE: 0, Knob.CPUSET_CPUS: C("0-3")}
    }
    first = enf.apply(desired)
    # cpu.idle is already 0 on a fresh cgroup: not written
    assert {w.knob for w in first.planned} == {Knob.CPU_SHARES, Knob.CPUSET_CPUS}
    assert first.applied == first.planned and first.ok
    # 1024 shares is weight 39 on v2, which reads back as 1010 shares: still "right"
    assert enf.apply(desired).planned == ()


def test_planning_reads_but_never_writes(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    cg = node.pod_cgroup(A_UID)
    writes = enf.plan({cg: {Knob.CPUSET_CPUS: C("0-1"), Knob.CPU_IDLE: 1}})
    assert len(writes) == 2
    assert node.read(cg, "cpuset.cpus") == "0-15" and node.read(cg, "cpu.idle") == "0"
    assert enf.explain() == [] and not (tmp_path / "enforcer.json").exists()


def test_cpus_moving_between_siblings_are_added_before_they_are_removed(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    a, b = node.pod_cgroup(A_UID), node.pod_cgroup(B_UID)
    enf.apply({a: {Knob.CPUSET_CPUS: C("0-7")}, b: {Knob.CPUSET_CPUS: C("8-15")}})
    writes = enf.plan({a: {Knob.CPUSET_CPUS: C("0-5")}, b: {Knob.CPUSET_CPUS: C("6-15")}})
    assert [(w.cgroup, str(w.value)) for w in writes] == [(b, "6-15"), (a, "0-5")]


def test_parents_widen_before_children_and_children_narrow_before_parents(
    tmp_path: Path,
) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    pod, ctr = node.pod_cgroup(A_UID), node.container_cgroup(A_UID, "app")
    enf.apply({pod: {Knob.CPUSET_CPUS: C("0-3")}, ctr: {Knob.CPUSET_CPUS: C("0-1")}})
    widen = enf.plan({pod: {Knob.CPUSET_CPUS: C("0-7")}, ctr: {Knob.CPUSET_CPUS: C("0-5")}})
    assert [w.cgroup for w in widen] == [pod, ctr]
    narrow = enf.plan({pod: {Knob.CPUSET_CPUS: C("0")}, ctr: {Knob.CPUSET_CPUS: C("0")}})
    assert [w.cgroup for w in narrow] == [ctr, pod]


def test_a_set_that_gains_and_loses_is_widened_to_the_union_first(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    pod, ctr = node.pod_cgroup(A_UID), node.container_cgroup(A_UID, "app")
    enf.apply({pod: {Knob.CPUSET_CPUS: C("0-3")}, ctr: {Knob.CPUSET_CPUS: C("0-3")}})
    writes = enf.plan({pod: {Knob.CPUSET_CPUS: C("4-7")}, ctr: {Knob.CPUSET_CPUS: C("4-7")}})
    assert [(w.cgroup, str(w.value)) for w in writes] == [
        (pod, "0-7"),
        (ctr, "0-7"),
        (ctr, "4-7"),
        (pod, "4-7"),
    ]
    enf.apply({pod: {Knob.CPUSET_CPUS: C("4-7")}, ctr: {Knob.CPUSET_CPUS: C("4-7")}})
    assert node.read(ctr, "cpuset.cpus") == "4-7" and node.read(pod, "cpuset.cpus") == "4-7"


def test_mems_are_written_before_cpus_when_growing(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    cg = node.pod_cgroup(A_UID)
    enf.apply({cg: {Knob.CPUSET_CPUS: C("0-3"), Knob.CPUSET_MEMS: C("0")}})
    grow = enf.plan({cg: {Knob.CPUSET_CPUS: C("0-15"), Knob.CPUSET_MEMS: C("0-1")}})
    assert [w.knob for w in grow] == [Knob.CPUSET_MEMS, Knob.CPUSET_CPUS]
    enf.apply({cg: {Knob.CPUSET_CPUS: C("0-15"), Knob.CPUSET_MEMS: C("0-1")}})
    shrink = enf.plan({cg: {Knob.CPUSET_CPUS: C("0-3"), Knob.CPUSET_MEMS: C("0")}})
    assert [w.knob for w in shrink] == [Knob.CPUSET_CPUS, Knob.CPUSET_MEMS]


def test_quota_and_limit_increases_go_parent_first_decreases_child_first(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    pod, ctr = node.pod_cgroup(A_UID), node.container_cgroup(A_UID, "app")
    small: dict[Knob, KnobValue] = {Knob.CPU_QUOTA: CpuQuota(100_000), Knob.MEMORY_LIMIT: 1 << 30}
    big: dict[Knob, KnobValue] = {Knob.CPU_QUOTA: CpuQuota(400_000), Knob.MEMORY_LIMIT: 4 << 30}
    enf.apply({pod: small, ctr: small})
    assert [w.cgroup for w in enf.plan({pod: big, ctr: big})] == [pod, pod, ctr, ctr]
    enf.apply({pod: big, ctr: big})
    assert [w.cgroup for w in enf.plan({pod: small, ctr: small})] == [ctr, ctr, pod, pod]


def test_an_empty_cpuset_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    a, b = node.pod_cgroup(A_UID), node.pod_cgroup(B_UID)
    before = node.read(a, "cpu.shares")
    with pytest.raises(DesiredStateError, match=r"empty cpuset\.cpus") as info:
        enf.apply({a: {Knob.CPU_SHARES: 4096}, b: {Knob.CPUSET_CPUS: CPUSet()}})
    assert info.value.cgroup == b and info.value.knob is Knob.CPUSET_CPUS
    assert node.read(a, "cpu.shares") == before
    assert not (tmp_path / "enforcer.json").exists()


@pytest.mark.parametrize(
    ("cgroup", "knobs", "fragment"),
    [
        ("../etc", {Knob.CPU_IDLE: 1}, "relative"),
        ("x", {Knob.CPU_SHARES: 1}, "cpu.shares"),
        ("x", {"cpu.shares": 2}, "unknown knob"),
    ],
)
def test_invalid_desired_states_name_what_is_wrong(
    tmp_path: Path, cgroup: str, knobs: dict[object, object], fragment: str
) -> None:
    enf = _enforcer(_node(tmp_path), tmp_path)
    with pytest.raises(DesiredStateError, match=fragment):
        enf.apply({cgroup: knobs})  # type: ignore[dict-item]


def test_memory_limit_below_usage_is_written_but_noted(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    cg = node.pod_cgroup(B_UID)
    node.set_memory(cg, usage=2 << 30, rss=2 << 30)
    report = enf.apply({cg: {Knob.MEMORY_LIMIT: 1 << 30}})
    assert report.applied and node.read(cg, "memory.limit_in_bytes") == str(1 << 30)
    (note,) = report.notes
    assert cg in note and "below current usage" in note
    (entry,) = enf.explain(cg, Knob.MEMORY_LIMIT)
    assert "below usage" in entry.reason
    # usage handed in by the caller (from its own sample) wins over reading it
    report = enf.apply({cg: {Knob.MEMORY_LIMIT: 1 << 29}}, usage={cg: 0})
    assert report.notes == ()


def test_dry_run_writes_nothing_and_lists_the_would_be_writes(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    enf = _enforcer(node, tmp_path)
    cg = node.container_cgroup(B_UID, "job")
    report = enf.apply({cg: {Knob.CPU_IDLE: 1, Knob.CPUSET_CPUS: C("8-15")}}, dry_run=True)
    assert report.dry_run
    assert {(w.knob, str(w.value)) for w in report.planned} == {
        (Knob.CPU_IDLE, "1"),
        (Knob.CPUSET_CPUS, "8-15"),
    }
    assert report.applied == ()
    assert node.read(cg, "cpu.idle") == "0" and node.read(cg, "cpuset.cpus") == ""
    assert not (tmp_path / "enforcer.json").exists()
    assert {e.outcome for e in enf.explain(cg)} == {"dry-run"}


class _FailingHost(WrappedHost):
    """A LinuxHost whose writes of one knob fail with a chosen errno (EBUSY by default)."""

    def __init__(self, inner: LinuxHost, knob: Knob, code: int = errno.EBUSY) -> None:
        self.inner = inner
        self.knob = knob
        self.code = code
        self.failing = True

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        return self.inner.read_knobs(cgroup)

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        bad = [w for w in writes if w.knob is self.knob and self.failing]
        ok = self.inner.apply([w for w in writes if w not in bad])
        fails = tuple(WriteFailure(w, f"{w.knob.value}: EBUSY", errno=self.code) for w in bad)
        return ApplyResult(ok.applied, ok.failed + fails)


def test_an_unwritable_knob_is_reported_once_not_every_pass(tmp_path: Path) -> None:
    node = _node(tmp_path)
    host = _FailingHost(node.host(), Knob.MEMORY_LIMIT)
    enf = Enforcer(host, clock=VirtualClock())  # type: ignore[arg-type]
    cg = node.pod_cgroup(A_UID)
    desired = {cg: {Knob.MEMORY_LIMIT: 1 << 30, Knob.CPU_IDLE: 0}}
    first = enf.apply(desired)
    assert len(first.failed) == 1 and len(first.new_failures) == 1
    for _ in range(3):
        again = enf.apply(desired)
        assert len(again.failed) == 1  # still failing, still tried
        assert again.new_failures == ()  # but not reported again
    host.failing = False
    assert enf.apply(desired).ok
    host.failing = True
    # after a success the same failure is news again
    assert len(enf.apply({cg: {Knob.MEMORY_LIMIT: 2 << 30}}).new_failures) == 1


def test_a_knob_the_machine_lacks_is_reported_once_then_skipped(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    enf = _enforcer(node, tmp_path)
    a, b = node.pod_cgroup(A_UID), node.pod_cgroup(B_UID)
    first = enf.apply({a: {Knob.MEMORY_HIGH: 1 << 30}, b: {Knob.MEMORY_HIGH: 1 << 30}})
    assert len(first.new_failures) == 1  # once for the machine, not once per cgroup
    assert "cgroup v1" in first.new_failures[0].error
    assert first.unsupported == (Knob.MEMORY_HIGH,)
    second = enf.apply({a: {Knob.MEMORY_HIGH: 1 << 30, Knob.CPU_IDLE: 1}})
    assert [w.knob for w in second.planned] == [Knob.CPU_IDLE]
    assert second.ok and second.unsupported == (Knob.MEMORY_HIGH,)


def test_a_file_missing_in_one_cgroup_is_skipped_there_only(tmp_path: Path) -> None:
    node = _node(tmp_path, 2)
    enf = _enforcer(node, tmp_path)
    a, b = node.pod_cgroup(A_UID), node.pod_cgroup(B_UID)
    node.path(a, "cpuset.cpus").unlink()  # cpuset not delegated to this cgroup
    desired = {a: {Knob.CPUSET_CPUS: C("0-3")}, b: {Knob.CPUSET_CPUS: C("0-3")}}
    first = enf.apply(desired)
    assert [f.write.cgroup for f in first.new_failures] == [a]
    assert [w.cgroup for w in first.applied] == [b]
    assert first.unsupported == ()
    assert enf.apply(desired).planned == ()  # not retried every pass


def test_shares_of_an_idle_cgroup_are_left_alone(tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    enf = _enforcer(node, tmp_path)
    cg = node.pod_cgroup(B_UID)
    report = enf.apply({cg: {Knob.CPU_IDLE: 1, Knob.CPU_SHARES: 2}})
    # the kernel refuses shares on a SCHED_IDLE group (EINVAL): not even tried
    assert [w.knob for w in report.planned] == [Knob.CPU_IDLE]
    back = enf.apply({cg: {Knob.CPU_IDLE: 0, Knob.CPU_SHARES: 2}})
    assert [w.knob for w in back.planned] == [Knob.CPU_IDLE, Knob.CPU_SHARES]


def test_a_vanished_cgroup_is_skipped_and_forgotten(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    a, b = node.pod_cgroup(A_UID), node.pod_cgroup(B_UID)
    enf.apply({a: {Knob.CPU_IDLE: 0}, b: {Knob.CPU_IDLE: 0}})
    node.remove_pod(B_UID)
    report = enf.apply({a: {Knob.CPU_IDLE: 1}, b: {Knob.CPU_IDLE: 1}})
    assert report.vanished == (b,)
    assert report.failed == () and report.new_failures == ()
    assert [w.cgroup for w in report.applied] == [a]
    assert set(enf.desired) == {a}
    saved = json.loads((tmp_path / "enforcer.json").read_text())
    assert set(saved["desired"]) == {a}


def test_checkpoint_is_replaced_atomically_and_round_trips(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path)
    cg = node.pod_cgroup(A_UID)
    desired: dict[str, dict[Knob, KnobValue]] = {
        cg: {
            Knob.CPUSET_CPUS: C("0-3,8"),
            Knob.CPU_QUOTA: CpuQuota(None, 50_000),
            Knob.MEMORY_LIMIT: None,
            Knob.CPU_SHARES: 512,
        }
    }
    enf.apply(desired)
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["enforcer.json"]
    again = _enforcer(node, tmp_path)
    assert again.desired == desired and not again.interrupted


class _CrashingHost(WrappedHost):
    """Dies (like a killed agent) after `budget` single writes."""

    def __init__(self, inner: LinuxHost, budget: int) -> None:
        self.inner = inner
        self.budget = budget

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        return self.inner.read_knobs(cgroup)

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        for w in writes:
            if self.budget == 0:
                raise SystemExit("killed mid-apply")
            self.budget -= 1
            self.inner.apply([w])
        return ApplyResult(tuple(writes))


def test_after_a_crash_mid_apply_the_next_start_converges(tmp_path: Path) -> None:
    node = _node(tmp_path)
    a, b = node.pod_cgroup(A_UID), node.pod_cgroup(B_UID)
    desired: dict[str, dict[Knob, KnobValue]] = {
        a: {Knob.CPUSET_CPUS: C("0-5"), Knob.CPU_SHARES: 4096},
        b: {Knob.CPUSET_CPUS: C("6-15"), Knob.CPU_IDLE: 1, Knob.MEMORY_LIMIT: 1 << 30},
    }
    crashing = Enforcer(
        _CrashingHost(node.host(), budget=2),  # type: ignore[arg-type]
        checkpoint=tmp_path / "enforcer.json",
        clock=VirtualClock(),
    )
    with pytest.raises(SystemExit):
        crashing.apply(desired)
    restarted = _enforcer(node, tmp_path)
    assert restarted.interrupted
    report = restarted.resume()
    assert report.ok and len(report.applied) == 3  # the writes the crash cut off
    host = node.host()
    for cg, knobs in desired.items():
        actual = host.read_knobs(cg)
        assert {k: actual[k] for k in knobs} == knobs
    assert not restarted.interrupted
    assert restarted.resume().planned == ()


def test_a_corrupt_checkpoint_does_not_stop_the_agent(tmp_path: Path) -> None:
    node = _node(tmp_path)
    (tmp_path / "enforcer.json").write_text('{"version": 1, "desired": {"x": {"cpu.idle": "yes"}}')
    enf = _enforcer(node, tmp_path)
    assert enf.checkpoint_error is not None and "enforcer.json" in enf.checkpoint_error
    assert enf.desired == {}
    cg = node.pod_cgroup(A_UID)
    assert enf.apply({cg: {Knob.CPU_IDLE: 1}}).ok


def test_the_journal_explains_every_write_and_stays_bounded(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path, journal_size=5)
    cg = node.pod_cgroup(A_UID)
    for shares in range(100, 110):
        enf.apply({cg: {Knob.CPU_SHARES: shares}})
    entries = enf.explain(cg)
    assert len(entries) == 5
    assert [e.value for e in entries] == list(range(105, 110))
    assert entries[-1].previous == 108 and entries[-1].outcome == "applied"
    assert entries[-1].reason == "108 -> 109"


def test_a_journal_of_size_zero_keeps_nothing_and_the_writes_still_happen(tmp_path: Path) -> None:
    node = _node(tmp_path)
    enf = _enforcer(node, tmp_path, journal_size=0)
    cg = node.pod_cgroup(A_UID)
    desired: dict[str, dict[Knob, KnobValue]] = {
        cg: {Knob.CPU_SHARES: 300, Knob.CPUSET_CPUS: C("0-1")}
    }
    report = enf.apply(desired)
    assert report.ok and len(report.applied) == 2
    assert node.read(cg, "cpuset.cpus") == "0-1"
    assert enf.explain() == []
    assert enf.apply(desired).planned == ()


@pytest.mark.parametrize("size", [-1, 2.5, True, "64"])
def test_a_bad_journal_size_is_refused_by_name(tmp_path: Path, size: object) -> None:
    with pytest.raises(ValueError, match=r"journal_size: invalid value .*entry count >= 0"):
        _enforcer(_node(tmp_path), tmp_path, journal_size=size)


# -- property: any consistent hierarchy of cpusets can follow any other ----------------------


class _StrictV1Cpusets(WrappedHost):
    """Enforces cgroup v1's cpuset rules on a fake tree at every single write: a set is
    never empty, lies within its parent's, and keeps every child's."""

    def __init__(self, inner: LinuxHost, tree: dict[str, str | None]) -> None:
        self.inner = inner
        self.tree = tree  # cgroup -> parent (None at the top)

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        return self.inner.read_knobs(cgroup)

    def _cpus(self, cg: str) -> CPUSet:
        value = self.inner.read_knobs(cg)[Knob.CPUSET_CPUS]
        assert isinstance(value, CPUSet)
        return value

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        applied, failed = [], []
        for w in writes:
            assert isinstance(w.value, CPUSet)
            parent = self.tree[w.cgroup]
            children = [c for c, p in self.tree.items() if p == w.cgroup]
            if (
                w.value.is_empty()
                or (parent is not None and not w.value.issubset(self._cpus(parent)))
                or any(not self._cpus(c).issubset(w.value) for c in children)
            ):
                failed.append(WriteFailure(w, "v1 cpuset rule broken", errno=errno.EBUSY))
            else:
                self.inner.apply([w])
                applied.append(w)
        return ApplyResult(tuple(applied), tuple(failed))


@st.composite
def _hierarchy_state(draw: st.DrawFn, names: dict[str, str | None]) -> dict[str, CPUSet]:
    """Random non-empty cpusets over 8 cpus, each within its parent's."""
    out: dict[str, CPUSet] = {}
    for cg, parent in names.items():  # parents come first
        pool = list(out[parent]) if parent is not None else list(range(8))
        picked = draw(st.sets(st.sampled_from(pool), min_size=1))
        out[cg] = CPUSet.of(picked)
    return out


TREE: dict[str, str | None] = {
    "qos": None,
    "qos/pod1": "qos",
    "qos/pod1/c1": "qos/pod1",
    "qos/pod1/c2": "qos/pod1",
    "qos/pod2": "qos",
    "qos/pod2/c3": "qos/pod2",
}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=_hierarchy_state(TREE), after=_hierarchy_state(TREE))
def test_any_cpuset_hierarchy_reaches_any_other_within_v1_rules(
    tmp_path: Path, before: dict[str, CPUSet], after: dict[str, CPUSet]
) -> None:
    topo = CPUTopology.synthetic(1, 8, 1, 1)
    root = tmp_path / f"n{abs(hash((tuple(before.items()), tuple(after.items()))))}"
    node = make_kubelet_tree(root, [], version=1, topology=topo)
    for cg in TREE:
        node.make_cgroup(cg)
    host = _StrictV1Cpusets(node.host(), TREE)
    enf = Enforcer(host, clock=VirtualClock())  # type: ignore[arg-type]
    assert enf.apply({cg: {Knob.CPUSET_CPUS: s} for cg, s in before.items()}).ok
    report = enf.apply({cg: {Knob.CPUSET_CPUS: s} for cg, s in after.items()})
    assert report.ok, report.failed
    for cg, cpus in after.items():
        assert host.read_knobs(cg)[Knob.CPUSET_CPUS] == cpus
    assert enf.plan({cg: {Knob.CPUSET_CPUS: s} for cg, s in after.items()}) == []


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shares=st.integers(min_value=2, max_value=262144),
    quota=st.one_of(st.none(), st.integers(min_value=1000, max_value=10**6)),
    limit=st.one_of(st.none(), st.integers(min_value=1, max_value=1 << 40)),
    version=st.sampled_from([1, 2]),
)
def test_apply_converges_so_the_next_plan_is_empty(
    tmp_path: Path, shares: int, quota: int | None, limit: int | None, version: int
) -> None:
    root = tmp_path / f"v{version}-{shares}-{quota}-{limit}"
    node = make_kubelet_tree(root, [FakePod("p", "burstable")], version=version)
    enf = Enforcer(node.host(), clock=VirtualClock())
    cg = node.pod_cgroup("p")
    desired: dict[str, dict[Knob, KnobValue]] = {
        cg: {Knob.CPU_SHARES: shares, Knob.CPU_QUOTA: CpuQuota(quota), Knob.MEMORY_LIMIT: limit}
    }
    assert enf.apply(desired).ok
    assert enf.plan(desired) == []
    back = node.host().read_knobs(cg)
    for knob, value in desired[cg].items():
        assert cgroupfs.values_equal(knob, back[knob], value, version, 4096)
