"""Did a change to the agent weaken the service's protection? The same real-software check
(`benchmarks/isolation_real.py`) run with this checkout's code and with an earlier
commit's, interleaved round by round on this machine.

Each round runs `isolation_real.py --rounds 1` once from each tree (which goes first
alternates), each with its own `pykatalyst` on the path and the same options, so drifting
background load hits both alike. The earlier commit is checked out in a temporary
worktree (removed at the end). Both trees configure the agent as `--agent-config` says
(default: the Helm chart's); a base too old to have that option runs its own default, and
the report says so. A base older than `benchmarks/isolation_real.py` itself runs its agent
(its `src`) under this tree's benchmark, which leaves out what that agent lacks (the `net`
kind without its network shaping, settings it does not know); `--agent-config bench` is
then the configuration both can read.

Prints, per tree and antagonist, each round's p99 over that round's solo p99 with the
kubelet's settings only and under the agent, and the pods' busy share; then the medians;
and as the last line

    agent_p99_over_solo: <this tree's median> base: <the base's median> ratio: <this / base>

for the first antagonist given (a ratio above 1: this tree protects less). Root, as the
benchmark it runs:

    sudo .venv/bin/python benchmarks/isolation_regress.py --base HEAD~1 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path("benchmarks") / "isolation_real.py"


@dataclass
class Tree:
    name: str
    root: Path  # its `src` is the agent code that runs
    agent_config: bool  # whether its benchmark takes --agent-config
    harness: Path = ROOT  # the tree whose benchmark runs it
    rounds: list[dict[str, dict[str, float]]] = field(default_factory=list)


@contextlib.contextmanager
def base_tree(rev: str) -> Iterator[Path]:
    """`rev` checked out (detached) in a temporary worktree of this repository."""
    tmp = Path(tempfile.mkdtemp(prefix="pykatalyst-regress-")) / "base"
    git = ["git", "-C", str(ROOT)]
    done = subprocess.run([*git, "worktree", "add", "--detach", str(tmp), rev], text=True,
                          capture_output=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"--base {rev}: cannot check it out: {done.stderr.strip()}")
    try:
        yield tmp
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tmp)], check=False)
        with contextlib.suppress(OSError):
            tmp.parent.rmdir()


def takes_agent_config(root: Path) -> bool:
    return "--agent-config" in (root / SCRIPT).read_text()


def base_of(root: Path) -> Tree:
    """The earlier tree; one older than this benchmark runs its agent under this tree's
    (which then leaves out what that agent lacks: its network shaping, newer settings)."""
    if (root / SCRIPT).is_file():
        return Tree("base", root, takes_agent_config(root), harness=root)
    return Tree("base", root, True, harness=ROOT)


def run_round(tree: Tree, args: argparse.Namespace, out: Path) -> dict[str, dict[str, float]]:
    """One interleaved round of the benchmark from `tree`; its modes' figures."""
    argv = [sys.executable, str(tree.harness / SCRIPT), "--rounds", "1"]
    argv += ["--seconds", str(args.seconds), "--kinds", args.kinds, "--json", str(out)]
    if tree.agent_config:
        argv += ["--agent-config", args.agent_config]
    env = {**os.environ, "PYTHONPATH": str(tree.root / "src")}
    done = subprocess.run(argv, env=env, text=True, capture_output=True, check=False)
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr)[-2000:]
        raise SystemExit(f"{tree.name}: the benchmark failed ({done.returncode}):\n{tail}")
    modes: dict[str, dict[str, float]] = json.loads(out.read_text())["modes"]
    out.unlink()
    return modes


def ratios(tree: Tree, kind: str) -> list[tuple[float, float, float]]:
    """Per round: (kubelet p99 / solo p99, agent p99 / solo p99, the agent's pods busy)."""
    out = []
    for modes in tree.rounds:
        solo = modes["solo"]["p99_ms"]
        kub, agent = modes[f"{kind}-kubelet"], modes[f"{kind}-agent"]
        out.append((kub["p99_ms"] / solo, agent["p99_ms"] / solo, agent["pods_busy"]))
    return out


def report(trees: list[Tree], kinds: list[str]) -> str:
    last = ""
    for kind in kinds:
        medians = []
        for tree in trees:
            rows = ratios(tree, kind)
            shown = "  ".join(f"{k:.2f}/{a:.2f}/{b:.2f}" for k, a, b in rows)
            print(f"{tree.name:<5} {kind} per round kubelet/agent p99 over solo, busy: {shown}")
            med = statistics.median(a for _, a, _ in rows)
            busy = statistics.median(b for _, _, b in rows)
            kub = statistics.median(k for k, _, _ in rows)
            print(
                f"{tree.name:<5} {kind} median: kubelet {kub:.2f}  agent {med:.2f}  busy {busy:.2f}"
            )
            medians.append(med)
        if not last:
            work, base = medians
            last = f"agent_p99_over_solo: {work:.2f} base: {base:.2f} ratio: {work / base:.2f}"
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="the earlier commit (default: HEAD)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (at least 1)")
    ap.add_argument("--seconds", type=float, default=6.0, help="load per run")
    ap.add_argument("--kinds", default="cpu,vm", help="antagonists, comma-separated")
    ap.add_argument("--agent-config", default="chart", metavar="chart|bench|FILE")
    args = ap.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds and --seconds must be positive")
    kinds = [k for k in args.kinds.split(",") if k]
    with base_tree(args.base) as base_root, tempfile.TemporaryDirectory() as tmp:
        work = Tree("this", ROOT, True)
        base = base_of(base_root)
        own = "" if base.agent_config else " (it has no --agent-config: its own default)"
        if base.harness == ROOT:
            own = f"; {args.base} has no {SCRIPT}: its agent runs under this tree's benchmark"
        print(f"this tree vs {args.base}; agent config {args.agent_config}{own}")
        for r in range(args.rounds):
            order = [work, base] if r % 2 == 0 else [base, work]
            for tree in order:
                tree.rounds.append(run_round(tree, args, Path(tmp) / f"{tree.name}.json"))
                print(f"round {r + 1}: {tree.name} done", flush=True)
        print(report([work, base], kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
