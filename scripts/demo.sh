#!/usr/bin/env bash
# Set up the environment, then run the main job on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/katalyst demo "$@"
