#!/usr/bin/env bash
# Set up the environment, then run the whole suite: ruff, mypy --strict, the unit tests, and
# the end-to-end suite on a real one-node Kubernetes built from upstream sources
# (scripts/e2e.sh; PYKATALYST_SKIP_E2E=1 leaves it out for a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check src tests benchmarks
ruff format --check src tests benchmarks
mypy --strict src
pytest -n auto "$@"
if [ "${PYKATALYST_SKIP_E2E:-0}" != 1 ]; then
    bash scripts/e2e.sh
fi
