#!/usr/bin/env bash
# Build the VPA anchor (benchmarks/vpa_anchor/main.go) against the Kubernetes VPA's own
# recommender packages, fetched from the Go module proxy, into a cache outside the repository:
#
#   bash benchmarks/vpa_anchor/build.sh      build if missing, print the binary's path
#
# Go is only benchmark infrastructure here: pykatalyst itself is Python.
set -euo pipefail

VPA_VERSION=${VPA_VERSION:-v1.8.1}
CACHE=${PYKATALYST_CACHE:-$HOME/.cache/pykatalyst}
DEST="$CACHE/vpa-$VPA_VERSION"
BIN="$DEST/bin/vpa-anchor"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

command -v go >/dev/null || { echo "vpa-anchor: go is not on PATH: install Go 1.24 or newer" >&2; exit 1; }
if [ -x "$BIN" ] && [ "$BIN" -nt "$HERE/main.go" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$DEST/src" "$DEST/bin"
cp "$HERE/main.go" "$DEST/src/main.go"
(
    cd "$DEST/src"
    [ -f go.mod ] || printf 'module pykatalyst.test/vpaanchor\n\ngo 1.24.0\n' > go.mod
    go get "k8s.io/autoscaler/vertical-pod-autoscaler@$VPA_VERSION" >&2
    go mod tidy >&2
    go build -trimpath -ldflags "-s -w" -o "$BIN" . >&2
)
echo "$BIN"
