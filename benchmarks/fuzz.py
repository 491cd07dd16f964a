"""Random pods against every reader of pods: none may raise, whatever the pod holds.

    python benchmarks/fuzz.py [--cases N] [--seed S]

Half the cases are pods as an API server stores them (the Pod schema's types, any string
values), half are ill-typed (a value replaced by JSON of another type). Each case goes
through every entry point of the fuzz tests (tests/pod_fuzz.py): `katalyst validate`'s
check, the QoS parser, the agent's and the scheduler's pod parsers, the eviction stage's
pod info, the backstop, the admission webhook, and the API server's create followed, for a
pod it stores, by the extender's filter and prioritize. Then every file of the hostile
corpus (tests/data/hostile) goes through the same readers, with the worst time and memory
per reader. Then hostile *text* (tests/text_fuzz.py: YAML made of explicit tags, aliases,
merge keys, directives and odd numbers; CSV with NaN, infinities, NUL bytes and broken
quoting) goes through every reader of a user's file: the YAML loader and the agent,
scheduler and scenario config parsers, the manifest reader of `katalyst validate`, and the
simulator's demand CSV. The last line is `cases: N crashes: C text_cases: T
text_crashes_per_million: R`.

    python benchmarks/fuzz.py --cases 0 --text-cases 1000000   # the text fuzz alone
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the entry points are the fuzz tests' own list

from tests import text_fuzz  # noqa: E402
from tests.pod_fuzz import ENTRY_POINTS as READERS  # noqa: E402

from pykatalyst.api import names  # noqa: E402
from pykatalyst.api.manifests import ManifestError, load_documents  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "hostile"

_ANNOTATIONS = (
    names.QOS_LEVEL_ANNOTATION,
    names.MEMORY_ENHANCEMENT_ANNOTATION,
    names.CPU_ENHANCEMENT_ANNOTATION,
    names.NETWORK_ENHANCEMENT_ANNOTATION,
    names.NUMA_NUMBER_ANNOTATION,
    names.NUMA_IDS_ANNOTATION,
)
_KEYS = ("numa_binding", "numa_exclusive", "oom_priority", "cpuset_pool", "cpu_burst_percent")
_RESOURCES = ("cpu", "memory", names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY)
_WORDS = ("true", "True", "false", "", "0", "-1", "1.5", "0,2-3", "0-1023", "abc", "1e400")


def _text(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.4:
        return rng.choice(_WORDS) + rng.choice(("", "m", "Gi", "k", "e3"))
    if pick < 0.5:
        return "1" * rng.choice((19, 20, 400, 4301, 6000))
    if pick < 0.6:
        return rng.choice(names.QOS_LEVELS)
    if pick < 0.8:
        return json.dumps({rng.choice(_KEYS): _text(rng) for _ in range(rng.randint(0, 3))})
    return "".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 8)))


def _json(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth < 3 and pick < 0.15:
        return [_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 3 and pick < 0.3:
        return {_text(rng): _json(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.choice(
        (None, True, 2**64, -1, 0.5, float("inf"), "x", _text(rng), 10 ** rng.randint(0, 30))
    )


def _container(rng: random.Random, name: str) -> dict[str, Any]:
    resources = {
        part: {rng.choice(_RESOURCES): _text(rng) for _ in range(rng.randint(0, 3))}
        for part in ("requests", "limits")
        if rng.random() < 0.7
    }
    return {"name": name, "image": "busybox", "resources": resources}


def stored_pod(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [_container(rng, f"c{i}") for i in range(rng.randint(0, 3))]
    }
    if rng.random() < 0.3:
        spec["initContainers"] = [_container(rng, "init")]
    if rng.random() < 0.2:
        spec["overhead"] = {"cpu": _text(rng)}
    if rng.random() < 0.5:
        spec["nodeName"] = "node-1"
    if rng.random() < 0.3:
        spec["priority"] = rng.randint(-(2**31), 2**31 - 1)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{rng.randint(0, 99)}" if rng.random() < 0.5 else _text(rng),
            "namespace": "default",
            "uid": str(rng.random()),
            "resourceVersion": str(rng.randint(1, 10**6)),
            "annotations": {rng.choice(_ANNOTATIONS): _text(rng) for _ in range(rng.randint(0, 4))},
        },
        "spec": spec,
        "status": {"phase": rng.choice(("Pending", "Running", "Failed"))},
    }


def ill_typed_pod(rng: random.Random) -> dict[str, Any]:
    pod = stored_pod(rng)
    for _ in range(rng.randint(1, 3)):
        node: Any = pod
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = rng.choice(keys)
            child = node[key]
            if isinstance(child, dict | list) and child and rng.random() < 0.6:
                node = child
                continue
            node[key] = _json(rng)
            break
    return pod


def run_cases(cases: int, seed: int) -> int:
    rng = random.Random(seed)
    crashes = 0
    for i in range(cases):
        pod = stored_pod(rng) if i % 2 == 0 else ill_typed_pod(rng)
        for name, read in READERS.items():
            try:
                read(pod)
            except Exception:
                crashes += 1
                if crashes <= 5:
                    print(f"crash in {name} on case {i}:", file=sys.stderr)
                    traceback.print_exc()
    return crashes


def run_corpus() -> int:
    """Every corpus pod through every reader; prints the worst time and memory per reader."""
    pods: list[Any] = []
    for path in sorted(CORPUS.iterdir()):
        try:
            pods.extend(d.obj for d in load_documents(path))
        except ManifestError:
            continue
    crashes = 0
    for name, read in READERS.items():
        worst_s = 0.0
        worst_peak = 0
        for pod in pods:
            tracemalloc.start()
            start = time.perf_counter()
            try:
                read(pod)
            except Exception:
                crashes += 1
            worst_s = max(worst_s, time.perf_counter() - start)
            worst_peak = max(worst_peak, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        print(f"corpus {name}: worst {worst_s * 1000:.1f} ms, {worst_peak / 2**20:.1f} MiB peak")
    return crashes


def run_text_cases(cases: int, seed: int) -> int:
    """Hostile YAML and CSV texts through every reader of a user's file; returns crashes."""
    rng = random.Random(seed)
    crashes = 0
    with tempfile.TemporaryDirectory() as tmp:
        yaml_file, csv_file = Path(tmp) / "f.yaml", Path(tmp) / "f.csv"
        for i in range(cases):
            prefix = rng.choice(text_fuzz.YAML_PREFIXES)
            text = prefix + text_fuzz.random_text(rng, text_fuzz.YAML_TOKENS)
            csv_text = text_fuzz.random_text(rng, text_fuzz.CSV_TOKENS, most=24)
            yaml_file.write_text(text, encoding="utf-8", errors="surrogatepass")
            csv_file.write_text(csv_text, encoding="utf-8", errors="surrogatepass")
            calls: list[tuple[str, Any, Any]] = [
                *((n, r, text) for n, r in text_fuzz.TEXT_READERS.items()),
                *((n, r, yaml_file) for n, r in text_fuzz.FILE_READERS.items()),
                *((n, r, csv_file) for n, r in text_fuzz.CSV_READERS.items()),
            ]
            for name, read, arg in calls:
                try:
                    read(arg)
                except Exception:
                    crashes += 1
                    if crashes <= 5:
                        print(f"crash in {name} on text case {i}: {arg!r}", file=sys.stderr)
                        traceback.print_exc()
    return crashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10**6)
    parser.add_argument("--text-cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    crashes = run_cases(args.cases, args.seed)
    print(f"random cases: {time.perf_counter() - start:.1f} s")
    crashes += run_corpus() if CORPUS.is_dir() else 0
    start = time.perf_counter()
    text_crashes = run_text_cases(args.text_cases, args.seed)
    print(f"text cases: {time.perf_counter() - start:.1f} s")
    per_million = text_crashes * 1e6 / max(args.text_cases, 1)
    print(
        f"cases: {args.cases} crashes: {crashes} text_cases: {args.text_cases} "
        f"text_crashes_per_million: {per_million:.0f}"
    )


if __name__ == "__main__":
    main()
