"""Disk I/O isolation: per-QoS knobs, their cgroup files on v1 and v2, the config that
declares them, and the enforcer that keeps them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import CheckpointError, Enforcer, decode_desired, encode_desired
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import IoLatency, IoLimit, IoLimits, Knob, KnobWrite
from pykatalyst.agent.io_policy import (
    LevelIo,
    decide_io,
    io_knobs,
    misordered,
    split_limits,
    tighter,
)
from pykatalyst.api import names
from pykatalyst.cluster.clock import VirtualClock
from tests.fixtures.fake_node import FakePod, make_kubelet_tree

LADDER = (
    names.QOS_RECLAIMED_CORES,
    names.QOS_SHARED_CORES,
    names.QOS_DEDICATED_CORES,
    names.QOS_SYSTEM_CORES,
)
devices = st.tuples(st.integers(0, 259), st.integers(0, 255)).map(lambda t: f"{t[0]}:{t[1]}")
limit_values = st.none() | st.integers(1, 1 << 40)
limits = st.lists(
    st.builds(IoLimit, devices, limit_values, limit_values, limit_values, limit_values),
    max_size=4,
    unique_by=lambda lim: lim.device,
).map(IoLimits.of)


def _lines(files: tuple[cgroupfs.KnobFile, ...], name: str) -> dict[str, str]:
    """What a kernel keeps after the writes: the last line per device."""
    out: dict[str, str] = {}
    for f in files:
        if f.name == name:
            dev, _, rest = f.content.partition(" ")
            out[dev] = rest
    return out


@given(new=limits, old=limits)
def test_v2_io_max_writes_take_any_limits_to_any_others(new: IoLimits, old: IoLimits) -> None:
    kept = {lim.device: lim for lim in old.devices}
    for dev, rest in _lines(cgroupfs.render_io_max(new, old, 2), "io.max").items():
        parsed = cgroupfs.parse_io_max(f"{dev} {rest}")  # all max: the device is unlimited
        kept.pop(dev, None)
        kept.update({lim.device: lim for lim in parsed.devices})
    assert IoLimits.of(list(kept.values())) == new


@given(new=limits, old=limits)
def test_v1_throttle_writes_take_any_limits_to_any_others(new: IoLimits, old: IoLimits) -> None:
    files = dict.fromkeys(n for n in cgroupfs.knob_files(Knob.IO_MAX, 1))
    state = {
        n: {lim.device: getattr(lim, k) for lim in old.devices if getattr(lim, k) is not None}
        for n, k in zip(files, ("rbps", "wbps", "riops", "wiops"), strict=True)
    }
    for f in cgroupfs.render_io_max(new, old, 1):
        dev, value = f.content.split()
        if int(value) == 0:
            state[f.name].pop(dev, None)  # the kernel drops a rule set to 0
        else:
            state[f.name][dev] = int(value)
    texts = {n: "".join(f"{d} {v}\n" for d, v in state[n].items()) for n in files}
    assert cgroupfs.parse_knob(Knob.IO_MAX, 1, texts.get) == new


def test_io_files_on_each_cgroup_version() -> None:
    assert cgroupfs.render_knob(Knob.IO_WEIGHT, 50, 2)[0].content == "default 50"
    assert cgroupfs.render_knob(Knob.IO_WEIGHT, 5000, 1)[0].content == "1000"  # bfq's max
    assert cgroupfs.knob_files(Knob.IO_LATENCY, 1) == ()  # v2 only
    lat = IoLatency.of({"8:0": 5000})
    assert [f.content for f in cgroupfs.render_knob(Knob.IO_LATENCY, lat, 2)] == ["8:0 target=5000"]
    cleared = cgroupfs.render_io_latency(IoLatency(), lat, 2)
    assert [f.content for f in cleared] == ["8:0 target=max"]
    assert cgroupfs.parse_io_latency("8:0 target=5000\n") == lat
    assert cgroupfs.parse_io_weight("default 100\n8:0 300\n") == 100
    assert cgroupfs.values_equal(Knob.IO_WEIGHT, 2000, 1000, 1, 4096)  # both 1000 on bfq


@pytest.mark.parametrize(
    ("knob", "value", "accepted"),
    [
        (Knob.IO_WEIGHT, 0, "[1, 10000]"),
        (Knob.IO_MAX, IoLimits((IoLimit("sda", 1),)), "MAJ:MIN"),
        (Knob.IO_MAX, IoLimits((IoLimit("8:0", 0),)), "ints > 0"),
        (Knob.IO_LATENCY, IoLatency((("8:0", 0),)), "targets in µs > 0"),
        (Knob.OOM_SCORE_ADJ, 1001, "[-1000, 1000]"),
        (Knob.MEMORY_LOW, -1, ">= 0"),
    ],
)
def test_bad_values_are_refused_naming_what_is_accepted(
    knob: Knob, value: object, accepted: str
) -> None:
    problem = cgroupfs.check_knob_value(knob, value)  # type: ignore[arg-type]
    assert problem is not None and knob.value in problem and accepted in problem


# -- policy --------------------------------------------------------------------------------


@given(st.dictionaries(st.sampled_from(LADDER), st.integers(1, 10000)))
def test_a_weight_ladder_is_misordered_exactly_when_a_lower_level_outweighs_a_higher(
    weights: dict[str, int],
) -> None:
    levels = {lv: LevelIo(weight=w) for lv, w in weights.items()}
    bad = misordered(levels, LADDER)
    known = [weights[lv] for lv in LADDER if lv in weights]
    assert (not bad) == (known == sorted(known))


def test_each_pod_gets_its_levels_knobs_and_the_root_the_tiers() -> None:
    lim = IoLimit("7:0", wbps=10 << 20)
    levels = {
        names.QOS_RECLAIMED_CORES: LevelIo(weight=10, limits=(lim,)),
        names.QOS_SHARED_CORES: LevelIo(weight=500, latency_us={"7:0": 5000}),
    }
    pods = [
        ("default/batch", names.QOS_RECLAIMED_CORES, "kubepods/besteffort/pod1", ("c1",)),
        ("default/web", names.QOS_SHARED_CORES, "kubepods/burstable/pod2", ("c2",)),
        ("default/db", names.QOS_DEDICATED_CORES, "kubepods/pod3", ("c3",)),
    ]
    root_io = LevelIo(weight=10, limits=(IoLimit("7:0", wbps=20 << 20),))
    desired, terms = decide_io(pods, "kubepods/besteffort", levels, root_io, 2)
    assert desired["kubepods/besteffort/pod1"] == {
        Knob.IO_WEIGHT: 10,
        Knob.IO_MAX: IoLimits((lim,)),
    }
    assert desired["kubepods/burstable/pod2"] == {
        Knob.IO_WEIGHT: 500,
        Knob.IO_LATENCY: IoLatency((("7:0", 5000),)),
    }
    assert "kubepods/pod3" not in desired  # no settings for its level: left alone
    assert desired["kubepods/besteffort"][Knob.IO_MAX] == IoLimits.of(root_io.limits)
    assert terms["default/batch"]["io.max"][0]["wbps"] == 10 << 20
    # io.latency does not exist on cgroup v1
    assert Knob.IO_LATENCY not in io_knobs(levels[names.QOS_SHARED_CORES], 1)
    # v1 throttling binds only the cgroup a limit is on: the limits go on the containers,
    # and a limit on the root would bind nobody
    v1, v1_terms = decide_io(pods, "kubepods/besteffort", levels, root_io, 1)
    assert v1["kubepods/besteffort/pod1"] == {Knob.IO_WEIGHT: 10}
    assert v1["c1"] == {Knob.IO_MAX: IoLimits((lim,))}
    assert v1["kubepods/besteffort"] == {Knob.IO_WEIGHT: 10}
    assert "not hierarchical" in v1_terms["kubepods/besteffort"]["io.max"]


def test_on_v1_the_reclaimed_roots_cap_is_split_over_the_containers_below_it() -> None:
    """v1 throttling binds only the cgroup a limit is on: the root's cap holds only if the
    containers below it share it, each within its own level's limit too."""
    mib = 1 << 20
    root = "kubepods/besteffort"
    levels = {names.QOS_RECLAIMED_CORES: LevelIo(limits=(IoLimit("7:0", wbps=8 * mib),))}
    root_io = LevelIo(limits=(IoLimit("7:0", wbps=30 * mib, wiops=90), IoLimit("8:0", rbps=6)))
    pods = [
        ("default/a", names.QOS_RECLAIMED_CORES, f"{root}/poda", ("a1", "a2")),
        ("default/b", names.QOS_RECLAIMED_CORES, f"{root}/podb", ("b1",)),
        ("default/web", names.QOS_SHARED_CORES, "kubepods/burstable/podw", ("w1",)),
    ]
    desired, terms = decide_io(pods, root, levels, root_io, 1)
    each = IoLimits((IoLimit("7:0", wbps=8 * mib, wiops=30), IoLimit("8:0", rbps=2)))
    for cg in ("a1", "a2", "b1"):
        assert desired[cg] == {Knob.IO_MAX: each}  # 30Mi/3 = 10Mi > its level's 8Mi
    assert "w1" not in desired and "kubepods/burstable/podw" not in desired  # not below
    assert root not in desired
    assert "3 containers" in terms[root]["io.max"]
    assert terms["default/b"]["root_share"] == "1/3 of the reclaimed root's limits"
    # a looser level limit: the root's share binds
    loose = {names.QOS_RECLAIMED_CORES: LevelIo(limits=(IoLimit("7:0", wbps=20 * mib),))}
    desired, _ = decide_io(pods, root, loose, root_io, 1)
    assert desired["b1"][Knob.IO_MAX] == IoLimits(
        (IoLimit("7:0", wbps=10 * mib, wiops=30), IoLimit("8:0", rbps=2))
    )
    # no level settings at all: the share alone, and still nothing on the root
    desired, _ = decide_io(pods[1:], root, {}, root_io, 1)
    assert desired == {"b1": {Knob.IO_MAX: IoLimits.of(root_io.limits)}}
    # nobody below the root: nothing to split, and the terms say so
    desired, terms = decide_io(pods[2:], root, levels, root_io, 1)
    assert desired == {} and "no container" in terms[root]["io.max"]
    # v2 keeps the cap on the root, where the kernel applies it to the whole subtree
    v2, _ = decide_io(pods, root, levels, root_io, 2)
    assert v2[root] == {Knob.IO_MAX: IoLimits.of(root_io.limits)}
    assert v2[f"{root}/podb"][Knob.IO_MAX] == IoLimits.of(levels[pods[0][1]].limits)


