"""deploy/charts/pykatalyst: what `helm install` puts on a cluster.

The chart is the one source of the manifests: the kustomize tree is rendered from it
(scripts/render_manifests.py), and these tests check that the files agree with the chart,
that its CRDs are deploy/crds/, that `helm lint` passes, that the values schema refuses
bad values naming the field, and that each setting of the values renders objects that fit
together: commands the CLI accepts, Services that select pods, webhooks that trust their
certificate, and an agent with exactly the node access it needs. Tests that run helm skip
when it is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykatalyst.api import names

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "charts" / "pykatalyst"
sys.path.insert(0, str(ROOT / "scripts"))
import render_manifests  # noqa: E402

HELM = render_manifests.find_helm()
needs_helm = pytest.mark.skipif(
    HELM is None, reason="helm is not on PATH nor in ~/.cache/pykatalyst (scripts/k8s-build.sh)"
)
JSON = dict[str, Any]


def _render(*sets: str, namespace: str = names.SYSTEM_NAMESPACE) -> list[JSON]:
    assert HELM is not None
    args = ["template", "pykatalyst", str(CHART), "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _refused(*sets: str) -> str:
    assert HELM is not None
    args = ["template", "pykatalyst", str(CHART)]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, f"helm accepted {sets}"
    return done.stderr


def _by(objs: list[JSON], kind: str) -> dict[str, JSON]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def _workloads(objs: list[JSON]) -> Iterator[JSON]:
    return (o for o in objs if o["kind"] in ("Deployment", "DaemonSet"))


# --- one source of truth --------------------------------------------------------------------


def test_the_charts_crds_are_deploy_crds() -> None:
    source = {p.name: p.read_bytes() for p in (ROOT / "deploy" / "crds").glob("*.yaml")}
    copied = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert source, "deploy/crds/ is empty"
    assert copied == source, "run: python3 scripts/render_manifests.py"


@needs_helm
def test_the_kustomize_tree_is_rendered_from_the_chart() -> None:
    assert HELM is not None
    bad = render_manifests.differences(HELM)
    assert not bad, f"{[str(p.relative_to(ROOT)) for p in bad]}: run scripts/render_manifests.py"


@needs_helm
def test_helm_lint_passes_with_every_optional_part() -> None:
    assert HELM is not None
    every = (
        "webhook.enabled=true,serviceMonitor.enabled=true,scheduler.mode=both,"
        "metricsApi.enabled=true"
    )
    for sets in ([], [every]):
        args = [f"--set={s}" for s in sets]
        done = subprocess.run(
            [HELM, "lint", "--strict", str(CHART), *args], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


# --- values ----------------------------------------------------------------------------------


def _schema() -> JSON:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def _leaves(values: Any, schema: JSON, path: str) -> Iterator[tuple[str, JSON | None]]:
    yield path, schema
    # free-form maps (agent.config, scheduler.config) are checked by the components
    if isinstance(values, dict) and schema.get("additionalProperties") is False:
        for key, sub in values.items():
            yield from _leaves(sub, schema["properties"].get(key, {}), f"{path}.{key}")


def test_every_value_is_in_the_schema_with_a_description() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path, node in _leaves(values, _schema(), ""):
        if path:
            assert node and node.get("description"), f"values{path} is not described"


@needs_helm
@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("scheduler.mode=sideways", "/scheduler/mode"),
        ("agent.port=0", "/agent/port"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("controller.taintAfter=soon", "/controller/taintAfter"),
        ("controller.replicas=0", "/controller/replicas"),
        ("webhook.failurePolicy=Maybe", "/webhook/failurePolicy"),
        ("agent.privilegd=false", "privilegd"),
        ("agent.kubeletConfig=config.yaml", "/agent/kubeletConfig"),
    ],
)
def test_the_schema_refuses_bad_values_naming_the_field(setting: str, field: str) -> None:
    assert field in _refused(setting)


# --- what each setting renders ---------------------------------------------------------------

SETTINGS = {
    "defaults": (),
    "extender": ("scheduler.mode=extender",),
    "both": ("scheduler.mode=both",),
    "everything": (
        "scheduler.mode=both",
        "webhook.enabled=true",
        "metricsApi.enabled=true",
        "serviceMonitor.enabled=true",
        "agent.privileged=false",
        "agent.hostRoot=/node",
        "agent.port=19316",
        "agent.kubeletConfig=/var/lib/kubelet/config.yaml",
        "controller.port=19090",
        "scheduler.port=18888",
    ),
}


@needs_helm
@pytest.mark.parametrize(
    ("mode", "standalone", "extender"),
    [("standalone", True, False), ("extender", False, True), ("both", True, True)],
)
def test_the_scheduler_mode_picks_the_deployments(
    mode: str, standalone: bool, extender: bool
) -> None:
    objs = _render(f"scheduler.mode={mode}")
    deployments = _by(objs, "Deployment")
    assert ("katalyst-scheduler" in deployments) is standalone
    assert ("katalyst-scheduler-extender" in deployments) is extender
    assert ("katalyst-scheduler-extender" in _by(objs, "Service")) is extender
    assert "katalyst-scheduler-config" in _by(objs, "ConfigMap")


@needs_helm
def test_components_can_be_left_out() -> None:
    objs = _render("agent.enabled=false", "controller.enabled=false", "scheduler.enabled=false")
    assert not list(_workloads(objs))
    assert not _by(objs, "ClusterRole")


@needs_helm
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_container_runs_a_command_the_cli_accepts(setting: str) -> None:
    from tests.deploy.test_deploy_manifests import _click_command, _parsed

    for w in _workloads(_render(*SETTINGS[setting])):
        for c in w["spec"]["template"]["spec"]["containers"]:
            command = c["args"][0]
            if command == "webhook":
                try:
                    _click_command("webhook")
                except AssertionError:
                    continue  # the chart registers it ahead of the command (docs/deploy.md)
            _parsed(c)
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe"):
                assert c[probe]["httpGet"]["port"] in ports, (w["metadata"]["name"], probe)


@needs_helm
def test_the_release_namespace_holds_everything_and_the_controllers_lease() -> None:
    objs = _render("scheduler.mode=both", "webhook.enabled=true", namespace="colo")
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    # but the controller's access to Katalyst's ConfigMap kube-system/oom-record
    elsewhere = {"katalyst-controller-oom-record": "kube-system"}
    for o in objs:
        if o["kind"] not in cluster_scoped:
            home = elsewhere.get(o["metadata"]["name"], "colo")
            assert o["metadata"]["namespace"] == home, (o["kind"], o["metadata"]["name"])
        for s in o.get("subjects", []):
            assert s["namespace"] == "colo"
    # the agent's node restriction names the agent's account in the release namespace
    [policy] = [o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    assert "'system:serviceaccount:colo:katalyst-agent'" in str(policy["spec"]["matchConditions"])
    controller = _by(objs, "Deployment")["katalyst-controller"]
    args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--lease-namespace=colo" in args


@needs_helm
def test_the_prometheus_value_reaches_the_controller_and_a_bad_one_is_refused() -> None:
    def args(*values: str) -> list[str]:
        objs = _render(*values)
        controller = _by(objs, "Deployment")["katalyst-controller"]
        return list(controller["spec"]["template"]["spec"]["containers"][0]["args"])

    assert not any("prometheus" in a for a in args())
    got = args("recommendation.prometheus.url=http://prom.monitoring:9090")
    assert "--resourcerecommend-prometheus-address=http://prom.monitoring:9090" in got
    assert "--resourcerecommend-prometheus-timeout=3m" in got
    assert "recommendation" in _refused("recommendation.prometheus.url=prom:9090")


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@needs_helm
def test_each_service_monitor_finds_a_metrics_port_of_its_component() -> None:
    objs = _render(
        "serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom", "webhook.enabled=true"
    )
    monitors = _by(objs, "ServiceMonitor")
    assert set(monitors) == {
        "katalyst-agent",
        "katalyst-controller",
        "katalyst-scheduler",
        "katalyst-webhook",
    }
    for mon in monitors.values():
        # every series carries the node its pod runs on (the dashboard's node variable)
        relabel = mon["spec"]["endpoints"][0]["relabelings"]
        assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in (
            relabel
        )
    assert monitors["katalyst-webhook"]["spec"]["endpoints"][0]["scheme"] == "https"
    services = list(_by(objs, "Service").values())
    for name, mon in monitors.items():
        assert mon["metadata"]["labels"]["release"] == "prom"
        svc = [
            s
            for s in services
            if _selects(mon["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert len(svc) == 1, name
        port = next(
            p for p in svc[0]["spec"]["ports"] if p["name"] == mon["spec"]["endpoints"][0]["port"]
        )
        pods = [
            w
            for w in _workloads(objs)
            if _selects(svc[0]["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]
        assert [w["metadata"]["name"] for w in pods] == [name]
        container = pods[0]["spec"]["template"]["spec"]["containers"][0]
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named[port["targetPort"]] == port["port"]


@needs_helm
def test_the_webhook_is_off_by_default_and_trusts_its_own_certificate() -> None:
    assert not any("Webhook" in o["kind"] for o in _render())
    objs = _render("webhook.enabled=true")
    secret = _by(objs, "Secret")["katalyst-webhook-tls"]
    ca = secret["data"]["ca.crt"]
    assert ca and secret["data"]["tls.crt"] and secret["data"]["tls.key"]
    service = _by(objs, "Service")["katalyst-webhook"]
    deployment = _by(objs, "Deployment")["katalyst-webhook"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "katalyst-webhook-tls"}} in volumes
    hooks = [
        h
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in _by(objs, kind)["katalyst-webhook"]["webhooks"]
    ]
    assert {h["rules"][0]["resources"][0] for h in hooks} == {
        "pods",
        "nodes/status",
        "katalystverticalpodautoscalers",
    }
    (kvpa,) = [h for h in hooks if h["rules"][0]["resources"] == ["katalystverticalpodautoscalers"]]
    assert kvpa["rules"][0]["apiGroups"] == ["autoscaling.katalyst.kubewharf.io"]
    assert kvpa["rules"][0]["apiVersions"] == ["v1alpha1"]
    for h in hooks:
        assert h["clientConfig"]["caBundle"] == ca
        ref = h["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == ("katalyst-webhook", names.SYSTEM_NAMESPACE)
        assert h["failurePolicy"] == "Ignore"
        # never its own namespace: a webhook that is down must not block its own pods
        excluded = h["namespaceSelector"]["matchExpressions"][0]["values"]
        assert names.SYSTEM_NAMESPACE in excluded and "kube-system" in excluded
    assert service["spec"]["ports"][0]["port"] == 443


@needs_helm
def test_the_webhook_can_take_its_certificate_from_cert_manager() -> None:
    assert "issuerRef.name" in _refused(
        "webhook.enabled=true", "webhook.certificate.source=certManager"
    )
    objs = _render(
        "webhook.enabled=true",
        "webhook.certificate.source=certManager",
        "webhook.certificate.issuerRef.name=ca",
    )
    cert = _by(objs, "Certificate")["katalyst-webhook"]
    assert cert["spec"]["secretName"] == "katalyst-webhook-tls"
    assert "katalyst-webhook.katalyst-system.svc" in cert["spec"]["dnsNames"]
    mutating = _by(objs, "MutatingWebhookConfiguration")["katalyst-webhook"]
    annotation = mutating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == "katalyst-system/katalyst-webhook"
    assert "Secret" not in {o["kind"] for o in objs}


# --- privileges ------------------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize("privileged", [True, False])
def test_the_agent_gets_exactly_the_node_access_it_needs(privileged: bool) -> None:
    objs = _render(f"agent.privileged={str(privileged).lower()}", "agent.hostRoot=/node")
    ds = _by(objs, "DaemonSet")["katalyst-agent"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    host = {
        m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], bool(m.get("readOnly")))
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    # no container runtime, nothing but /proc, /sys, cgroups, state and, read-only, the
    # kubelet's pod-resources socket (the static cpu manager's assignments)
    assert host == {
        "/node/proc": ("/proc", True),
        "/node/sys": ("/sys", True),
        "/node/sys/fs/cgroup": ("/sys/fs/cgroup", False),
        "/var/lib/pykatalyst": ("/var/lib/pykatalyst", False),
        "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", True),
    }
    assert "--host-root=/node" in container["args"]
    sc = container["securityContext"]
    assert sc["runAsUser"] == 0
    assert bool(sc.get("privileged")) is privileged
    if not privileged:
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True


@needs_helm
def test_the_other_components_never_run_as_root() -> None:
    objs = _render(*SETTINGS["everything"])
    for w in _workloads(objs):
        if w["kind"] == "DaemonSet":
            continue
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, w["metadata"]["name"]
        assert spec["securityContext"]["runAsUser"] != 0
        for c in spec["containers"]:
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert not spec.get("hostPID") and not spec.get("hostNetwork")
        assert not any("hostPath" in v for v in spec.get("volumes", []))


@needs_helm
def test_the_image_and_pull_secrets_reach_every_pod() -> None:
    digest = "sha256:" + "a" * 64
    objs = _render(
        *SETTINGS["everything"],
        "image.repository=registry.example.com/pykatalyst",
        f"image.digest={digest}",
        "imagePullSecrets[0].name=regcred",
    )
    for w in _workloads(objs):
        spec = w["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        for c in spec["containers"]:
            assert c["image"] == f"registry.example.com/pykatalyst@{digest}"
    default = _by(_render(), "DaemonSet")["katalyst-agent"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = default["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"pykatalyst:{chart['appVersion']}"


@needs_helm
def test_the_charts_webhook_role_is_the_manifests_least_privilege() -> None:
    chart = _by(_render("webhook.enabled=true"), "ClusterRole")["katalyst-webhook"]
    plain = next(
        d
        for d in yaml.safe_load_all(
            (ROOT / "deploy" / "manifests" / "webhook-rbac.yaml").read_text()
        )
        if d and d["kind"] == "ClusterRole"
    )
    assert chart["rules"] == plain["rules"]


@needs_helm
def test_a_second_release_renames_only_its_cluster_scoped_and_outside_objects() -> None:
    objs = _render("webhook.enabled=true", "clusterScopedSuffix=staging", namespace="kat-staging")
    cluster_kinds = {
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    for o in objs:
        name = o["metadata"]["name"]
        # shared with other releases too: the controller's Role in kube-system
        outside = o["metadata"].get("namespace") not in (None, "kat-staging")
        if o["kind"] in cluster_kinds or outside:
            assert name.endswith("-staging"), (o["kind"], name)
        elif o["kind"] != "CustomResourceDefinition":
            assert not name.endswith("-staging"), (o["kind"], name)
    for binding in _by(objs, "ClusterRoleBinding").values():
        assert binding["roleRef"]["name"] in _by(objs, "ClusterRole")
        assert binding["subjects"][0]["namespace"] == "kat-staging"
    assert "/clusterScopedSuffix" in _refused("clusterScopedSuffix=Not_A_Name")


@needs_helm
def test_host_network_and_an_api_server_address_reach_every_pod() -> None:
    default = _render("webhook.enabled=true", "scheduler.mode=both")
    for w in _workloads(default):
        spec = w["spec"]["template"]["spec"]
        assert "hostNetwork" not in spec
        env = {e["name"] for c in spec["containers"] for e in c.get("env", [])}
        assert "KUBERNETES_SERVICE_HOST" not in env
    objs = _render(
        "webhook.enabled=true",
        "scheduler.mode=both",
        "hostNetwork=true",
        "apiServer.host=10.1.2.3",
        "apiServer.port=6443",
    )
    workloads = list(_workloads(objs))
    assert len(workloads) == 5
    for w in workloads:
        spec = w["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        for c in spec["containers"]:
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["KUBERNETES_SERVICE_HOST"] == "10.1.2.3"
            assert env["KUBERNETES_SERVICE_PORT"] == "6443"


@needs_helm
def test_the_webhook_can_be_scoped_to_labelled_namespaces_and_leave_nodes_alone() -> None:
    objs = _render(
        "webhook.enabled=true", "webhook.mutateNodes=false", "webhook.namespaceSelector.team=a"
    )
    hooks = [
        h
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in _by(objs, kind)["katalyst-webhook"]["webhooks"]
    ]
    assert {h["rules"][0]["resources"][0] for h in hooks} == {
        "pods",
        "katalystverticalpodautoscalers",
    }
    for h in hooks:
        assert h["namespaceSelector"]["matchLabels"] == {"team": "a"}
        assert h["namespaceSelector"]["matchExpressions"][0]["operator"] == "NotIn"


@needs_helm
def test_the_agent_values_for_other_node_layouts() -> None:
    ds = _by(
        _render(
            "agent.podResourcesDir=/data/kubelet/pod-resources",
            "agent.cgroupMountPropagation=None",
        ),
        "DaemonSet",
    )["katalyst-agent"]
    spec = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/data/kubelet/pod-resources"
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert mounts["host-cgroup"]["mountPropagation"] == "None"
    assert "/agent/cgroupMountPropagation" in _refused("agent.cgroupMountPropagation=Bidirectional")


@needs_helm
def test_the_kubelets_config_is_mounted_read_only_only_when_named() -> None:
    def agent(*sets: str) -> JSON:
        ds = _by(_render(*sets), "DaemonSet")["katalyst-agent"]
        spec: JSON = ds["spec"]["template"]["spec"]
        return spec

    spec = agent()
    assert "kubelet-config" not in {v["name"] for v in spec["volumes"]}
    assert not any(a.startswith("--kubelet-config") for a in spec["containers"][0]["args"])
    spec = agent("agent.kubeletConfig=/etc/kubernetes/kubelet.conf.yaml")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["kubelet-config"]["hostPath"] == {
        "path": "/etc/kubernetes/kubelet.conf.yaml",
        "type": "File",
    }
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["kubelet-config"] == {
        "name": "kubelet-config",
        "mountPath": "/etc/kubelet/config.yaml",
        "readOnly": True,
    }
    assert "--kubelet-config=/etc/kubelet/config.yaml" in spec["containers"][0]["args"]


@needs_helm
def test_the_dra_plugin_runs_beside_the_agent_only_when_enabled() -> None:
    from pykatalyst.agent.config import AgentConfig
    from tests.deploy.test_deploy_manifests import _parsed

    def rendered(*sets: str) -> tuple[JSON, AgentConfig]:
        objs = _render(*sets)
        spec: JSON = _by(objs, "DaemonSet")["katalyst-agent"]["spec"]["template"]["spec"]
        data = _by(objs, "ConfigMap")["katalyst-agent-config"]["data"]["agent.yaml"]
        return spec, AgentConfig.model_validate(yaml.safe_load(data))

    spec, config = rendered()
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    assert not {"dra-plugins", "dra-registry"} & {v["name"] for v in spec["volumes"]}
    assert config.devices.dra.enabled is False  # nothing published by default
    spec, config = rendered(
        "dra.plugin.enabled=true", "agent.config.devices.dra.poll_s=3", "agent.privileged=false"
    )
    containers = {c["name"]: c for c in spec["containers"]}
    assert sorted(containers) == ["agent", "dra-plugin"]
    plugin = containers["dra-plugin"]
    command, params = _parsed(plugin)
    assert command == "dra-plugin" and params["in_cluster"] is True
    assert str(params["config"]) == "/etc/katalyst/agent.yaml"
    # the agent publishes, the plugin serves where the kubelet looks, both from one file
    dra = config.devices.dra
    assert (dra.enabled, dra.poll_s) == (True, 3.0)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {
        m["mountPath"]: volumes[m["name"]].get("hostPath", {}).get("path", m["name"])
        for m in plugin["volumeMounts"]
    }
    assert mounts == {
        "/etc/katalyst": "config",
        "/var/lib/kubelet/plugins": "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry": "/var/lib/kubelet/plugins_registry",
    }
    assert (dra.plugin_dir, dra.registry_dir) == (
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry",
    )
    assert plugin["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # another kubelet root: the same path on the node, in the pod and in the config
    spec, config = rendered("dra.plugin.enabled=true", "dra.plugin.dir=/data/kubelet/plugins")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dra-plugins"]["hostPath"]["path"] == "/data/kubelet/plugins"
    assert config.devices.dra.plugin_dir == "/data/kubelet/plugins"
    assert "/dra/plugin/dir" in _refused("dra.plugin.enabled=true", "dra.plugin.dir=plugins")


@needs_helm
def test_the_controller_can_run_in_dry_run() -> None:
    dep = _by(_render("controller.dryRun=true"), "Deployment")["katalyst-controller"]
    assert "--dry-run" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    dep = _by(_render(), "Deployment")["katalyst-controller"]
    assert "--dry-run" not in dep["spec"]["template"]["spec"]["containers"][0]["args"]


@needs_helm
def test_the_metrics_api_is_off_by_default_and_its_apiservice_trusts_its_certificate() -> None:
    assert not any(o["kind"] == "APIService" for o in _render())
    objs = _render("metricsApi.enabled=true", "controller.prometheusAddress=http://prom:9090")
    api = _by(objs, "APIService")["v1beta1.external.metrics.k8s.io"]
    secret = _by(objs, "Secret")["katalyst-metrics-tls"]
    assert api["spec"]["caBundle"] == secret["data"]["ca.crt"]
    assert api["spec"]["service"] == {
        "namespace": names.SYSTEM_NAMESPACE,
        "name": "katalyst-metrics",
        "port": 443,
    }
    assert "katalyst-metrics" in _by(objs, "Service")
    (c,) = _by(objs, "Deployment")["katalyst-metrics"]["spec"]["template"]["spec"]["containers"]
    assert c["args"][0] == "metrics" and "--in-cluster" in c["args"]
    # the request-header CA is read from kube-system, as every aggregated API server does
    (reader,) = [
        o
        for o in objs
        if o["kind"] == "RoleBinding"
        and o["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    ]
    assert reader["metadata"]["namespace"] == "kube-system"
    # and it may ask kube-apiserver what a caller may read (SubjectAccessReview)
    (delegator,) = [
        o
        for o in objs
        if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == "system:auth-delegator"
    ]
    assert delegator["subjects"] == [
        {"kind": "ServiceAccount", "name": "katalyst-metrics", "namespace": names.SYSTEM_NAMESPACE}
    ]
    ctl = _by(objs, "Deployment")["katalyst-controller"]["spec"]["template"]["spec"]["containers"]
    assert (
        "--spd-resource-portrait-indicator-plugin-prometheus-address=http://prom:9090"
        in ctl[0]["args"]
    )
