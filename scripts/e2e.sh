#!/usr/bin/env bash
# The end-to-end suite on a real, upstream Kubernetes: bring up the one-node cluster of
# scripts/cluster.sh (or reuse one that runs), run `pytest -m e2e`, and tear down what this
# run started. Extra arguments go to pytest (e.g. -k colocation, or test files to run only
# those: bash scripts/e2e.sh tests/e2e/test_e2e_faults.py).
#
# Against another cluster instead: KUBECONFIG=... .venv/bin/pytest -m e2e tests/e2e
# (the node-level checks then skip, saying why).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "e2e: not run: the one-node cluster needs root (the kubelet manages cgroups and mounts)" >&2
    exit 0
fi
bash scripts/setup.sh
started=0
# (status read whole first: with pipefail, grep -q closing the pipe early would read as "not
# running" and this run would tear down a cluster it did not start)
state=$(bash scripts/cluster.sh status 2>/dev/null || true)
if ! grep -q '^kube-apiserver: running' <<<"$state"; then
    started=1
    trap 'bash scripts/cluster.sh down' EXIT
    t0=$SECONDS
    bash scripts/cluster.sh up
    echo "e2e: cluster up in $((SECONDS - t0)) s (a first run's includes building the binaries)"
fi
eval "$(bash scripts/cluster.sh env)"
# The whole suite runs in its lanes (tests/e2e/conftest.py, docs/e2e.md): the "node", "api"
# and "wait" lanes side by side, then the tests that must run alone. Test files or node ids
# among the arguments, or PYKATALYST_E2E_LANES=0, run one test at a time instead.
whole=1
for arg in "$@"; do
    case $arg in tests/*|*.py|*::*) whole=0 ;; esac
done
pytest=(.venv/bin/pytest -p no:cacheprovider --durations=15)
rc=0
# One lane: "no test selected" (exit 5, e.g. -k matching another lane only) is fine.
lane() {
    local r=0
    "${pytest[@]}" "$@" || r=$?
    [ "$r" = 5 ] || [ "$r" = 0 ] || return "$r"
}
if [ "$whole" = 0 ]; then
    "${pytest[@]}" -m e2e "$@" || rc=$?
elif [ "${PYKATALYST_E2E_LANES:-1}" != 1 ]; then
    "${pytest[@]}" -m e2e tests/e2e "$@" || rc=$?
else
    t0=$SECONDS
    echo "e2e: the node, api and wait lanes side by side (the other two lanes' output follows the node lane's)"
    declare -A logs pids
    for name in api wait; do
        logs[$name]=$(mktemp "/tmp/pykatalyst-e2e-$name.XXXXXX")
        lane -m "e2e and e2e_$name" --basetemp "${logs[$name]}.tmp" tests/e2e "$@" \
            >"${logs[$name]}" 2>&1 &
        pids[$name]=$!
    done
    lane -m "e2e and not e2e_api and not e2e_wait and not e2e_alone" tests/e2e "$@" || rc=$?
    for name in api wait; do
        r=0
        wait "${pids[$name]}" || r=$?
        echo "== e2e: the $name lane"
        cat "${logs[$name]}"
        rm -rf "${logs[$name]}" "${logs[$name]}.tmp"
        [ "$r" = 0 ] || rc=$r
    done
    t_lanes=$SECONDS
    # The files that run alone need a quiet node and control plane: let the lanes'
    # namespaces go first, and any other namespace still being deleted (an interrupted
    # benchmark's thousands of pods, which the controller manager removes in the background).
    kubectl="$PYKATALYST_K8S_BIN/kubectl"
    for _ in $(seq 180); do
        left=$("$kubectl" get namespaces --no-headers 2>/dev/null \
            | awk '$1 ~ /^e2e-/ || $2 == "Terminating"' | wc -l || true)
        [ "$left" = 0 ] && break
        sleep 1
    done
    t1=$SECONDS
    echo "e2e: waited $((t1 - t_lanes)) s for the lanes' namespaces to go (${left:-0} still there)"
    echo "== e2e: the files that run alone"
    lane -m "e2e and e2e_alone" tests/e2e "$@" || rc=$?
    echo "e2e: the lanes side by side $((t1 - t0)) s, the files alone $((SECONDS - t1)) s"
fi
exit "$rc"
