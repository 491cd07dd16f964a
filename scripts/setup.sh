#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install pykatalyst into it.
# The installer is uv (kept in the cache, fetched from PyPI once): a fresh clone's environment
# takes seconds instead of a minute. Where uv cannot be had, pip does the same install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CACHE="${PYKATALYST_CACHE:-$HOME/.cache/pykatalyst}"
UV_HOME="$CACHE/uv"
export UV_PYTHON_DOWNLOADS=never

# uv: the one on PATH, else the cached one, else fetched into the cache with .venv's pip.
uv_bin() {
    if command -v uv >/dev/null; then
        command -v uv
    elif [ -x "$UV_HOME/bin/uv" ]; then
        echo "$UV_HOME/bin/uv"
    elif [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; then
        local tmp
        tmp=$(mktemp -d "$CACHE/uv.XXXXXX")
        if .venv/bin/python -m pip install --quiet --disable-pip-version-check --target "$tmp" uv \
            && [ -x "$tmp/bin/uv" ]; then
            mv -T "$tmp" "$UV_HOME" 2>/dev/null || rm -rf "$tmp"
            echo "$UV_HOME/bin/uv"
        else
            rm -rf "$tmp"
        fi
    fi
    return 0
}

mkdir -p "$CACHE"
stamp=.venv/.pykatalyst-installed
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ constraints.txt -nt "$stamp" ]; then
    uv=$(uv_bin)
    if [ ! -x .venv/bin/python ]; then
        if [ -n "$uv" ]; then
            # --seed: pip inside too (scripts/image.sh builds the image's wheels with it)
            "$uv" venv --quiet --seed --python "$PY" .venv
        else
            "$PY" -m venv .venv
            uv=$(uv_bin)
        fi
    fi
    if [ -n "$uv" ]; then
        # --compile-bytecode: as pip does; where PYTHONDONTWRITEBYTECODE is set, every process
        # would otherwise compile every module it imports, every time
        "$uv" pip install --quiet --compile-bytecode --python .venv/bin/python \
            -c constraints.txt -e '.[dev]'
    else
        echo "setup: uv could not be fetched; installing with pip (slower)" >&2
        .venv/bin/python -m pip install --quiet --upgrade pip
        .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
    fi
    touch "$stamp"
fi
# The package's own bytecode, for the same reason (only what changed since is compiled again;
# a stale file is never used: Python compares each with its source). A file that does not
# compile is left to the checks that follow, which name it.
.venv/bin/python -m compileall -q -j 0 src benchmarks >/dev/null || true
# The agent shapes egress with tc (iproute2) and nft (nftables); install them where missing.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    && { ! command -v tc >/dev/null || ! command -v nft >/dev/null; }; then
    apt-get install -y -qq iproute2 nftables >/dev/null || echo "setup: could not install iproute2/nftables" >&2
fi
