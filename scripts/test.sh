#!/usr/bin/env bash
# Set up the environment, then run the whole suite: tests, ruff and mypy --strict.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check src tests benchmarks
ruff format --check src tests benchmarks
mypy --strict src
pytest -n auto "$@"
