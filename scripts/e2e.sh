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
# Test files or node ids among the arguments run alone; otherwise the whole suite.
where=(tests/e2e)
for arg in "$@"; do
    case $arg in tests/*|*.py|*::*) where=() ;; esac
done
rc=0
.venv/bin/pytest -m e2e "${where[@]}" -p no:cacheprovider --durations=15 "$@" || rc=$?
exit "$rc"
