"""deploy/: what `kubectl apply -k deploy/` installs must be something the code can run.

Every manifest parses and is of a kind the cluster knows; every container runs a real
`katalyst` command with options the CLI accepts; every file a command is pointed at is
mounted from a ConfigMap whose content the component loads; and each component's RBAC
covers what its code does, checked twice: against a hand-kept list, and against the API
calls the component makes when it runs (recorded through the Cluster protocol)."""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cli.main import app
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON, ObjectList, Watch

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
WORKLOAD_KINDS = ("Deployment", "DaemonSet")
# libyaml where PyYAML has it: the manifests and CRDs are parsed for nearly every test
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NAMESPACED_KINDS = {"ServiceAccount", "ConfigMap", "Service", "Role", "RoleBinding"} | set(
    WORKLOAD_KINDS
)
KNOWN_KINDS = {
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
    ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
}


@functools.cache
def _parsed_docs(path: Path) -> tuple[JSON, ...]:
    return tuple(d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d is not None)


def _docs(path: Path) -> list[JSON]:
    """The file's documents: parsed once per run, a fresh copy for each caller."""
    return copy.deepcopy(list(_parsed_docs(path)))


def _yaml_files() -> list[Path]:
    """The kustomize tree's files (the chart's templates are not YAML until rendered; its
    CRDs are copies of deploy/crds/, tests/deploy/test_helm_chart.py)."""
    chart = DEPLOY / "charts"
    return sorted(
        p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and chart not in p.parents
    )


def _objects() -> list[JSON]:
    """The objects `kubectl apply -k deploy/` and `-k deploy/extender/` create."""
    out: list[JSON] = []
    for kustomization in (DEPLOY / "kustomization.yaml", DEPLOY / "extender/kustomization.yaml"):
        for res in _docs(kustomization)[0]["resources"]:
            out.extend(_docs(kustomization.parent / res))
    return out


def _of_kind(kind: str) -> list[JSON]:
    return [o for o in _objects() if o.get("kind") == kind]


def _containers() -> Iterator[tuple[JSON, JSON]]:
    for w in _objects():
        if w["kind"] in WORKLOAD_KINDS:
            for c in w["spec"]["template"]["spec"]["containers"]:
                yield w, c


# --- the files ------------------------------------------------------------------------------


# Namespaced objects that live outside the system namespace, and where.
OTHER_NAMESPACE = {
    ("Role", "katalyst-controller-oom-record"): names.KUBE_SYSTEM_NAMESPACE,
    ("RoleBinding", "katalyst-controller-oom-record"): names.KUBE_SYSTEM_NAMESPACE,
}


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_parses_into_known_kinds(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert (doc.get("apiVersion"), doc.get("kind")) in KNOWN_KINDS, (path, doc.get("kind"))
        if doc["kind"] in ("Kustomization", "KubeSchedulerConfiguration"):
            continue
        meta = doc["metadata"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", meta["name"]), meta["name"]
        if doc["kind"] in NAMESPACED_KINDS:
            # but the controller's access to Katalyst's kube-system/oom-record ConfigMap
            home = OTHER_NAMESPACE.get((doc["kind"], meta["name"]), names.SYSTEM_NAMESPACE)
            assert meta.get("namespace") == home, (path, meta)
        else:
            assert "namespace" not in meta, (path, meta)


def test_the_kustomization_installs_every_manifest_and_all_crds() -> None:
    listed = {(DEPLOY / r).resolve() for r in _docs(DEPLOY / "kustomization.yaml")[0]["resources"]}
    wanted = {p.resolve() for p in (DEPLOY / "crds").glob("*.yaml")}
    wanted |= {p.resolve() for p in (DEPLOY / "manifests").glob("*.yaml")}
    assert listed == wanted
    crds = {c["spec"]["names"]["kind"] for c in _of_kind("CustomResourceDefinition")}
    assert crds == {k.kind for k in names.KATALYST_KINDS}
    # Nothing is installed twice.
    keys = [(o["kind"], o["metadata"]["name"]) for o in _objects() if o["kind"] != "Namespace"]
    assert len(keys) == len(set(keys))


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl for kustomize")
@pytest.mark.parametrize("where", [".", "extender"])
def test_kubectl_renders_the_kustomizations(where: str) -> None:
    done = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / where)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    extender = where == "extender"
    files = [o for o in _objects() if ("extender" in o["metadata"]["name"]) == extender]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in files
    )


def test_the_dockerfile_installs_the_package_and_drops_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    # the package with the Kubernetes client, the kubelet's pod-resources client and the
    # autoscaling extra (crons, predictor), without the simulator's charting library
    installs = [x.rstrip(" \\") for x in lines if x.startswith("RUN pip install")]
    assert any(x.endswith("'.[kube,node,autoscale]'") for x in installs), installs
    assert not any("sim" in x or "dev" in x for x in installs)
    user = [x for x in lines if x.startswith("USER ")]
    assert user and not user[-1].split()[1].startswith("0")
    assert 'ENTRYPOINT ["katalyst"]' in lines
    # Every source the image copies exists in the repository.
    root = DEPLOY.parent
    for line in lines:
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (root / src).exists(), src


# --- the commands ---------------------------------------------------------------------------


def _click_command(name: str) -> Any:
    group: Any = typer.main.get_command(app)
    cmd = group.commands.get(name)
    assert cmd is not None, f"katalyst has no command {name!r}"
    return cmd


def _expand(arg: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        assert m.group(1) in env, f"$({m.group(1)}) is not set in the container's env"
        return env[m.group(1)]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, arg)


def _parsed(container: JSON) -> tuple[str, dict[str, Any]]:
    """The command and its options as the CLI itself parses them (types converted)."""
    assert container["command"] == ["katalyst"]
    env = {e["name"]: f"value-of-{e['name'].lower()}" for e in container.get("env", [])}
    args = [_expand(a, env) for a in container["args"]]
    cmd = _click_command(args[0])
    ctx = cmd.make_context(f"katalyst {args[0]}", args[1:])
    return args[0], dict(ctx.params)


