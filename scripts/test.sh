#!/usr/bin/env bash
# Set up the environment, then run the whole suite: ruff, mypy --strict, the unit tests, the
# real cgroup v2 tests in a guest that boots a v2-only kernel (scripts/vm-cgroup2.sh; this
# machine's kernel mounts v1), and the end-to-end suite on a real one-node Kubernetes built
# from upstream sources (scripts/e2e.sh). PYKATALYST_SKIP_VM=1 and PYKATALYST_SKIP_E2E=1
# leave those out for a quick local run.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time, printed at the end (also when a step fails), slowest first.
timings=()
step() {
    local name=$1 t0=$SECONDS rc=0
    shift
    "$@" || rc=$?
    timings+=("$((SECONDS - t0)) $name$([ "$rc" = 0 ] || echo " (failed, exit $rc)")")
    return "$rc"
}
summary() {
    [ "${#timings[@]}" -gt 0 ] || return 0
    echo "== time per step (whole command: $((SECONDS / 60)) min $((SECONDS % 60)) s)"
    printf '%s\n' "${timings[@]}" | sort -rn | while read -r secs name; do
        printf '%6s s  %s\n' "$secs" "$name"
    done
}
trap summary EXIT
step "setup (scripts/setup.sh)" bash scripts/setup.sh
. .venv/bin/activate
step "ruff check" ruff check src tests benchmarks
step "ruff format --check" ruff format --check src tests benchmarks
# mypy's cache lives beside the other caches: a fresh clone checks only what changed
step "mypy --strict" mypy --strict --cache-dir "${PYKATALYST_CACHE:-$HOME/.cache/pykatalyst}/mypy" src
step "unit tests" pytest -n auto "$@"
if [ "${PYKATALYST_SKIP_VM:-0}" != 1 ]; then
    echo "== real cgroup v2 tests, in a guest with a v2-only kernel (scripts/vm-cgroup2.sh)"
    step "cgroup v2 guest (scripts/vm-cgroup2.sh)" bash scripts/vm-cgroup2.sh
fi
if [ "${PYKATALYST_SKIP_E2E:-0}" != 1 ]; then
    step "end-to-end suite (scripts/e2e.sh, cluster included)" bash scripts/e2e.sh
fi