@given(limits, st.integers(1, 64))
def test_split_limits_never_add_up_to_more_than_the_whole(whole: IoLimits, n: int) -> None:
    parts = split_limits(whole.devices, n)
    for lim, part in zip(whole.devices, parts, strict=True):
        for f in ("rbps", "wbps", "riops", "wiops"):
            total, one = getattr(lim, f), getattr(part, f)
            assert (one is None) == (total is None)
            if total is not None:
                assert one >= 1 and (n * one <= total or one == 1)


def test_split_limits_refuses_a_count_below_one() -> None:
    with pytest.raises(ValueError, match="accepted: an int >= 1"):
        split_limits((IoLimit("7:0", wbps=1),), 0)


@given(limits, limits)
def test_tighter_takes_the_smaller_figure_per_device(a: IoLimits, b: IoLimits) -> None:
    both = {lim.device: lim for lim in tighter(a.devices, b.devices).devices}
    assert set(both) == {lim.device for lim in (*a.devices, *b.devices)}
    for src in (a, b):
        for lim in src.devices:
            for f in ("rbps", "wbps", "riops", "wiops"):
                mine, got = getattr(lim, f), getattr(both[lim.device], f)
                assert mine is None or (got is not None and got <= mine)


def test_the_io_config_takes_quantities_and_durations_and_refuses_mistakes() -> None:
    cfg = AgentConfig.model_validate(
        {
            "io": {
                "levels": {
                    "reclaimed_cores": {
                        "weight": 10,
                        "limits": [{"device": "7:0", "write_bps": "50Mi", "read_iops": 100}],
                    },
                    "shared_cores": {
                        "weight": 500,
                        "latency": [{"device": "8:0", "target": "5ms"}],
                    },
                },
                "reclaimed_root": {"limits": [{"device": "7:0", "write_bps": "100Mi"}]},
            }
        }
    )
    got = cfg.io.level_values()
    assert got["reclaimed_cores"].limits == (IoLimit("7:0", wbps=50 << 20, riops=100),)
    assert got["shared_cores"].latency_us == {"8:0": 5000}
    for bad, where in [
        ({"levels": {"reclaimed_cores": {"weight": 900}, "shared_cores": {"weight": 100}}}, ""),
        ({"levels": {"besteffort": {}}}, "unknown QoS level"),
        ({"levels": {"shared_cores": {"limits": [{"device": "sda"}]}}}, "MAJ:MIN"),
        ({"levels": {"shared_cores": {"limits": [{"device": "8:0", "read_bps": 0}]}}}, "bytes"),
        ({"levels": {"shared_cores": {"weight": 20000}}}, "10000"),
        ({"levels": {"shared_cores": {"latency": [{"device": "8:0", "target": "x"}]}}}, ""),
    ]:
        with pytest.raises(ValidationError) as err:
            AgentConfig.model_validate({"io": bad})
        assert "io." in str(err.value) and where in str(err.value)


