"""The tc and nft commands of an egress shape, and the shaper running them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.config import NetworkConfig
from pykatalyst.agent.host.base import NetMatch, NetShape
from pykatalyst.agent.host.netshape import NetShaper, nft_script, tc_commands, tc_handle
from pykatalyst.agent.net_policy import NetPod, decide
from pykatalyst.api import names

CFG = NetworkConfig(enabled=True, device="eth0", link_mbit=100)
PODS = [
    NetPod("a", names.QOS_SHARED_CORES, ("kubepods.slice/kubepods-burstable.slice/p1",)),
    NetPod("b", names.QOS_RECLAIMED_CORES, ("kubepods.slice/kubepods-besteffort.slice/p2",)),
]


def shape(version: int = 2) -> NetShape:
    s = decide(CFG, PODS, version).shape
    assert s is not None
    return s


@given(st.integers(1, 0xFFFF), st.integers(0, 0xFFFF))
def test_class_handles_read_back_as_tc_writes_them(major: int, minor: int) -> None:
    text = tc_handle(major << 16 | minor)
    a, b = text.split(":")
    assert (int(a, 16), int(b, 16)) == (major, minor)


def test_tc_builds_one_root_class_and_one_class_per_level() -> None:
    cmds = tc_commands(shape())
    assert cmds[0] == [
        *("tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb"),
        *("default", "30"),
    ]
    assert cmds[1][-4:] == ["rate", "94000000bit", "ceil", "94000000bit"]
    by_class = {c[c.index("classid") + 1]: c for c in cmds[2:]}
    assert set(by_class) == {"1:10", "1:20", "1:30", "1:40"}
    reclaimed = by_class["1:40"]
    assert reclaimed[reclaimed.index("prio") + 1] == "7"
    assert reclaimed[reclaimed.index("rate") + 1] == "4700000bit"  # 5 % of 94 Mbit/s


def test_nft_v2_rules_match_each_pods_cgroup_at_its_depth() -> None:
    text = nft_script(shape())
    assert text.startswith("table inet pykatalyst\ndelete table inet pykatalyst\n")
    assert (
        'socket cgroupv2 level 3 "kubepods.slice/kubepods-besteffort.slice/p2" '
        "meta priority set 1:40"
    ) in text
    assert "hook output" in text


def test_nft_v1_rules_match_the_class_ids_the_agent_writes() -> None:
    text = nft_script(shape(version=1))
    assert "meta cgroup 0x10040 meta priority set 1:40" in text
    assert "socket cgroupv2" not in text


def test_a_deeper_cgroups_rule_comes_after_its_ancestors() -> None:
    s = NetShape(
        "eth0",
        1000,
        0x10030,
        shape().classes,
        (NetMatch(0x10040, "a/b/c"), NetMatch(0x10030, "a")),
    )
    text = nft_script(s)
    assert text.index('"a"') < text.index('"a/b/c"')


def test_a_cgroup_path_that_would_break_the_rules_is_refused() -> None:
    s = NetShape("eth0", 1000, 0x10030, shape().classes, (NetMatch(0x10040, 'x" accept'),))
    with pytest.raises(ValueError, match="cannot go into an nft rule"):
        nft_script(s)


def test_forwarded_traffic_is_matched_by_source_in_a_forward_chain() -> None:
    matches = (NetMatch(0x10040, source="10.4.0.9"), NetMatch(0x10030, source="fd00::7"))
    text = nft_script(NetShape("eth0", 1000, 0x10030, shape().classes, matches))
    chain = text[text.index("chain forwarded") :]
    assert "type filter hook forward priority 0; policy accept;" in chain
    assert "ip saddr 10.4.0.9 meta priority set 1:40" in chain
    assert "ip6 saddr fd00::7 meta priority set 1:30" in chain
    assert "saddr" not in text[: text.index("chain forwarded")]


def test_no_forward_chain_without_pods_in_their_own_namespace() -> None:
    assert "forward" not in nft_script(shape())


@pytest.mark.parametrize("bad", ["10.4.0.9; accept", "10.4.0.300", "", "eth0"])
def test_a_source_that_is_not_an_address_is_refused(bad: str) -> None:
    s = NetShape("eth0", 1000, 0x10030, shape().classes, (NetMatch(0x10040, source=bad),))
    with pytest.raises(ValueError, match="is not an IPv4 or IPv6 address"):
        nft_script(s)


class Recorder:
    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[list[str], str | None]] = []
        self.fail = dict(fail or {})  # a word in the command -> how many times it fails

    def __call__(self, argv: Sequence[str], stdin: str | None) -> tuple[int, str]:
        self.calls.append((list(argv), stdin))
        for word, times in self.fail.items():
            if word in argv and times > 0:
                self.fail[word] = times - 1
                return 2, f"{word}: refused"
        return 0, ""


def tools(name: str) -> str | None:
    return f"/usr/sbin/{name}"


def test_shaper_binds_the_unified_hierarchy_for_nft_where_it_is_not_at_sys_fs_cgroup() -> None:
    run = Recorder()
    shaper = NetShaper(run, netns="tx", cgroup2_mount=Path("/sys/fs/cgroup/unified"), which=tools)
    assert shaper.apply(shape()).ok
    nft = [argv for argv, stdin in run.calls if stdin is not None]
    assert len(nft) == 1
    assert nft[0][:2] == ["unshare", "-m"]
    assert "/sys/fs/cgroup/unified" in nft[0]
    assert nft[0][-5:] == ["nsenter", "--net=/run/netns/tx", "nft", "-f", "-"]
    tc = [argv for argv, stdin in run.calls if stdin is None]
    assert all(a[:2] == ["nsenter", "--net=/run/netns/tx"] for a in tc)


def test_shaper_starts_the_device_over_when_htb_refuses_to_change() -> None:
    run = Recorder(fail={"replace": 1})
    result = NetShaper(run, which=tools).apply(shape())
    assert result.ok
    assert result.commands[:3] == (
        "tc qdisc replace dev eth0 root handle 1: htb default 30",
        "tc qdisc del dev eth0 root",
        "tc qdisc replace dev eth0 root handle 1: htb default 30",
    )


def test_shaper_names_the_command_that_failed_and_stops() -> None:
    run = Recorder(fail={"nft": 5})
    result = NetShaper(run, which=tools).apply(shape())
    assert not result.ok and not result.unsupported
    assert result.error == "nft -f -: exit 2: nft: refused"


def test_shaper_without_tools_says_what_to_install() -> None:
    result = NetShaper(Recorder(), which=lambda name: None).apply(shape())
    assert result.unsupported and "install iproute2, nftables" in result.error


def test_removing_takes_down_the_device_it_shaped_and_the_table() -> None:
    run = Recorder()
    shaper = NetShaper(run, which=tools)
    shaper.apply(shape())
    run.calls.clear()
    assert shaper.apply(None).ok
    assert run.calls[0][0] == ["tc", "qdisc", "del", "dev", "eth0", "root"]
    assert run.calls[1][1] == nft_script(None)