@pytest.mark.parametrize(
    "container",
    [c for _, c in _containers()],
    ids=[f"{w['metadata']['name']}/{c['name']}" for w, c in _containers()],
)
def test_every_container_runs_a_katalyst_command_the_cli_accepts(container: JSON) -> None:
    # make_context parses the options the way the command line does: an unknown option, a
    # missing value or one of the wrong type (a port that is not a number) fails here.
    command, _ = _parsed(container)
    assert command in {"agent", "scheduler", "controller", "webhook"}


def _served_port(command: str, params: dict[str, Any]) -> int | None:
    """The port a command serves /healthz, /readyz and /metrics on, as its options say
    (every daemon: --listen HOST:PORT)."""
    listen = params.get("listen")
    return int(str(listen).rsplit(":", 1)[1]) if listen else None


@pytest.mark.parametrize(
    "container",
    [c for _, c in _containers()],
    ids=[f"{w['metadata']['name']}/{c['name']}" for w, c in _containers()],
)
def test_every_daemon_is_probed_on_the_health_endpoints_it_serves(container: JSON) -> None:
    command, params = _parsed(container)
    port = _served_port(command, params)
    assert port is not None, f"{command} serves no health endpoints with these args"
    # The kubelet probes the pod IP: a loopback-only server would never answer it.
    address = str(params.get("listen", "")).rpartition(":")[0]
    assert not address.startswith(("127.", "localhost", "[::1]")), address
    if "$(POD_IP)" in address:
        env = {e["name"]: e for e in container.get("env", [])}
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert named.get(get["port"], get["port"]) == port, probe


SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def test_every_component_talks_to_the_cluster_as_its_service_account() -> None:
    # Without --in-cluster or --kubeconfig a command runs on an empty embedded cluster.
    for workload, container in _containers():
        _, params = _parsed(container)
        if params.get("in_cluster"):
            assert params.get("kubeconfig") is None
            continue
        assert params.get("kubeconfig") is not None, container["name"]
        cm_name, key = _volume_file(workload, container, str(params["kubeconfig"]))
        kubeconfig = yaml.safe_load(_config_map(cm_name)["data"][key])
        (ctx,) = kubeconfig["contexts"]
        assert kubeconfig["current-context"] == ctx["name"]
        (user,) = [u["user"] for u in kubeconfig["users"] if u["name"] == ctx["context"]["user"]]
        (cluster,) = [
            c["cluster"] for c in kubeconfig["clusters"] if c["name"] == ctx["context"]["cluster"]
        ]
        assert user == {"tokenFile": f"{SA_DIR}/token"}
        assert cluster["certificate-authority"] == f"{SA_DIR}/ca.crt"
        assert cluster["server"].startswith("https://kubernetes.default.svc")
        assert workload["spec"]["template"]["spec"].get("automountServiceAccountToken", True)


def test_the_workloads_cover_every_component() -> None:
    parsed = [(w, _parsed(c)) for w, c in _containers()]
    kinds = {(cmd, w["kind"], bool(p.get("extender"))) for w, (cmd, p) in parsed}
    assert kinds == {
        ("agent", "DaemonSet", False),
        ("scheduler", "Deployment", False),
        ("scheduler", "Deployment", True),
        ("controller", "Deployment", False),
        ("webhook", "Deployment", False),
    }