# -- on cgroup files -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_io_knobs_land_in_the_files_and_read_back(tmp_path: Path, version: int) -> None:
    node = make_kubelet_tree(tmp_path, [FakePod("p1", "besteffort")], version=version)
    host = node.host()
    pod = node.pod_cgroup("p1")
    lim = IoLimits.of([IoLimit("7:0", rbps=1 << 20, wiops=50)])
    enforcer = Enforcer(host, tmp_path / "ckpt.json", VirtualClock(0))
    report = enforcer.apply({pod: {Knob.IO_WEIGHT: 10, Knob.IO_MAX: lim}})
    assert report.ok, report.failed
    knobs = host.read_knobs(pod)
    assert knobs[Knob.IO_WEIGHT] == 10 and knobs[Knob.IO_MAX] == lim
    if version == 2:
        assert node.read(pod, "io.max") == "7:0 rbps=1048576 wbps=max riops=max wiops=50"
        assert node.read(pod, "io.weight") == "default 10"
    else:
        assert node.read(pod, "blkio.throttle.read_bps_device") == "7:0 1048576"
        assert node.read(pod, "blkio.throttle.write_iops_device") == "7:0 50"
        assert node.read(pod, "blkio.bfq.weight") == "10"
    assert not enforcer.apply({pod: {Knob.IO_WEIGHT: 10, Knob.IO_MAX: lim}}).planned
    # the checkpoint keeps io limits across a restart
    again = Enforcer(host, tmp_path / "ckpt.json", VirtualClock(0))
    assert again.desired == {pod: {Knob.IO_WEIGHT: 10, Knob.IO_MAX: lim}}


