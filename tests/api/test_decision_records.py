"""Decision records: the one shape the agent and the backstop write and `katalyst explain`
reads back, unchanged through a JSON-lines file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api.records import (
    DecisionLog,
    DecisionRecord,
    RankEntry,
    append_records,
    read_records,
)

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
key = st.text("abcdefgh-/", max_size=12)
# Figures are written to a thousandth, so generate figures that are already there.
figure = st.integers(-(10**9), 10**9).map(lambda n: n / 1000)
ranks = st.builds(
    RankEntry,
    pod=key,
    qos_level=text,
    priority=st.integers(-(2**31), 2**31),
    evict_score=figure,
    usage=figure,
)
records = st.builds(
    DecisionRecord,
    time=figure,
    node=key,
    kind=text,
    plugin=text,
    reason=text,
    message=text,
    object_kind=st.sampled_from(["Pod", "Node"]),
    object_key=key,
    object_uid=key,
    signal=text,
    observed=st.none() | figure,
    threshold=st.none() | figure,
    operator=st.sampled_from(["", ">", ">=", "<"]),
    unit=text,
    window=text,
    grace_period_s=st.none() | figure,
    met=text,
    condition=text,
    ranking=st.lists(ranks, max_size=3).map(tuple),
    dry_run=st.booleans(),
)


@settings(max_examples=150)
@given(records)
def test_a_record_survives_its_json_form(record: DecisionRecord) -> None:
    line = json.dumps(record.to_json(), sort_keys=True)
    assert DecisionRecord.from_json(json.loads(line)) == record


@settings(max_examples=30)
@given(st.lists(records, max_size=5))
def test_a_records_file_reads_back_in_order(
    tmp_path_factory: pytest.TempPathFactory, batch: list[DecisionRecord]
) -> None:
    path = tmp_path_factory.mktemp("records") / "r.jsonl"
    path.touch()
    append_records(path, batch[:2])
    append_records(path, batch[2:])
    assert read_records(path) == batch


def test_a_bad_line_is_refused_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    good = DecisionRecord(1.0, "n1", "eviction", "p", "r", "m", object_key="default/a")
    append_records(path, [good])
    with path.open("a") as fh:
        fh.write("\n[1, 2]\n")
    with pytest.raises(ValueError, match=r"r\.jsonl:3: a record must be a JSON object"):
        read_records(path)


def test_the_log_keeps_the_latest_in_memory_and_everything_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    log = DecisionLog(limit=2, path=path)
    made = [
        DecisionRecord(float(i), f"n{i % 2}", "eviction", "p", "r", "m", object_key=f"ns/p{i}")
        for i in range(3)
    ]
    log.add(made)
    assert list(log) == made[1:] and len(log) == 2
    assert read_records(path) == made
    assert log.records(node="n1") == [made[1]]
    assert log.records(pod="ns/p2") == [made[2]]
