#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install pykatalyst into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.pykatalyst-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
    touch "$stamp"
fi
# The agent shapes egress with tc (iproute2) and nft (nftables); install them where missing.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    && { ! command -v tc >/dev/null || ! command -v nft >/dev/null; }; then
    apt-get install -y -qq iproute2 nftables >/dev/null || echo "setup: could not install iproute2/nftables" >&2
fi
