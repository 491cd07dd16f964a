"""`katalyst recommend`: the usage-file form, the Prometheus form (a local fake), bad input."""

from __future__ import annotations

import gzip
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from pykatalyst.cli.main import app
from pykatalyst.recommend.prometheus import (
    MAX_POINTS,
    PrometheusClient,
    PrometheusError,
    check_base_filter,
    deployment_pod_pattern,
    read_workload_usage,
)

runner = CliRunner()
T0 = 1_700_000_000
MIB = 1024 * 1024


def usage_file(path: Path, days: float = 3) -> Path:
    rng = np.random.default_rng(3)
    with gzip.open(path, "wt") as f:
        f.write("workload,container,timestamp,cpu,memory\n")
        for i in range(int(days * 288)):
            for name, level in (("web", 1.0), ("db", 0.25)):
                cpu = level * (1 + 0.1 * rng.standard_normal())
                f.write(f"{name},main,{T0 + 300 * i},{max(cpu, 0):.4f},{400 * MIB}\n")
    return path


def test_usage_json_for_both_recommenders(tmp_path: Path) -> None:
    path = usage_file(tmp_path / "u.csv.gz")
    for name in ("pykatalyst", "katalyst"):
        result = runner.invoke(
            app, ["recommend", "--usage", str(path), "--recommender", name, "-o", "json"]
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        rows = {r["workload"]: r for r in data["recommendations"]}
        assert set(rows) == {"web", "db"}
        web = rows["web"]
        assert {
            "workload",
            "container",
            "cpu_request",
            "memory_request",
            "cpu_limit",
            "memory_limit",
            "terms",
        } <= set(web)
        assert 1.0 < web["cpu_request"] < 2.0
        assert rows["db"]["cpu_request"] < web["cpu_request"]
        assert web["memory_request"] >= 400 * MIB
        assert web["terms"]["cpu"]["samples"] > 0


def test_at_uses_only_earlier_samples(tmp_path: Path) -> None:
    path = usage_file(tmp_path / "u.csv.gz")
    early = T0 + 12 * 3600  # half a day: too little for Katalyst's 24 h span
    result = runner.invoke(
        app,
        [
            "recommend",
            "--usage",
            str(path),
            "--recommender",
            "katalyst",
            "--at",
            str(early),
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)["recommendations"][0]
    assert row["cpu_request"] is None
    assert row["not_ready"]["reason"] == "RecommendationNotReady"


def test_table_explains(tmp_path: Path) -> None:
    result = runner.invoke(app, ["recommend", "--usage", str(usage_file(tmp_path / "u.gz"))])
    assert result.exit_code == 0, result.output
    assert "web" in result.output and "half-life" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--recommender", "nope"], "--recommender"),
        ([], "exactly one of"),
        (["--usage", "/does/not/exist"], "not a readable file"),
        (["--from-prometheus", "http://127.0.0.1:9"], "--workload"),
    ],
)
def test_bad_arguments(args: list[str], message: str, tmp_path: Path) -> None:
    if args[:1] == ["--recommender"]:
        args = ["--usage", str(usage_file(tmp_path / "u.gz", 0.1)), *args]
    result = runner.invoke(app, ["recommend", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_bad_file_names_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("workload,container,timestamp,cpu,memory\nw,c,1,0.5,1\nw,c,2,-1,1\n")
    result = runner.invoke(app, ["recommend", "--usage", str(path)])
    assert result.exit_code == 2
    assert "bad.csv:3: field cpu '-1'" in result.output


# ----------------------------------------------------------------------------- Prometheus


class FakePrometheus(BaseHTTPRequestHandler):
    """Answers query_range with two pods of one container, 1-minute points."""

    queries: list[dict[str, str]] = []  # noqa: RUF012 - shared on purpose, reset per test
    mode = "ok"

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        type(self).queries.append(q)
        if self.mode == "garbage":
            self._send(200, b"<html>not prometheus</html>")
            return
        if self.mode == "error":
            self._send(400, json.dumps({"status": "error", "error": "parse error"}).encode())
            return
        start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
        times = start + step * np.arange(round((end - start) / step) + 1)
        is_cpu = q["query"].startswith("rate(")
        result = []
        for pod, scale in (("web-5d8f7c9b6-abcde", 1.0), ("web-5d8f7c9b6-fghij", 2.0)):
            value = 0.5 * scale if is_cpu else 300 * MIB * scale
            result.append(
                {
                    "metric": {"pod": pod, "container": "app", "namespace": "shop"},
                    "values": [[t, str(value)] for t in times],
                }
            )
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        self._send(200, json.dumps(body).encode())

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    FakePrometheus.queries = []
    FakePrometheus.mode = "ok"
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_queries_are_katalysts_and_split(prometheus: str) -> None:
    client = PrometheusClient(prometheus, timeout_s=10)
    end = T0 + 9 * 86400.0
    usage = read_workload_usage(client, "shop", "web", T0, end)
    assert set(usage) == {"app"}
    series = usage["app"]
    # Two pods merged: two samples per minute.
    assert len(series) == 2 * (9 * 1440 + 1)
    assert sorted(set(series.cpu.tolist())) == [0.5, 1.0]
    cpu_queries = [q for q in FakePrometheus.queries if q["query"].startswith("rate(")]
    assert len(cpu_queries) == 2  # 12,961 points do not fit one 11,000-point query
    for q in cpu_queries:
        points = (float(q["end"]) - float(q["start"])) / float(q["step"]) + 1
        assert points <= MAX_POINTS
    query = cpu_queries[0]["query"]
    assert query.startswith("rate(container_cpu_usage_seconds_total{")
    assert query.endswith("[30s])")
    assert 'container!="POD"' in query and 'namespace="shop"' in query
    assert f'pod=~"{deployment_pod_pattern("web")}"' in query
    mem_query = next(q for q in FakePrometheus.queries if not q["query"].startswith("rate("))
    assert mem_query["query"].startswith("container_memory_working_set_bytes{")


@pytest.mark.parametrize(
    "history", [["--history", "72h"], ["--history-days", "3"]], ids=["go", "old-days"]
)
def test_prometheus_form_of_the_command(prometheus: str, history: list[str]) -> None:
    at = T0 + 3 * 86400
    result = runner.invoke(
        app,
        [
            "recommend",
            "--from-prometheus",
            prometheus,
            "--namespace",
            "shop",
            "--workload",
            "web",
            "--at",
            str(at),
            *history,
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["recommendations"][0]
    assert (row["workload"], row["container"]) == ("web", "app")
    assert 1.0 <= row["cpu_request"] <= 1.5
    # three days of history read, whichever spelling said so
    assert min(float(q["start"]) for q in FakePrometheus.queries) == pytest.approx(T0)
    warned = "--history-days is deprecated" in result.stderr
    assert warned is (history[0] == "--history-days")
    if warned:
        assert "use --history DURATION" in result.stderr


@pytest.mark.parametrize(
    ("history", "message"),
    [
        (["--history", "8d"], "--history"),
        (["--history", "0s"], "--history: accepted: a duration above 0"),
        (["--history-days", "-1"], "--history-days: accepted: a duration above 0"),
    ],
)
def test_a_bad_history_is_refused_naming_the_option(
    prometheus: str, history: list[str], message: str
) -> None:
    args = ["recommend", "--from-prometheus", prometheus, "--workload", "web", *history]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert FakePrometheus.queries == []  # nothing read


@pytest.mark.parametrize("mode", ["garbage", "error"])
def test_prometheus_answering_garbage_is_a_clear_error(prometheus: str, mode: str) -> None:
    FakePrometheus.mode = mode
    with pytest.raises(PrometheusError):
        read_workload_usage(PrometheusClient(prometheus, 10), "shop", "web", T0, T0 + 3600)
    result = runner.invoke(app, ["recommend", "--from-prometheus", prometheus, "--workload", "web"])
    assert result.exit_code == 1
    assert "Prometheus" in result.output


def test_prometheus_unreachable() -> None:
    client = PrometheusClient("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(PrometheusError, match="cannot reach Prometheus"):
        read_workload_usage(client, "shop", "web", T0, T0 + 3600)


def test_the_base_filter_narrows_every_query_as_katalysts_does(prometheus: str) -> None:
    client = PrometheusClient(prometheus, timeout_s=10)
    usage = read_workload_usage(
        client, "shop", "web", T0, T0 + 3600, base_filter=' cluster="c1", group=~"Kat.*" '
    )
    assert set(usage) == {"app"}
    assert FakePrometheus.queries
    for q in FakePrometheus.queries:
        selector = q["query"].split("{", 1)[1].rsplit("}", 1)[0]
        assert selector.endswith(',cluster="c1", group=~"Kat.*"'), selector


@pytest.mark.parametrize(
    "text",
    ["cluster", 'cluster="c1" group="g"', "cluster='c1'", '1abc="x"', 'a="x"}', 'a=="x"', ",,"],
)
def test_a_base_filter_that_is_not_label_matchers_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="PromQL label matchers"):
        check_base_filter(text)


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True),
            st.sampled_from(["=", "!=", "=~", "!~"]),
            st.text(st.characters(blacklist_characters='"\\', codec="utf-8"), max_size=8),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_list_of_label_matchers_is_accepted_as_written(
    matchers: list[tuple[str, str, str]],
) -> None:
    text = ",".join(f'{name}{op}"{value}"' for name, op, value in matchers)
    assert check_base_filter(text) == text


def test_the_controller_refuses_a_bad_base_filter_naming_the_flag() -> None:
    result = runner.invoke(
        app,
        [
            "controller",
            "--embedded",
            "--controllers",
            "resourcerecommender",
            "--resourcerecommend-prometheus-promql-base-filter",
            "cluster=c1",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--resourcerecommend-prometheus-promql-base-filter" in result.output
    assert "PromQL label matchers" in result.output


_NAME = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
_GO_ESCAPES = set("abfnrtv\\'\"xuU01234567")


def _promql_strings(query: str) -> list[str]:
    """The double-quoted strings of a query, unquoted as PromQL (Go) does; an escape Go
    does not know fails the test, as PromQL's parser refuses it."""
    out, i = [], 0
    while (start := query.find('"', i)) != -1:
        j, chars = start + 1, []
        while query[j] != '"':
            if query[j] == "\\":
                assert query[j + 1] in _GO_ESCAPES, f"unknown escape \\{query[j + 1]} in {query}"
                chars.append(query[j + 1] if query[j + 1] in "\\\"'" else query[j : j + 2])
                j += 2
            else:
                chars.append(query[j])
                j += 1
        out.append("".join(chars))
        i = j + 1
    return out


@given(_NAME, st.sampled_from(["Deployment", "StatefulSet"]))
def test_the_pod_pattern_is_valid_promql_and_matches_only_the_workloads_pods(
    name: str, kind: str
) -> None:
    import re

    from pykatalyst.recommend.prometheus import cpu_query, workload_pod_pattern

    query = cpu_query("shop", workload_pod_pattern(name, kind), "app")
    pattern = next(s for s in _promql_strings(query) if s.startswith("^"))
    assert re.fullmatch(pattern, f"{name}-7d9f8c6b5-x2k9q")
    other = name.replace(".", "x") if "." in name else f"{name}z"
    assert not re.fullmatch(pattern, f"{other}-7d9f8c6b5-x2k9q")


def test_a_hyphenated_name_is_written_as_katalyst_writes_it() -> None:
    from pykatalyst.recommend.prometheus import deployment_pod_pattern

    # Katalyst's quick start: shared-normal-deployment (no `\-`, which PromQL refuses)
    assert deployment_pod_pattern("shared-normal-deployment") == (
        "^shared-normal-deployment-[a-z0-9]+-[a-z0-9]{5}$"
    )
    assert deployment_pod_pattern("web.v2") == "^web[.]v2-[a-z0-9]+-[a-z0-9]{5}$"


def _prometheus_grid(data_from: float) -> Any:
    """A fetch that answers a range query as Prometheus does: start and end taken to whole
    milliseconds, points at start + k·step up to end, each point present from `data_from`
    on (one pod, one container)."""

    def fetch(url: str, timeout: float) -> bytes:
        q = {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(url).query).items()}
        start, end = round(float(q["start"]) * 1000), round(float(q["end"]) * 1000)
        step = round(float(q["step"]) * 1000)
        times = [t / 1000 for t in range(start, end + 1, step) if t / 1000 >= data_from]
        value = "0.5" if q["query"].startswith("rate(") else str(300 * MIB)
        result = [
            {
                "metric": {"pod": "web-5d8f7c9b6-abcde", "container": "app", "namespace": "shop"},
                "values": [[t, value] for t in times],
            }
        ]
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return json.dumps(body).encode()

    return fetch


@given(st.floats(0, 86_400, allow_nan=False))
def test_the_point_at_a_runs_own_time_is_inside_that_run(offset: float) -> None:
    """A ResourceRecommend's first run reads from 25 h before its task start to the start
    itself, at a 1-minute step: the grid's last point falls at the start, and it counts
    (with data for just the last two points, a 60 s readiness span is met) whatever the
    start's fraction of a millisecond."""
    from pykatalyst.recommend.katalyst import KatalystRecommender, KatalystSettings

    start = T0 + offset
    fetch = _prometheus_grid(start - 61.0)
    client = PrometheusClient("http://prom:9090", 1.0, fetch)
    usage = read_workload_usage(client, "shop", "web", start - 25 * 3600, start)
    series = usage["app"]
    assert len(series) == 2
    assert float(series.timestamps[-1]) <= start
    settings = KatalystSettings(task_start_s=start, min_span_s=60.0)
    got = KatalystRecommender().recommend(series, start, settings)
    assert got.cpu_request == pytest.approx(0.5 * 1.3, abs=0.02)