def test_checkpoint_encoding_round_trips_io_values() -> None:
    state = {
        "a": {
            Knob.IO_MAX: IoLimits.of([IoLimit("8:0", wbps=5), IoLimit("7:1", riops=3)]),
            Knob.IO_LATENCY: IoLatency.of({"8:0": 250}),
        }
    }
    assert decode_desired(encode_desired(state), cgroupfs.check_knob_value) == state


def test_a_latency_target_on_cgroup_v1_is_unsupported_and_said_once(tmp_path: Path) -> None:
    node = make_kubelet_tree(tmp_path, [FakePod("p1", "burstable")], version=1)
    host = node.host()
    pod = node.pod_cgroup("p1")
    result = host.apply([KnobWrite(pod, Knob.IO_LATENCY, IoLatency.of({"8:0": 100}))])
    assert result.failed and result.failed[0].unsupported


@pytest.mark.parametrize(
    "raw",
    [
        {"a": {"io.max": "7:0 wbps=1"}},
        {"a": {"io.latency": {"8:0": "5ms"}}},
        {"a": {"io.max": [{"dev": 1}]}},
    ],
)
def test_a_checkpoint_with_unreadable_io_values_is_refused(raw: dict[str, object]) -> None:
    with pytest.raises(CheckpointError, match="io\\."):
        decode_desired(raw, cgroupfs.check_knob_value)
