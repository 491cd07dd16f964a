#!/usr/bin/env bash
# A one-node Kubernetes on this machine, from upstream sources only.
#
#   bash scripts/cluster.sh up        build (once, cached), then start etcd, the control plane,
#                                     containerd, a kubelet and Prometheus (scraping the
#                                     kubelet's cAdvisor endpoint); install pykatalyst's CRDs and RBAC
#   bash scripts/cluster.sh down      stop everything and remove every trace (processes, mounts,
#                                     cgroups, network namespaces, kernel settings, the state dir)
#   bash scripts/cluster.sh status    what runs, and the node
#   bash scripts/cluster.sh env       eval "$(bash scripts/cluster.sh env)": KUBECONFIG (admin),
#                                     the per-component kubeconfigs, kubectl/crictl on PATH
#   bash scripts/cluster.sh kubelet-restart [none|static]
#                                     restart the kubelet, optionally with another cpu manager policy
#   bash scripts/cluster.sh pause|resume kube-scheduler kube-controller-manager
#                                     stop or restart those (the API server alone, for its tests)
#   bash scripts/cluster.sh halt|revive NAME...
#                                     stop any of etcd, kube-apiserver, containerd, kubelet, ...
#                                     and start it again as it was started (the fault tests)
#   bash scripts/cluster.sh heal      start kube-controller-manager or kube-scheduler again if it
#                                     exited on its own (they do when the API server is away)
#
# Security is a real cluster's: TLS everywhere the API server listens, RBAC and Node
# authorization, NodeRestriction, ServiceAccount tokens. Every listener binds to loopback.
# Nothing is downloaded but Debian's packages and Go modules: the pause and workload images
# are built from busybox-static by scripts/oci_image.py and imported into containerd.
#
# Settings (environment): PYKATALYST_CLUSTER_DIR (state, default /var/lib/pykatalyst-cluster),
# PYKATALYST_CPU_MANAGER_POLICY (none or static, default none), K8S_VERSION (see k8s-build.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${PYKATALYST_CLUSTER_DIR:-/var/lib/pykatalyst-cluster}
PKI="$STATE/pki"
KC="$STATE/kubeconfigs"
LOGS="$STATE/logs"
PIDS="$STATE/pids"
CTRD="$STATE/containerd"
SOCK="$CTRD/containerd.sock"
NODE=${NODE_NAME:-$(hostname)}
APISERVER=https://127.0.0.1:6443
ETCD_CLIENT=http://127.0.0.1:23790
ETCD_PEER=http://127.0.0.1:23800
# Debian's Prometheus, scraping the kubelet's /metrics/cadvisor over TLS every 10 s with a
# client certificate of its own (user "pykatalyst-prometheus", allowed nodes/metrics only).
PROMETHEUS_LISTEN=127.0.0.1:19090
PROMETHEUS_USER=pykatalyst-prometheus
SERVICE_CIDR=10.0.0.0/24
NAMESPACE=katalyst-system
BRIDGE=pyk0
PAUSE_IMAGE=pykatalyst.test/pause:1
WORKLOAD_IMAGE=pykatalyst.test/busybox:1
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (the kubelet and containerd manage cgroups and mounts)"

bin_dir() {
    if [ -z "${BIN:-}" ]; then
        BIN=$(bash "$ROOT/scripts/k8s-build.sh" | tail -n 1)
    fi
    echo "$BIN"
}