def _volume_file(workload: JSON, container: JSON, path: str) -> tuple[str, str]:
    """The ConfigMap and key mounted at `path` in the container."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            cm = volumes[mount["name"]].get("configMap")
            assert cm is not None, f"{path} is not on a ConfigMap volume"
            return cm["name"], path[len(prefix) :]
    raise AssertionError(f"nothing is mounted at {path}")


def _config_map(name: str) -> JSON:
    found = [c for c in _of_kind("ConfigMap") if c["metadata"]["name"] == name]
    assert len(found) == 1, name
    return found[0]


def test_every_config_file_a_command_reads_is_a_mounted_config_map_it_loads(
    tmp_path: Path,
) -> None:
    from pykatalyst.agent.config import load_config as load_agent_config
    from pykatalyst.scheduler.config import load_config as load_scheduler_config

    checked = 0
    for workload, container in _containers():
        command, params = _parsed(container)
        if params.get("config") is None:
            continue
        cm_name, key = _volume_file(workload, container, str(params["config"]))
        text = _config_map(cm_name)["data"][key]
        file = tmp_path / f"{cm_name}-{key}"
        file.write_text(text)
        if command == "scheduler":
            cfg = load_scheduler_config(file)
            profiles = [p.scheduler_name for p in cfg.profiles]
            assert names.DEFAULT_SCHEDULER_NAME in profiles
            if params.get("profile") is not None:
                assert params["profile"] in profiles
        elif command == "agent":
            agent_cfg = load_agent_config(file)
            # The checkpoint must survive the container: it lies on the node's disk.
            assert agent_cfg.checkpoint_path is not None
            mounts = [m["mountPath"] for m in container["volumeMounts"]]
            assert any(agent_cfg.checkpoint_path.startswith(m + "/") for m in mounts)
        checked += 1
    assert checked >= 3  # agent, scheduler, extender


def test_the_scheduler_config_map_uses_katalysts_plugins_and_current_resource_names() -> None:
    text = (DEPLOY / "manifests/scheduler-config.yaml").read_text()
    result = CliRunner().invoke(
        app,
        [
            "scheduler",
            "--config",
            str(DEPLOY / "manifests/scheduler-config.yaml"),
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    for plugin in (
        names.PLUGIN_QOS_AWARE_NODE_RESOURCES_FIT,
        names.PLUGIN_QOS_AWARE_NODE_RESOURCES_BALANCED_ALLOCATION,
        names.PLUGIN_NODE_RESOURCE_TOPOLOGY,
    ):
        assert plugin in result.output
    for resource in names.RECLAIMED_RESOURCES:
        assert resource in text
    for legacy in (names.LEGACY_RECLAIMED_MILLICPU, names.LEGACY_RECLAIMED_MEMORY):
        assert legacy not in text.replace(names.RESOURCE_GROUP, "")


def test_the_extender_snippet_points_at_the_extender_service() -> None:
    snippet = _docs(DEPLOY / "extender/kube-scheduler-extender.yaml")[0]
    (ext,) = snippet["extenders"]
    service = next(s for s in _of_kind("Service") if "extender" in s["metadata"]["name"])
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    (port,) = [p["port"] for p in service["spec"]["ports"]]
    assert ext["urlPrefix"] == f"http://{host}:{port}"
    assert {m["name"] for m in ext["managedResources"]} == set(names.RECLAIMED_RESOURCES)
    assert all(m["ignoredByScheduler"] for m in ext["managedResources"])
    # The Service reaches the port the extender listens on.
    (workload,) = [
        w for w in _of_kind("Deployment") if w["metadata"]["name"] == service["metadata"]["name"]
    ]
    assert workload["spec"]["template"]["metadata"]["labels"].items() >= (
        service["spec"]["selector"].items()
    )
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    _, params = _parsed(container)
    listen_port = int(str(params["listen"]).rsplit(":", 1)[1])
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    target = service["spec"]["ports"][0]["targetPort"]
    assert named.get(target, target) == listen_port


# --- RBAC -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    group: str
    resource: str  # with its subresource: pods/eviction
    verb: str
    namespace: str | None = None  # None: cluster-wide (or any namespace)


def _need(kind: Kind, verb: str, sub: str | None = None, namespace: str | None = None) -> Need:
    return Need(kind.group, kind.plural + (f"/{sub}" if sub else ""), verb, namespace)


CNR = names.CUSTOM_NODE_RESOURCE
KVPA = names.KATALYST_VERTICAL_POD_AUTOSCALER
WORKLOADS = (names.DEPLOYMENT, names.STATEFUL_SET, names.REPLICA_SET)
# What each component's code does, kept by hand (the recorded runs below check it too).
HAND_KEPT: dict[str, list[Need]] = {
    "agent": [
        _need(names.POD, "list"),
        _need(names.POD, "watch"),
        _need(names.POD, "patch"),  # the device plugin's gpu_selection_result
        _need(names.POD, "create", "eviction"),
        _need(names.NODE, "get"),
        _need(names.NODE, "patch"),
        _need(names.NODE, "patch", "status"),
        _need(names.EVENT, "create"),
        _need(names.EVENT, "patch"),
        _need(CNR, "get"),
        _need(CNR, "create"),
        _need(CNR, "patch"),
        _need(CNR, "patch", "status"),
        _need(names.ADMIN_QOS_CONFIGURATION, "get"),
        _need(names.CUSTOM_NODE_CONFIG, "get"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "get"),
        # devices.dra.enabled: the node's ResourceSlices; `katalyst dra-plugin` its claims
        _need(names.RESOURCE_SLICE, "list"),
        _need(names.RESOURCE_SLICE, "create"),
        _need(names.RESOURCE_SLICE, "update"),
        _need(names.RESOURCE_SLICE, "delete"),
        _need(names.RESOURCE_CLAIM, "get"),
    ],
    "scheduler": [
        _need(names.POD, "get"),
        _need(names.POD, "list"),
        _need(names.POD, "watch"),
        _need(names.POD, "create", "binding"),
        _need(names.POD, "update", "status"),
        _need(names.NODE, "list"),
        _need(names.NODE, "watch"),
        _need(CNR, "list"),
        _need(CNR, "watch"),
        _need(names.EVENT, "create"),
        _need(names.EVENT, "patch"),
        _need(names.LEASE, "get", namespace=names.SYSTEM_NAMESPACE),
        _need(names.LEASE, "create", namespace=names.SYSTEM_NAMESPACE),
        _need(names.LEASE, "update", namespace=names.SYSTEM_NAMESPACE),
    ],
    "controller": [
        _need(CNR, "list"),
        _need(CNR, "watch"),
        _need(CNR, "get"),
        _need(CNR, "create"),
        _need(CNR, "patch"),
        _need(CNR, "delete"),
        _need(names.NODE, "get"),
        _need(names.NODE, "list"),
        _need(names.NODE, "watch"),
        _need(names.NODE, "patch"),
        _need(names.CUSTOM_NODE_CONFIG, "list"),
        _need(names.CUSTOM_NODE_CONFIG, "watch"),
        _need(names.CUSTOM_NODE_CONFIG, "create"),
        _need(names.CUSTOM_NODE_CONFIG, "patch"),
        _need(names.CUSTOM_NODE_CONFIG, "delete"),
        _need(names.CUSTOM_NODE_CONFIG, "patch", "status"),
        _need(names.KATALYST_CUSTOM_CONFIG, "list"),
        _need(names.KATALYST_CUSTOM_CONFIG, "watch"),
        _need(names.KATALYST_CUSTOM_CONFIG, "patch", "status"),
        _need(names.ADMIN_QOS_CONFIGURATION, "list"),
        _need(names.ADMIN_QOS_CONFIGURATION, "watch"),
        _need(names.ADMIN_QOS_CONFIGURATION, "patch", "status"),
        _need(names.NODE_OVERCOMMIT_CONFIG, "list"),
        _need(names.NODE_OVERCOMMIT_CONFIG, "watch"),
        _need(names.NODE_OVERCOMMIT_CONFIG, "patch", "status"),
        _need(names.POD, "list"),
        _need(names.POD, "watch"),
        _need(names.POD, "patch"),
        _need(names.POD, "patch", "resize"),
        _need(names.POD, "create", "eviction"),
        _need(names.POD, "patch"),
        _need(names.DEPLOYMENT, "list"),
        _need(names.DEPLOYMENT, "watch"),
        _need(names.STATEFUL_SET, "list"),
        _need(names.STATEFUL_SET, "watch"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "list"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "watch"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "create"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "patch"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "delete"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "patch", "status"),
        _need(names.RESOURCE_RECOMMEND, "list"),
        _need(names.RESOURCE_RECOMMEND, "watch"),
        _need(names.RESOURCE_RECOMMEND, "patch"),
        _need(names.RESOURCE_RECOMMEND, "patch", "status"),
        _need(names.CONFIG_MAP, "get", namespace=names.KUBE_SYSTEM_NAMESPACE),
        _need(names.CONFIG_MAP, "create", namespace=names.KUBE_SYSTEM_NAMESPACE),
        _need(names.CONFIG_MAP, "patch", namespace=names.KUBE_SYSTEM_NAMESPACE),
        *(_need(k, v) for k in WORKLOADS for v in ("list", "watch", "patch")),
        _need(KVPA, "list"),
        _need(KVPA, "watch"),
        _need(KVPA, "patch"),
        _need(KVPA, "patch", "status"),
        *(_need(names.VPA_RECOMMENDATION, v) for v in ("list", "watch", "create", "patch")),
        _need(names.VPA_RECOMMENDATION, "delete"),
        _need(names.VPA_RECOMMENDATION, "patch", "status"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "list"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "watch"),
        _need(names.EVENT, "create"),
        _need(names.EVENT, "patch"),
        _need(names.LEASE, "get", namespace=names.SYSTEM_NAMESPACE),
        _need(names.LEASE, "create", namespace=names.SYSTEM_NAMESPACE),
        _need(names.LEASE, "update", namespace=names.SYSTEM_NAMESPACE),
        # ihpa
        _need(names.INTELLIGENT_HPA, "list"),
        _need(names.INTELLIGENT_HPA, "watch"),
        _need(names.INTELLIGENT_HPA, "patch", "status"),
        _need(names.VIRTUAL_WORKLOAD, "list"),
        _need(names.VIRTUAL_WORKLOAD, "watch"),
        _need(names.VIRTUAL_WORKLOAD, "create"),
        _need(names.VIRTUAL_WORKLOAD, "patch"),
        _need(names.VIRTUAL_WORKLOAD, "patch", "status"),
        _need(names.HORIZONTAL_POD_AUTOSCALER, "list"),
        _need(names.HORIZONTAL_POD_AUTOSCALER, "watch"),
        _need(names.HORIZONTAL_POD_AUTOSCALER, "create"),
        _need(names.HORIZONTAL_POD_AUTOSCALER, "update"),
        *(_need(k, v) for k in names.WORKLOAD_KINDS for v in ("list", "watch", "patch")),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "list"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "watch"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "create"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "patch"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "patch", "status"),
    ],
    "webhook": [
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "list"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "watch"),
        _need(KVPA, "list"),
        _need(KVPA, "watch"),
        *(_need(k, v) for k in WORKLOADS for v in ("list", "watch")),
        _need(names.EVENT, "create"),
        _need(names.EVENT, "patch"),
    ],
}


# Granted but not in the hand-kept list on purpose: none but the scheduler's Lease rules,
# which its leader election (kept apart) owns.
GRANTED_APART: dict[str, set[tuple[str, str, str]]] = {
    "scheduler": {(names.LEASE.group, "leases", v) for v in ("get", "create", "update")},
}


def _service_account(command: str) -> tuple[str, str]:
    for workload, container in _containers():
        if _parsed(container)[0] == command:
            spec = workload["spec"]["template"]["spec"]
            return spec["serviceAccountName"], workload["metadata"]["namespace"]
    raise AssertionError(f"no workload runs katalyst {command}")


def _rules_for(sa: tuple[str, str]) -> list[tuple[JSON, str | None]]:
    """(rule, namespace it applies in; None: everywhere) granted to the ServiceAccount."""
    accounts = {
        (o["metadata"]["name"], o["metadata"]["namespace"]) for o in _of_kind("ServiceAccount")
    }
    assert sa in accounts, f"ServiceAccount {sa} is not installed"
    roles = {("ClusterRole", r["metadata"]["name"]): r for r in _of_kind("ClusterRole")}
    roles |= {("Role", r["metadata"]["name"]): r for r in _of_kind("Role")}
    out: list[tuple[JSON, str | None]] = []
    for binding in _of_kind("ClusterRoleBinding") + _of_kind("RoleBinding"):
        subjects = {
            (s["name"], s.get("namespace"))
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        }
        if sa not in subjects:
            continue
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"])]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        out.extend((rule, where) for rule in role["rules"])
    return out


def _allowed(rules: list[tuple[JSON, str | None]], need: Need) -> bool:
    for rule, where in rules:
        if where is not None and need.namespace != where:
            continue
        if (
            need.group in rule.get("apiGroups", [])
            and need.resource in rule.get("resources", [])
            and need.verb in rule.get("verbs", [])
            and not rule.get("resourceNames")
        ):
            return True
    return False


def test_rbac_grants_no_wildcards_and_no_secrets() -> None:
    for role in _of_kind("ClusterRole") + _of_kind("Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (role["metadata"]["name"], rule)
            assert "secrets" not in rule["resources"]
            assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"]


@pytest.mark.parametrize("command", sorted(HAND_KEPT))
def test_rbac_grants_nothing_beyond_the_hand_kept_list(command: str) -> None:
    # least privilege: every verb a role grants is one the component's code uses
    needed = {(n.group, n.resource, n.verb) for n in HAND_KEPT[command]}
    needed |= GRANTED_APART.get(command, set())
    granted = {
        (group, resource, verb)
        for rule, _ in _rules_for(_service_account(command))
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not granted - needed, f"katalyst {command} may do more than it does: {granted - needed}"


@pytest.mark.parametrize("command", sorted(HAND_KEPT))
def test_rbac_covers_the_hand_kept_list(command: str) -> None:
    rules = _rules_for(_service_account(command))
    missing = [n for n in HAND_KEPT[command] if not _allowed(rules, n)]
    assert not missing, f"katalyst {command} lacks {missing}"


_ADMISSION_OPERATION = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "delete": "DELETE",
}


def test_the_agent_may_write_only_its_own_node_and_cnr() -> None:
    # RBAC grants the agent every Node and CNR; the admission policy narrows each write to
    # the node named in the agent's token (its CEL is exercised on a real API server by
    # tests/e2e/test_e2e_node_restriction.py)
    [policy] = _of_kind("ValidatingAdmissionPolicy")
    [binding] = _of_kind("ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    user = "system:serviceaccount:{}:{}".format(*_service_account("agent")[::-1])
    assert [user in c["expression"] for c in spec["matchConditions"]] == [True]
    matched = {
        (group, resource, op)
        for rule in spec["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for op in rule["operations"]
    }
    writes = [
        (group, resource, _ADMISSION_OPERATION[verb])
        for rule, _ in _rules_for(_service_account("agent"))
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if resource.partition("/")[0] in (names.NODE.plural, CNR.plural)
        and verb in _ADMISSION_OPERATION
    ]
    assert writes and not set(writes) - matched, set(writes) - matched
    assert "authentication.kubernetes.io/node-name" in json.dumps(spec["variables"])


# The controller's role grants on these exactly what its hand-kept list says it uses.
EXACT_FOR_CONTROLLER = (
    CNR,
    names.NODE,
    names.CUSTOM_NODE_CONFIG,
    names.KATALYST_CUSTOM_CONFIG,
    names.ADMIN_QOS_CONFIGURATION,
    names.NODE_OVERCOMMIT_CONFIG,
)


def test_the_controller_role_grants_no_more_than_its_controllers_use() -> None:
    used = {(n.group, n.resource, n.verb) for n in HAND_KEPT["controller"]}
    watched = {(k.group, k.plural) for k in EXACT_FOR_CONTROLLER}
    extra = []
    for rule, _ in _rules_for(_service_account("controller")):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                if (group, resource.split("/")[0]) not in watched:
                    continue
                extra += [
                    (group, resource, v) for v in rule["verbs"] if (group, resource, v) not in used
                ]
    assert not extra, f"katalyst controller is granted what it never uses: {extra}"


class RecordingCluster:
    """A MemoryCluster that notes the RBAC request behind every call made through it."""

    def __init__(self, clock: VirtualClock) -> None:
        self.inner = MemoryCluster(clock=clock)
        self.clock = clock
        self.needs: set[Need] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _note(self, kind: Kind, verb: str, sub: str | None, ns: str | None) -> None:
        self.needs.add(_need(kind, verb, sub, ns if kind.namespaced else None))

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        self._note(kind, "get", None, namespace)
        return self.inner.get(kind, name, namespace)

    def list(self, kind: Kind, namespace: str | None = None, **kw: Any) -> ObjectList:
        self._note(kind, "list", None, namespace)
        return self.inner.list(kind, namespace, **kw)

    def watch(self, kind: Kind, namespace: str | None = None, **kw: Any) -> Watch:
        self._note(kind, "watch", None, namespace)
        return self.inner.watch(kind, namespace, **kw)

    def create(self, kind: Kind, obj: JSON, namespace: str | None = None) -> JSON:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        self._note(kind, "create", None, ns)
        return self.inner.create(kind, obj, namespace)

    def update(self, kind: Kind, obj: JSON) -> JSON:
        self._note(kind, "update", None, obj["metadata"].get("namespace"))
        return self.inner.update(kind, obj)

    def update_status(self, kind: Kind, obj: JSON) -> JSON:
        self._note(kind, "update", "status", obj["metadata"].get("namespace"))
        return self.inner.update_status(kind, obj)

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: Any = "merge",
        subresource: str | None = None,
    ) -> JSON:
        self._note(kind, "patch", subresource, namespace)
        return self.inner.patch(kind, name, patch, namespace, patch_type, subresource)

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JSON | None:
        self._note(kind, "delete", None, namespace)
        return self.inner.delete(kind, name, namespace, grace_period_seconds)

    def bind(self, namespace: str, name: str, node_name: str, annotations: Any = None) -> None:
        self._note(names.POD, "create", "binding", namespace)
        self.inner.bind(namespace, name, node_name, annotations)

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        self._note(names.POD, "create", "eviction", namespace)
        self.inner.evict(namespace, name, grace_period_seconds)


def _run_agent(cluster: RecordingCluster) -> None:
    """The agent on a node whose shared pod spikes: it publishes its CNR and the node's
    reclaimed resources, taints, evicts reclaimed pods and raises Events."""
    from pykatalyst.agent.agent import Agent
    from pykatalyst.agent.config import AgentConfig
    from pykatalyst.agent.enforcer import Enforcer
    from pykatalyst.agent.eviction import EvictionStage
    from pykatalyst.topology.machine import CPUTopology
    from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

    inner = cluster.inner
    inner.create(names.NODE, node_json("node-1"))
    topo = CPUTopology.synthetic(
        sockets=2, cores_per_socket=12, threads_per_core=2, memory_per_numa=96 * GIB
    )
    host = InMemoryHost(topo)
    cfg = AgentConfig.model_validate(
        {
            "advisor": {"reserved_for_allocate_cpu": 4},
            "admin_qos_config": f"{names.SYSTEM_NAMESPACE}/default",
        }
    )
    stage = EvictionStage("node-1", cluster, admin_qos=cfg.admin_qos_config)
    agent = Agent(
        "node-1",
        cluster,
        host,
        cluster.clock,
        cfg,
        Enforcer(host, None, cluster.clock),
        eviction_stages=[stage],
    )

    def add(name: str, **kw: Any) -> str:
        uid = str(inner.create(names.POD, pod_json(name, **kw), "default")["metadata"]["uid"])
        host.add_pod(uid)
        return uid

    web = add("web", cpu="4", memory="8Gi")
    host.set_load(web, 1.0)
    for i, size in enumerate(("12k", "24k")):
        add(
            f"batch-{i}",
            level=names.QOS_RECLAIMED_CORES,
            cpu=None,
            memory=None,
            reclaimed_cpu=size,
            reclaimed_memory="24Gi",
        )
    for step in range(240):
        if step == 60:
            host.set_load(web, 40.0)
        agent.reconcile(cluster.clock.now())
        cluster.clock.advance(5)


def _run_scheduler(cluster: RecordingCluster) -> None:
    from pykatalyst.scheduler.config import load_config_text
    from pykatalyst.scheduler.scheduler import Scheduler

    text = _config_map("katalyst-scheduler-config")["data"]["scheduler-config.yaml"]
    inner = cluster.inner
    alloc = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    inner.create(
        names.NODE,
        {"metadata": {"name": "node-1"}, "status": {"allocatable": alloc, "capacity": alloc}},
    )
    for name, cpu in (("fits", "1"), ("too-big", "64")):
        inner.create(
            names.POD,
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "schedulerName": names.DEFAULT_SCHEDULER_NAME,
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}
                    ],
                },
            },
            "default",
        )
    sched = Scheduler(cluster, load_config_text(text))
    for _ in range(3):
        sched.run_until_idle(cluster.clock.now())
        cluster.clock.advance(30)
    assert inner.get(names.POD, "fits", "default")["spec"].get("nodeName") == "node-1"


def _run_controller(cluster: RecordingCluster) -> None:
    """Every controller at work: a silent agent's node (backstop), an overcommit pool, a
    dynamic config, and the CNR and CNC of a Node that is gone (lifecycle)."""
    from pykatalyst.cli.controller import ControllerRunner
    from pykatalyst.controllers import BackstopConfig
    from pykatalyst.runtime.controller import CONTROLLERS
    from pykatalyst.runtime.leader import LeaderElector

    inner = cluster.inner
    pool = {names.OVERCOMMIT_NODE_POOL_LABEL: "pool-a"}
    inner.create(names.NODE, {"metadata": {"name": "node-1", "labels": pool}})
    inner.create(CNR, {"metadata": {"name": "node-1"}})  # an agent that never reported
    inner.create(CNR, {"metadata": {"name": "gone"}})
    inner.create(names.CUSTOM_NODE_CONFIG, {"metadata": {"name": "gone"}})
    inner.create(
        names.NODE_OVERCOMMIT_CONFIG,
        {
            "metadata": {"name": "pool-a"},
            "spec": {
                "nodeOvercommitSelectorVal": "pool-a",
                "resourceOvercommitRatio": {"cpu": "2"},
            },
        },
    )
    aqc = names.ADMIN_QOS_CONFIGURATION
    gvr = {"group": aqc.group, "version": aqc.version, "resource": aqc.plural}
    inner.create(
        names.KATALYST_CUSTOM_CONFIG,
        {"metadata": {"name": "aqc", "namespace": "default"}, "spec": {"targetType": gvr}},
        "default",
    )
    inner.create(aqc, {"metadata": {"name": "default", "namespace": "default"}}, "default")
    inner.create(
        names.POD,
        {
            "metadata": {
                "name": "batch",
                "namespace": "default",
                "annotations": {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES},
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
        },
        "default",
    )
    _vpa_scenario(inner)
    runner = ControllerRunner(
        cluster,
        BackstopConfig(),
        period_s=30,
        elector=LeaderElector(cluster, "replica-a"),
        controllers=CONTROLLERS,
    )
    for _ in range(1500):
        runner.step(cluster.clock.now())
        cluster.clock.advance(1)
    assert inner.get(names.POD, "batch", "default")["metadata"].get("deletionTimestamp")
    annotations = inner.get(names.NODE, "node-1")["metadata"]["annotations"]
    assert annotations[names.CPU_OVERCOMMIT_RATIO_ANNOTATION] == "2"
    status = inner.get(names.CUSTOM_NODE_CONFIG, "node-1")["status"]
    assert status["katalystCustomConfigList"][0]["configName"] == "default"


def _vpa_scenario(inner: Any) -> None:
    """A Deployment's pod, its KVPA (Inplace) and a VPARec: the vpa controller resizes the
    pod through pods/resize."""
    inner.create(
        names.DEPLOYMENT,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}},
        },
        "default",
    )
    res = {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}
    inner.create(
        names.POD,
        {
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": res}]},
        },
        "default",
    )
    kvpa = inner.create(
        KVPA,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "targetRef": {"kind": "Deployment", "name": "web"},
                "updatePolicy": {"podUpdatingStrategy": "Inplace"},
                "resourcePolicy": {"algorithmPolicy": {"recommender": "external"}},
            },
        },
        "default",
    )
    owner = {"apiVersion": KVPA.api_version, "kind": KVPA.kind, "name": "web"}
    rec = {"containerName": "c", "requests": {"resources": {"cpu": "150m"}}}
    inner.create(
        names.VPA_RECOMMENDATION,
        {
            "metadata": {
                "name": "web",
                "namespace": "default",
                "ownerReferences": [{**owner, "uid": kvpa["metadata"]["uid"]}],
            },
            "spec": {"containerRecommendations": [rec]},
        },
        "default",
    )


def _run_webhook(cluster: RecordingCluster) -> None:
    """The webhook's handlers in the cluster's admission chain, its SPD cache synced by
    the host's ticker, a pod of a workload with an SPD created."""
    from pykatalyst.webhook.service import WebhookService, install

    inner = cluster.inner
    service = WebhookService(cluster)
    install(inner, service)
    spd = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"}},
    }
    inner.create(names.SERVICE_PROFILE_DESCRIPTOR, spd, "default")
    # one it cannot read: a Warning Event on it
    bad = {"metadata": {"name": "bad", "namespace": "default"}, "spec": {"targetRef": "x"}}
    inner.create(names.SERVICE_PROFILE_DESCRIPTOR, bad, "default")
    for _ in range(2):
        service.sync(cluster.clock.now())
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u"}
    pod = {
        "metadata": {"name": "web-0", "namespace": "default", "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    created = inner.create(names.POD, pod, "default")
    assert created["metadata"]["annotations"][names.SPD_NAME_ANNOTATION] == "web"


RUNS = {
    "agent": _run_agent,
    "scheduler": _run_scheduler,
    "controller": _run_controller,
    "webhook": _run_webhook,
}


@pytest.mark.parametrize("command", sorted(RUNS))
def test_rbac_covers_every_call_the_component_makes(command: str) -> None:
    cluster = RecordingCluster(VirtualClock(100_000))
    RUNS[command](cluster)
    rules = _rules_for(_service_account(command))
    missing = sorted(
        (n for n in cluster.needs if not _allowed(rules, n)), key=lambda n: (n.resource, n.verb)
    )
    assert not missing, f"katalyst {command} made calls its role does not allow: {missing}"
    # The run did the work the role exists for (so the check above had something to check).
    assert cluster.needs >= SHOWN_BY_RUN[command]


SHOWN_BY_RUN = {
    "agent": {
        _need(names.POD, "watch"),
        _need(CNR, "create"),
        _need(CNR, "patch", "status"),
        _need(names.NODE, "patch", "status"),
        _need(names.POD, "create", "eviction", "default"),
        _need(names.EVENT, "create", namespace="default"),
    },
    "scheduler": {
        _need(names.POD, "watch"),
        _need(CNR, "watch"),
        _need(names.POD, "create", "binding", "default"),
        _need(names.EVENT, "create", namespace="default"),
    },
    "controller": {
        _need(CNR, "watch"),
        _need(CNR, "patch"),
        _need(CNR, "delete"),
        _need(names.CUSTOM_NODE_CONFIG, "create"),
        _need(names.CUSTOM_NODE_CONFIG, "delete"),
        _need(names.CUSTOM_NODE_CONFIG, "patch", "status"),
        _need(names.NODE, "patch"),
        _need(names.NODE_OVERCOMMIT_CONFIG, "patch", "status"),
        _need(names.KATALYST_CUSTOM_CONFIG, "patch", "status", "default"),
        _need(names.ADMIN_QOS_CONFIGURATION, "patch", "status", "default"),
        _need(names.POD, "create", "eviction", "default"),
        _need(names.POD, "patch", "resize", "default"),
        _need(names.POD, "patch", None, "default"),
        _need(KVPA, "patch", "status", "default"),
        _need(names.VPA_RECOMMENDATION, "patch", "status", "default"),
        _need(names.DEPLOYMENT, "patch", None, "default"),
        _need(names.LEASE, "update", namespace=names.SYSTEM_NAMESPACE),
    },
    "webhook": {
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "list"),
        _need(names.SERVICE_PROFILE_DESCRIPTOR, "watch"),
        _need(KVPA, "watch"),
        _need(names.DEPLOYMENT, "watch"),
    },
}


# --- privileges -------------------------------------------------------------------------------


def _workload_running(command: str) -> tuple[JSON, JSON, dict[str, Any]]:
    for workload, container in _containers():
        cmd, params = _parsed(container)
        if cmd == command:
            return workload, container, params
    raise AssertionError(f"no workload runs katalyst {command}")


def test_the_agent_sees_the_node_where_its_host_root_says() -> None:
    workload, container, params = _workload_running("agent")
    spec = workload["spec"]["template"]["spec"]
    assert spec["hostPID"] is True  # host-root/proc is the node's process table
    env = {e["name"]: e for e in container["env"]}
    node_arg = next(a for a in container["args"] if a.startswith("--node"))
    var = re.fullmatch(r"--node=\$\((\w+)\)", node_arg)
    assert var is not None
    assert env[var.group(1)]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    root = str(params["host_root"]).rstrip("/")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for host_path, writable in (("/proc", False), ("/sys", False), ("/sys/fs/cgroup", True)):
        mount = mounts[root + host_path]
        assert volumes[mount["name"]]["hostPath"]["path"] == host_path
        assert bool(mount.get("readOnly", False)) is not writable, host_path
    # cgroup writes need root; the tolerations let it run on every node.
    sc = container["securityContext"]
    assert sc.get("runAsUser") == 0 and sc.get("privileged") is True
    assert {"operator": "Exists"} in spec["tolerations"]


@pytest.mark.parametrize("command", ["scheduler", "controller", "webhook"])
def test_the_other_components_run_unprivileged(command: str) -> None:
    for workload, container in _containers():
        if _parsed(container)[0] != command:
            continue
        pod_sc = workload["spec"]["template"]["spec"]["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert not sc.get("privileged")


def test_controller_replicas_elect_a_leader_and_the_scheduler_never_runs_twice() -> None:
    workload, _, params = _workload_running("controller")
    assert workload["spec"]["replicas"] >= 2
    assert params["leader_elect"] is True
    assert "POD_NAME" in str(params["identity"]).upper()  # one identity per replica
    assert params["listen"] is not None
    for w in _of_kind("Deployment"):
        if w["metadata"]["name"].startswith(names.SCHEDULER_COMPONENT):
            assert w["spec"]["replicas"] == 1
            assert w["spec"]["strategy"]["type"] == "Recreate"
            # a second replica during a rollout would only follow: it elects by default
            (container,) = w["spec"]["template"]["spec"]["containers"]
            _, sched = _parsed(container)
            if not sched.get("extender"):
                assert sched["leader_elect"] is True


# --- the agent's command line, end to end ---------------------------------------------------


def _pretend_in_cluster(monkeypatch: pytest.MonkeyPatch, url: str, sa: Path) -> None:
    """What a pod sees: KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount files (here under
    `sa`). The official client's own in-cluster loader reads them; only the scheme is
    turned back to the test server's plain HTTP, since the loader always says https."""
    from urllib.parse import urlsplit

    from kubernetes.config import incluster_config

    from pykatalyst.cluster.kube import KubeCluster

    where = urlsplit(url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(where.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(where.port))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(sa / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(sa / "ca.crt"))
    real = KubeCluster.in_cluster

    def over_http(**kw: Any) -> KubeCluster:
        cluster = real(**kw)
        assert cluster.host == f"https://{where.netloc}"
        configuration = cluster._client.configuration
        # The loader re-applies its settings (fresh token, https host, and its own hook)
        # before each request.
        refresh = configuration.refresh_api_key_hook

        def refresh_over_http(conf: Any) -> None:
            if refresh is not None:
                refresh(conf)
            conf.host = url.rstrip("/")
            conf.refresh_api_key_hook = refresh_over_http

        configuration.refresh_api_key_hook = refresh_over_http
        configuration.host = url.rstrip("/")
        return cluster

    monkeypatch.setattr(KubeCluster, "in_cluster", over_http)


@pytest.mark.parametrize("version", [1, 2])
def test_the_daemonsets_agent_command_runs_against_a_node_tree_and_a_cluster(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DaemonSet's own arguments, with its mounts laid out under tmp_path: the node's
    filesystem at /host (a fake kubelet node, cgroup v1 or v2), the ConfigMap at
    /etc/katalyst, and the ServiceAccount files (named by a kubeconfig, or found by
    `--in-cluster` with the KUBERNETES_SERVICE_* environment Kubernetes sets); the API
    server is the embedded one over HTTP."""
    from pykatalyst.runtime.apiserver import ApiServer
    from tests.fixtures.fake_node import make_kubelet_tree

    workload, container, _ = _workload_running("agent")
    spec = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    # Where each mount of the container lands on this machine.
    places: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        place = tmp_path / mount["name"]
        places[mount["mountPath"]] = place
        cm = volumes[mount["name"]].get("configMap")
        if cm is not None:
            place.mkdir()
            for key, text in _config_map(cm["name"])["data"].items():
                (place / key).write_text(text)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("a-service-account-token")
    # The in-cluster loader refuses an empty CA file; plain HTTP never reads it.
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    # The node's /proc, /sys and cgroups are one tree; the three mounts show parts of it.
    host = tmp_path / "node"
    make_kubelet_tree(host, version=version)
    root = "/host"
    assert places[root + "/proc"] and places[root + "/sys/fs/cgroup"]

    def local(path: str) -> str:
        if path.startswith(root + "/") or path == root:
            return str(host) + path[len(root) :]
        for mount_path, place in sorted(places.items(), key=lambda kv: -len(kv[0])):
            if path.startswith(mount_path + "/"):
                return str(place) + path[len(mount_path) :]
        return path

    store = MemoryCluster(clock=VirtualClock(1_700_000_000.0))
    store.create(names.NODE, {"metadata": {"name": "node-7"}})
    with ApiServer(store, bookmark_seconds=0) as server:
        # Point the ConfigMap's files at this machine: the server, the SA files, the state.
        for place in places.values():
            for file in place.glob("*") if place.is_dir() else ():
                text = file.read_text()
                text = text.replace("https://kubernetes.default.svc:443", server.url)
                text = text.replace(SA_DIR, str(sa))
                for other_path, other_place in places.items():
                    text = text.replace(other_path + "/", str(other_place) + "/")
                file.write_text(text)
        env = {"NODE_NAME": "node-7", "POD_IP": "127.0.0.1"}
        args = [_expand(a, env) for a in container["args"]]
        if "--in-cluster" in args:
            _pretend_in_cluster(monkeypatch, server.url, sa)
        args = [
            f"{a.split('=', 1)[0]}={local(a.split('=', 1)[1])}" if "=/" in a else a for a in args
        ]
        result = CliRunner().invoke(app, [*args, "--once"])
        assert result.exit_code == 0, result.output
    cnr = store.get(names.CUSTOM_NODE_RESOURCE, "node-7")
    conditions = {c["type"]: c for c in cnr.get("status", {}).get("conditions", [])}
    assert names.CNR_CONDITION_AGENT_READY in conditions


# --- admission webhooks -----------------------------------------------------------------------


def _webhooks() -> list[JSON]:
    out: list[JSON] = []
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for cfg in _of_kind(kind):
            out.extend(cfg["webhooks"])
    return out


def test_the_webhooks_reach_the_routes_the_webhook_serves() -> None:
    from pykatalyst.webhook.service import WebhookService

    routes = {r.path for r in WebhookService(None).routes}
    service = next(s for s in _of_kind("Service") if s["metadata"]["name"] == "katalyst-webhook")
    (port,) = service["spec"]["ports"]
    _, container, params = _workload_running("webhook")
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == int(str(params["listen"]).rsplit(":", 1)[1])
    hooks = _webhooks()
    assert {h["clientConfig"]["service"]["path"] for h in hooks} == routes
    for hook in hooks:
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["port"]) == (
            "katalyst-webhook",
            names.SYSTEM_NAMESPACE,
            port["port"],
        )


def test_a_webhook_outage_never_blocks_the_cluster() -> None:
    for hook in _webhooks():
        assert hook["failurePolicy"] == "Ignore", hook["name"]
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert 1 <= hook["timeoutSeconds"] <= 10
        (rule,) = hook["rules"]
        if rule["resources"] == ["nodes/status"]:
            assert rule["operations"] == ["UPDATE"]
            continue
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        assert set(expr["values"]) >= {names.KUBE_SYSTEM_NAMESPACE, names.SYSTEM_NAMESPACE}


def test_the_agent_reaches_the_kubelets_pod_resources_socket_read_only() -> None:
    from pykatalyst.agent.config import AgentConfig

    (agent,) = [w for w in _of_kind("DaemonSet") if w["metadata"]["name"] == "katalyst-agent"]
    spec = agent["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (container,) = spec["containers"]
    socket = AgentConfig().kubelet.pod_resources_socket
    mounts = [m for m in container["volumeMounts"] if socket.startswith(m["mountPath"] + "/")]
    assert len(mounts) == 1 and mounts[0].get("readOnly") is True, mounts
    host = volumes[mounts[0]["name"]]["hostPath"]["path"]
    assert host == mounts[0]["mountPath"] == "/var/lib/kubelet/pod-resources"
