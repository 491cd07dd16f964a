"""The README's first agent command ("Using it"), run as written on this machine: what a
newcomer sees is colocation working — reclaim on, the batch pod in the reclaim pool — and
no pod evicted."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _readme_agent_line() -> tuple[list[str], str]:
    """The first `katalyst agent` command of the README's "Using it" block (continuation
    lines joined): its arguments after `katalyst`, and its comment."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Using it", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines: list[str] = []
    for raw in block.splitlines():
        if lines and lines[-1].rstrip().endswith("\\"):
            lines[-1] = lines[-1].rstrip()[:-1] + " " + raw.strip()
        else:
            lines.append(raw.strip())
    line = next(x for x in lines if x.startswith("katalyst agent "))
    command, _, comment = line.partition("#")
    words = shlex.split(command)
    assert words[0] == "katalyst"
    return words[1:], comment.strip()


def test_the_line_is_a_dry_run_on_the_embedded_cluster_with_the_example_pods() -> None:
    args, comment = _readme_agent_line()
    assert {"--embedded", "--dry-run", "--once"} <= set(args)
    assert args[args.index("--pods") + 1] == "examples/agent/pods.yaml"
    # what the README promises, and what the test below checks
    assert comment.startswith("reclaim on") and "batch in the reclaim pool" in comment


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.chdir(ROOT)  # the README's paths are the checkout's
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


def test_the_readme_agent_line_shows_reclaim_on_and_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args, _ = _readme_agent_line()
    code, out, err = _run(args, monkeypatch)
    assert code == 0, out + err
    first = err.splitlines()[0]
    assert first.startswith("katalyst agent: cluster: the embedded in-memory cluster")
    assert "note: reclaim on (advisor.enable_reclaim=true)" in err
    assert "created 4 pods from examples/agent/pods.yaml" in err
    (summary,) = out.splitlines()
    assert "reclaim=" in summary and "pods 4" in summary and "enforce dry-run" in summary
    assert "evict" not in (out + err).lower()

    # the same line's plan, as JSON: the batch pod is in the reclaim pool, no pod evicted
    code, out, err = _run([*args, "--output", "json"], monkeypatch)
    assert code == 0, out + err
    plan = json.loads(out)
    pools = {p["pod"]: p["pool"] for p in plan["pods"]}
    assert pools["default/batch"] == names.POOL_RECLAIM
    assert pools["default/web"] == names.POOL_SHARE
    assert plan["dry_run"] is True
    assert plan["notes"][0].startswith("reclaim on")
    (ran,) = [a for a in plan["eviction_actions"] if a["kind"] == "eviction-plan"]
    assert ran["victims"] == [] and ran["conditions"] == []
    assert all(not a.get("evicted") for a in plan["eviction_actions"])
    # reclaim on: the node offers reclaimed capacity
    assert plan["reclaimed"]["cpu"]["value"] > 0