ensure_packages() {
    local need=()
    command -v containerd >/dev/null || need+=(containerd)
    command -v runc >/dev/null || need+=(runc)
    [ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
    [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 || need+=(busybox-static)
    command -v openssl >/dev/null || need+=(openssl)
    command -v ip >/dev/null || need+=(iproute2)
    command -v iptables >/dev/null || need+=(iptables)
    command -v mount >/dev/null || need+=(mount)
    command -v prometheus >/dev/null || need+=(prometheus)
    if [ ${#need[@]} -gt 0 ]; then
        log "installing ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${need[@]}" >/dev/null
    fi
}

running() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

start() {
    local name=$1
    shift
    running "$name" && return 0
    log "starting $name"
    # The daemon keeps no descriptor above 2 of ours: a lock held around this script
    # (flock /tmp/pk-e2e.lock ...) must end with it, not live on in etcd or the kubelet.
    setsid bash -c 'for fd in /proc/self/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done; exec "$@"' \
        _ "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$PIDS/$name.pid"
}

stop() {
    local name=$1 pid i
    [ -f "$PIDS/$name.pid" ] || return 0
    pid=$(cat "$PIDS/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        # gone before anything starts in its place (its ports, its files)
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$PIDS/$name.pid"
}

wait_for() {
    local what=$1 secs=$2
    shift 2
    local i
    for i in $(seq 1 "$((secs * 4))"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.25
    done
    die "$what did not come up within ${secs}s (logs in $LOGS)"
}

# --- certificates -----------------------------------------------------------------------

cert() {  # name CN O SAN(or "") usage(client|server|both)
    local name=$1 cn=$2 org=$3 san=$4 usage=$5 ext="$PKI/$1.ext" subj
    [ -f "$PKI/$name.crt" ] && return 0
    subj="/CN=$cn"
    [ -n "$org" ] && subj="/O=$org$subj"
    openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        case $usage in
            client) echo "extendedKeyUsage=clientAuth" ;;
            server) echo "extendedKeyUsage=serverAuth" ;;
            both) echo "extendedKeyUsage=serverAuth,clientAuth" ;;
        esac
        [ -n "$san" ] && echo "subjectAltName=$san"
    } > "$ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -days 365 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$ext"
}

make_pki() {
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    if [ ! -f "$PKI/ca.crt" ]; then
        openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
        openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=pykatalyst-test-ca" -days 365 \
            -sha256 -out "$PKI/ca.crt" 2>/dev/null
    fi
    cert apiserver kube-apiserver "" \
        "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.0.0.1" server
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" client
    cert admin kubernetes-admin system:masters "" client
    cert controller-manager system:kube-controller-manager "" "" client
    cert scheduler system:kube-scheduler "" "" client
    cert kubelet-client "system:node:$NODE" system:nodes "" client
    cert kubelet "$NODE" "" "DNS:$NODE,DNS:localhost,IP:127.0.0.1" server
    cert prometheus "$PROMETHEUS_USER" "" "" client
    if [ ! -f "$PKI/sa.key" ]; then
        openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
        openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    fi
    front_proxy_pki
}

# The aggregation layer's front proxy: a CA of its own (as kubeadm makes it) and the client
# pair kube-apiserver presents to aggregated API servers (external metrics).
front_proxy_pki() {
    local ext="$PKI/front-proxy-client.ext"
    if [ ! -f "$PKI/front-proxy-ca.crt" ]; then
        openssl genrsa -out "$PKI/front-proxy-ca.key" 2048 2>/dev/null
        openssl req -x509 -new -key "$PKI/front-proxy-ca.key" -subj "/CN=pykatalyst-front-proxy-ca" \
            -days 365 -sha256 -out "$PKI/front-proxy-ca.crt" 2>/dev/null
    fi
    [ -f "$PKI/front-proxy-client.crt" ] && return 0
    openssl genrsa -out "$PKI/front-proxy-client.key" 2048 2>/dev/null
    openssl req -new -key "$PKI/front-proxy-client.key" -subj "/CN=front-proxy-client" \
        -out "$PKI/front-proxy-client.csr" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=clientAuth" > "$ext"
    openssl x509 -req -in "$PKI/front-proxy-client.csr" -CA "$PKI/front-proxy-ca.crt" \
        -CAkey "$PKI/front-proxy-ca.key" -CAcreateserial -days 365 -sha256 -extfile "$ext" \
        -out "$PKI/front-proxy-client.crt" 2>/dev/null
    rm -f "$PKI/front-proxy-client.csr" "$ext"
}

# A kubeconfig for one user of the test cluster: `credentials` is the YAML of its `user:`
# entry, `extra` more keys of its context.
kubeconfig() {  # file user credentials [extra]
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pykatalyst-test
  cluster:
    server: $APISERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user: {$3}
contexts:
- name: $2@pykatalyst-test
  context: {cluster: pykatalyst-test, user: $2${4:+, $4}}
current-context: $2@pykatalyst-test
EOF
    chmod 600 "$1"
}

kubeconfig_cert() {  # file user cert
    kubeconfig "$1" "$2" "client-certificate: $PKI/$3.crt, client-key: $PKI/$3.key"
}

kubeconfig_token() {  # file user token
    kubeconfig "$1" "$2" "token: $3" "namespace: $NAMESPACE"
}

# --- the node's runtime -----------------------------------------------------------------

containerd_config() {
    local RESTRICT_OOM=false
    # CAP_SYS_RESOURCE is bit 24 of the effective set.
    (( (16#$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24) & 1 )) || RESTRICT_OOM=true
    mkdir -p "$CTRD/root" "$CTRD/state" "$CTRD/opt" "$STATE/cni/net.d"
    cat > "$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = "$CTRD/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_selinux = false
  # Where the runtime lacks CAP_SYS_RESOURCE (some sandboxes), a score below containerd's
  # own cannot be set: clamp instead of failing every sandbox.
  restrict_oom_score_adj = $RESTRICT_OOM
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
    # Test pods need no network, but the runtime wants an address for each sandbox: a
    # bridge with no address on the host (no gateway, no masquerade, no route out), pod
    # addresses from the benchmarking range 198.18.0.0/24, nothing reachable beyond it.
    rm -f "$STATE/cni/net.d/"*.conflist
    cat > "$STATE/cni/net.d/10-pykatalyst.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "pykatalyst", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
            "ranges": [[{"subnet": "198.18.0.0/24"}]]}},
  {"type": "loopback"}]}
EOF
}

import_images() {
    local have
    have=$(ctr --address "$SOCK" -n k8s.io images ls -q 2>/dev/null || true)
    if ! grep -qx "$PAUSE_IMAGE" <<<"$have"; then
        python3 "$ROOT/scripts/oci_image.py" --name "$PAUSE_IMAGE" --out "$STATE/pause.tar" \
            --cmd /bin/sh -c 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done'
        ctr --address "$SOCK" -n k8s.io images import "$STATE/pause.tar" >/dev/null
        rm -f "$STATE/pause.tar"
    fi
    if ! grep -qx "$WORKLOAD_IMAGE" <<<"$have"; then
        python3 "$ROOT/scripts/oci_image.py" --name "$WORKLOAD_IMAGE" --out "$STATE/busybox.tar" \
            --cmd /bin/sh
        ctr --address "$SOCK" -n k8s.io images import "$STATE/busybox.tar" >/dev/null
        rm -f "$STATE/busybox.tar"
    fi
}

kubelet_config() {
    local policy=${1:-${PYKATALYST_CPU_MANAGER_POLICY:-none}} extra=""
    case $policy in
        none) ;;
        static) extra="reservedSystemCPUs: \"0\"" ;;
        *) die "cpu manager policy '$policy': accepted values are none and static" ;;
    esac
    mkdir -p "$STATE/kubelet" "$STATE/pod-logs"
    cat > "$STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
