#!/usr/bin/env bash
# Build the upstream Kubernetes test infrastructure from the Go module proxy into a cache
# outside the repository, keyed by version: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl (k8s.io/kubernetes), etcd (go.etcd.io/etcd/server/v3),
# crictl (sigs.k8s.io/cri-tools), helm (helm.sh/helm/v3) and metrics-server
# (sigs.k8s.io/metrics-server, the plain HPA's cpu metric in the autoscaling e2e).
#
#   bash scripts/k8s-build.sh            build what is missing, print the bin directory
#
# A second run with everything built returns at once. Go is only test infrastructure here:
# pykatalyst itself is Python.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CRICTL_VERSION=${CRICTL_VERSION:-v1.34.0}
HELM_VERSION=${HELM_VERSION:-v3.19.5}
METRICS_SERVER_VERSION=${METRICS_SERVER_VERSION:-v0.8.0}
CACHE=${PYKATALYST_CACHE:-$HOME/.cache/pykatalyst}
DEST="$CACHE/k8s-$K8S_VERSION"
BIN="$DEST/bin"
SRC="$DEST/src"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

log() { echo "k8s-build: $*" >&2; }

command -v go >/dev/null || { log "go is not on PATH: install Go 1.24 or newer"; exit 1; }
mkdir -p "$BIN" "$SRC"

# k8s.io/kubernetes requires its staging modules at v0.0.0 with replace directives to
# ./staging; a consumer module pins each of them to the matching v0.X.Y release instead.
build_kubernetes() {
    local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
    local missing=0 b
    for b in "${want[@]}"; do [ -x "$BIN/$b" ] || missing=1; done
    [ "$missing" = 1 ] || return 0
    local minor staging dir="$SRC/kubernetes"
    minor=$(echo "$K8S_VERSION" | cut -d. -f2)
    staging="v0.${K8S_VERSION#v1.}"
    mkdir -p "$dir"
    log "building Kubernetes $K8S_VERSION (staging $staging) into $BIN"
    (
        cd "$dir"
        go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
        local upstream
        upstream="$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/go.mod"
        {
            printf 'module pykatalyst.test/k8sbuild\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
            sed -n '/^replace (/,/^)/p' "$upstream" | awk -v s="$staging" '/=>/ {print "\t" $1 " => " $1 " " s}'
            printf ')\n'
        } > go.mod
        local pkgs=() ldflags
        for b in "${want[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
        ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
        ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
        ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
        ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
        go build -trimpath -o "$BIN/" -ldflags "$ldflags" "${pkgs[@]}"
    )
}

build_etcd() {
    [ -x "$BIN/etcd" ] && return 0
    local dir="$SRC/etcd"
    mkdir -p "$dir"
    log "building etcd $ETCD_VERSION"
    (
        cd "$dir"
        printf 'module pykatalyst.test/etcdbuild\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
        cat > main.go <<'GO'
// etcd for pykatalyst's test cluster: the upstream server's own entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
        go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .
    )
}

build_module_cmd() {
    local name=$1 module=$2 version=$3 pkg=$4
    [ -x "$BIN/$name" ] && return 0
    local dir="$SRC/$name"
    mkdir -p "$dir"
    log "building $name $version"
    (
        cd "$dir"
        printf 'module pykatalyst.test/%sbuild\n\ngo 1.24.0\n\nrequire %s %s\n' "$name" "$module" "$version" > go.mod
        go build -trimpath -ldflags "-s -w" -o "$BIN/$name" "$pkg"
    )
}

build_kubernetes
build_etcd
build_module_cmd crictl sigs.k8s.io/cri-tools "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
build_module_cmd metrics-server sigs.k8s.io/metrics-server "$METRICS_SERVER_VERSION" \
    sigs.k8s.io/metrics-server/cmd/metrics-server
if [ "${PYKATALYST_BUILD_HELM:-1}" = 1 ]; then
    build_module_cmd helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
fi
echo "$BIN"
