#!/usr/bin/env bash
# Set up the environment, then run the whole suite: ruff, mypy --strict, the unit tests, the
# real cgroup v2 tests in a guest that boots a v2-only kernel (scripts/vm-cgroup2.sh; this
# machine's kernel mounts v1), and the end-to-end suite on a real one-node Kubernetes built
# from upstream sources (scripts/e2e.sh). PYKATALYST_SKIP_VM=1 and PYKATALYST_SKIP_E2E=1
# leave those out for a quick local run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check src tests benchmarks
ruff format --check src tests benchmarks
mypy --strict src
pytest -n auto "$@"
if [ "${PYKATALYST_SKIP_VM:-0}" != 1 ]; then
    echo "== real cgroup v2 tests, in a guest with a v2-only kernel (scripts/vm-cgroup2.sh)"
    bash scripts/vm-cgroup2.sh
fi
if [ "${PYKATALYST_SKIP_E2E:-0}" != 1 ]; then
    bash scripts/e2e.sh
fi