podLogsDir: $STATE/pod-logs
cpuManagerPolicy: $policy
cpuManagerReconcilePeriod: 10s
$extra
memoryManagerPolicy: None
topologyManagerPolicy: none
topologyManagerScope: container
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
rotateCertificates: false
serverTLSBootstrap: false
maxPods: 110
syncFrequency: 10s
nodeStatusUpdateFrequency: 10s
EOF
    echo "$policy" > "$STATE/cpu-manager-policy"
}

start_kubelet() {
    local bin
    bin=$(bin_dir)
    # --containerd: the kubelet's cAdvisor asks containerd (at this cluster's socket, not the
    # default one) which container a cgroup belongs to; without it /metrics/cadvisor has pod
    # cgroups only, no per-container series (no `container` label) for Prometheus to read.
    start kubelet "$bin/kubelet" --config="$STATE/kubelet-config.yaml" \
        --kubeconfig="$KC/kubelet.kubeconfig" --root-dir="$STATE/kubelet" \
        --hostname-override="$NODE" --containerd="$SOCK" --v=1
    wait_for "the kubelet" 90 curl -sf http://127.0.0.1:10248/healthz
}

start_controller_manager() {
    local bin
    bin=$(bin_dir)
    start kube-controller-manager "$bin/kube-controller-manager" \
        --kubeconfig="$KC/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$KC/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$KC/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
        --use-service-account-credentials=true --service-account-private-key-file="$PKI/sa.key" \
        --root-ca-file="$PKI/ca.crt" --cluster-signing-cert-file="$PKI/ca.crt" \
        --cluster-signing-key-file="$PKI/ca.key" --controllers='*,-nodeipam' --v=1
}

start_scheduler() {
    local bin
    bin=$(bin_dir)
    start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$KC/scheduler.kubeconfig" \
        --authentication-kubeconfig="$KC/scheduler.kubeconfig" \
        --authorization-kubeconfig="$KC/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --v=1
}

# The API server alone, for tests of its semantics: no controller or scheduler writes to
# the objects under test while paused.
pause() {
    local name
    for name in "$@"; do
        case $name in
            kube-scheduler|kube-controller-manager) stop "$name" ;;
            *) die "pause: $name: accepted names are kube-scheduler and kube-controller-manager" ;;
        esac
    done
}

resume() {
    local name
    for name in "$@"; do
        case $name in
            kube-scheduler) start_scheduler ;;
            kube-controller-manager) start_controller_manager ;;
            *) die "resume: $name: accepted names are kube-scheduler and kube-controller-manager" ;;
        esac
    done
}

# Faults, for the fault tests: stop a process of the cluster (its command line kept), and
# start it again later exactly as it was started.
halt() {
    local name
    for name in "$@"; do
        running "$name" || die "halt: $name is not running (names: $(ls "$PIDS" | sed 's/\.pid$//' | tr '\n' ' '))"
        tr '\0' '\n' < "/proc/$(cat "$PIDS/$name.pid")/cmdline" > "$PIDS/$name.cmd"
        stop "$name"
        log "halted $name"
    done
}

revive() {
    local name args
    for name in "$@"; do
        [ -f "$PIDS/$name.cmd" ] || die "revive: $name was not halted"
        mapfile -t args < "$PIDS/$name.cmd"
        start "$name" "${args[@]}"
        rm -f "$PIDS/$name.cmd"
    done
}

# --- bring-up ---------------------------------------------------------------------------

save_sysctls() {
    [ -f "$STATE/sysctls.saved" ] && return 0
    local k
    for k in "${SYSCTLS[@]}"; do
        [ -e "/proc/sys/${k//.//}" ] && echo "$k=$(cat "/proc/sys/${k//.//}")"
    done > "$STATE/sysctls.saved"
}

# The kubelet authorizes each scrape with the API server (SubjectAccessReview): Prometheus's
# user may get nodes/metrics and nothing else.
prometheus_rbac() {
    cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $PROMETHEUS_USER}
rules:
  - apiGroups: [""]
    resources: [nodes/metrics]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $PROMETHEUS_USER}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $PROMETHEUS_USER}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: $PROMETHEUS_USER}
EOF
}

start_prometheus() {
    local kubectl=$1
    prometheus_rbac | "$kubectl" --kubeconfig "$KC/admin.kubeconfig" apply -f - >/dev/null
    mkdir -p "$STATE/prometheus"
    cat > "$STATE/prometheus.yml" <<EOF
global:
  scrape_interval: 10s
  scrape_timeout: 5s
scrape_configs:
  - job_name: kubelet-cadvisor
    # cAdvisor stamps each sample with its own collection time, which moves only when it
    # refreshes the container (every 10-15 s): kept, a 30 s rate (Katalyst's cpu query) finds
    # one sample in some windows and has no point there. Stamped at the scrape, it finds three.
    honor_timestamps: false
    scheme: https
    metrics_path: /metrics/cadvisor
    tls_config:
      ca_file: $PKI/ca.crt
      cert_file: $PKI/prometheus.crt
      key_file: $PKI/prometheus.key
      server_name: $NODE
    static_configs:
      - targets: ["127.0.0.1:10250"]
        labels: {node: "$NODE"}
EOF
    start prometheus prometheus --config.file="$STATE/prometheus.yml" \
        --storage.tsdb.path="$STATE/prometheus" --storage.tsdb.retention.time=2d \
        --web.listen-address="$PROMETHEUS_LISTEN" --log.level=warn
    wait_for prometheus 60 curl -sf "http://$PROMETHEUS_LISTEN/-/ready"
}

install_pykatalyst_access() {
    local kubectl=$1 comp sa token
    "$kubectl" --kubeconfig "$KC/admin.kubeconfig" apply -f "$ROOT/deploy/crds/" >/dev/null
    "$kubectl" --kubeconfig "$KC/admin.kubeconfig" apply -f "$ROOT/deploy/manifests/namespace.yaml" \
        -f "$ROOT/deploy/manifests/agent-rbac.yaml" -f "$ROOT/deploy/manifests/scheduler-rbac.yaml" \
        -f "$ROOT/deploy/manifests/controller-rbac.yaml" >/dev/null
    "$kubectl" --kubeconfig "$KC/admin.kubeconfig" wait --for condition=established --timeout=60s \
        crd --all >/dev/null
    for comp in agent scheduler controller; do
        sa="katalyst-$comp"
        token=$("$kubectl" --kubeconfig "$KC/admin.kubeconfig" -n "$NAMESPACE" create token "$sa" \
            --duration=48h)
        kubeconfig_token "$KC/katalyst-$comp.kubeconfig" "system:serviceaccount:$NAMESPACE:$sa" "$token"
    done
}

up() {
    ensure_packages
    local bin
    bin=$(bin_dir)
    mkdir -p "$STATE" "$LOGS" "$PIDS" "$KC"
    save_sysctls
    make_pki
    kubeconfig_cert "$KC/admin.kubeconfig" admin admin
    kubeconfig_cert "$KC/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
    kubeconfig_cert "$KC/scheduler.kubeconfig" system:kube-scheduler scheduler
    kubeconfig_cert "$KC/kubelet.kubeconfig" "system:node:$NODE" kubelet-client

    start etcd "$bin/etcd" --name pykatalyst-test --data-dir "$STATE/etcd" \
        --listen-client-urls "$ETCD_CLIENT" --advertise-client-urls "$ETCD_CLIENT" \
        --listen-peer-urls "$ETCD_PEER" --initial-advertise-peer-urls "$ETCD_PEER" \
        --initial-cluster "pykatalyst-test=$ETCD_PEER" --listen-metrics-urls "" \
        --quota-backend-bytes 2147483648 --log-level warn
    wait_for etcd 30 curl -sf "$ETCD_CLIENT/health"

    start kube-apiserver "$bin/kube-apiserver" --etcd-servers="$ETCD_CLIENT" \
        --bind-address=127.0.0.1 --secure-port=6443 --advertise-address=127.0.0.1 \
        --endpoint-reconciler-type=none --service-cluster-ip-range="$SERVICE_CIDR" \
        --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=Hostname \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
        --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
        --requestheader-allowed-names=front-proxy-client \
        --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
        --requestheader-extra-headers-prefix=X-Remote-Extra- \
        --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
        --proxy-client-key-file="$PKI/front-proxy-client.key" --enable-aggregator-routing=true \
        --allow-privileged=true --profiling=false --v=1
    wait_for kube-apiserver 120 "$bin/kubectl" --kubeconfig "$KC/admin.kubeconfig" get --raw /readyz

    start_controller_manager
    start_scheduler

    containerd_config
    start containerd containerd --config "$CTRD/config.toml"
    wait_for containerd 30 ctr --address "$SOCK" version
    import_images
    [ -f "$STATE/kubelet-config.yaml" ] || kubelet_config
    start_kubelet
    wait_for "node $NODE" 90 "$bin/kubectl" --kubeconfig "$KC/admin.kubeconfig" get node "$NODE"
    install_pykatalyst_access "$bin/kubectl"
    wait_for "node $NODE Ready" 120 "$bin/kubectl" --kubeconfig "$KC/admin.kubeconfig" wait \
        --for=condition=Ready --timeout=5s node "$NODE"
    start_prometheus "$bin/kubectl"
    heal
    log "up: node $NODE is Ready; eval \"\$(bash scripts/cluster.sh env)\" to use it"
}

# kube-controller-manager and kube-scheduler exit on their own when etcd or the API server
# answers slowly or not at all (a loaded machine while they start, the fault tests): start
# such a one again, saying so with the end of its log, then see both healthy.
heal() {
    local d
    for d in kube-controller-manager kube-scheduler; do
        running "$d" && continue
        [ -f "$PIDS/$d.pid" ] || continue  # paused on purpose, or never started
        log "$d had exited; the end of $LOGS/$d.log:"
        tail -n 5 "$LOGS/$d.log" >&2 || true
        log "starting $d again"
        if [ "$d" = kube-controller-manager ]; then start_controller_manager; else start_scheduler; fi
    done
    running kube-controller-manager && \
        wait_for kube-controller-manager 60 curl -skf https://127.0.0.1:10257/healthz
    running kube-scheduler && wait_for kube-scheduler 60 curl -skf https://127.0.0.1:10259/healthz
    return 0
}

kubelet_restart() {
    local policy=${1:-}
    stop kubelet
    if [ -n "$policy" ] && [ "$policy" != "$(cat "$STATE/cpu-manager-policy" 2>/dev/null)" ]; then
        # The kubelet refuses to start on a checkpoint written under another policy.
        rm -f "$STATE/kubelet/cpu_manager_state" "$STATE/kubelet/memory_manager_state"
        kubelet_config "$policy"
    fi
    start_kubelet
}

# --- tear-down --------------------------------------------------------------------------

remove_cgroups() {
    local ctl dir
    for ctl in /sys/fs/cgroup/*/; do
        dir="${ctl}kubepods"
        [ -d "$dir" ] || continue
        # Deepest first: a cgroup can only be removed once it has no children.
        find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    [ -d /sys/fs/cgroup/unified/kubepods ] && rmdir /sys/fs/cgroup/unified/kubepods 2>/dev/null || true
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && [ -d /sys/fs/cgroup/kubepods ]; then
        find /sys/fs/cgroup/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
}

unmount_state() {
    local m
    # Innermost first: sort the mount points under the state dir by length, longest first.
    while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done < <(awk -v s="$STATE" 'index($2, s) == 1 {print length($2) " " $2}' /proc/mounts \
        | sort -rn | cut -d' ' -f2-)
}

kill_shims() {
    local pid
    for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" 2>/dev/null || true); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

down() {
    [ -d "$STATE" ] || { log "nothing to stop ($STATE does not exist)"; return 0; }
    stop prometheus
    stop kubelet
    if running containerd; then
        local crictl
        crictl=$(ls "$(dirname "$(ls -d "${PYKATALYST_CACHE:-$HOME/.cache/pykatalyst}"/k8s-*/bin/crictl 2>/dev/null | head -1)" 2>/dev/null)/crictl" 2>/dev/null || true)
        if [ -n "$crictl" ]; then
            CONTAINER_RUNTIME_ENDPOINT="unix://$SOCK" timeout 60 "$crictl" rmp -fa >/dev/null 2>&1 || true
        fi
    fi
    stop kube-scheduler
    stop kube-controller-manager
    stop kube-apiserver
    stop etcd
    stop containerd
    kill_shims
    # Processes left in the pods' cgroups (a container whose shim is gone) hold them.
    local ctl procs
    for ctl in /sys/fs/cgroup/*/kubepods; do
        [ -d "$ctl" ] || continue
        procs=$(find "$ctl" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
        [ -n "$procs" ] && kill -KILL $procs 2>/dev/null || true
    done
    sleep 0.5
    unmount_state
    local ns
    for ns in /run/netns/cni-*; do
        [ -e "$ns" ] || continue
        umount "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    remove_cgroups
    if [ -f "$STATE/sysctls.saved" ]; then
        sysctl -q -p "$STATE/sysctls.saved" >/dev/null 2>&1 || true
    fi
    rm -rf "$STATE"
    log "down: stopped and removed $STATE"
}

status() {
    local name
    for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet \
        prometheus; do
        if running "$name"; then echo "$name: running (pid $(cat "$PIDS/$name.pid"))"
        else echo "$name: stopped"; fi
    done
    if running kube-apiserver; then
        "$(bin_dir)/kubectl" --kubeconfig "$KC/admin.kubeconfig" get nodes -o wide || true
    fi
}

env_() {
    local bin
    bin=$(bin_dir)
    cat <<EOF
export KUBECONFIG=$KC/admin.kubeconfig
export PYKATALYST_CLUSTER_DIR=$STATE
export PYKATALYST_AGENT_KUBECONFIG=$KC/katalyst-agent.kubeconfig
export PYKATALYST_SCHEDULER_KUBECONFIG=$KC/katalyst-scheduler.kubeconfig
export PYKATALYST_CONTROLLER_KUBECONFIG=$KC/katalyst-controller.kubeconfig
export PYKATALYST_K8S_BIN=$bin
export CONTAINER_RUNTIME_ENDPOINT=unix://$SOCK
export IMAGE_SERVICE_ENDPOINT=unix://$SOCK
export NODE_NAME=$NODE
export PYKATALYST_PROMETHEUS_URL=http://$PROMETHEUS_LISTEN
export PATH=$bin:\$PATH
EOF
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    env) env_ ;;
    kubelet-restart) kubelet_restart "${2:-}" ;;
    build) bin_dir ;;
    pause) shift; pause "$@" ;;
    resume) shift; resume "$@" ;;
    halt) shift; halt "$@" ;;
    revive) shift; revive "$@" ;;
    heal) heal ;;
    *) echo "usage: $0 up|down|status|env|build|kubelet-restart [none|static]|pause NAME...|resume NAME...|halt NAME...|revive NAME...|heal" >&2
       exit 2 ;;
esac
