"""Agent configuration: Katalyst's defaults, validated, refused with the field named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pykatalyst.agent.config import (
    AgentConfig,
    ConfigError,
    load_config,
    parse_config,
    reclaim_setting,
)
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.api.qos import parse_pod_qos
from pykatalyst.api.qos_model import CPUBurst, PodQoS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent" / "agent-config.yaml"


def test_defaults_are_katalysts_reclaim_and_cpu_idle_included() -> None:
    cfg = AgentConfig()
    # A Katalyst user's config means what it meant: reclaim and cpu.idle stay off unless
    # the config turns them on.
    assert cfg.advisor.enable_reclaim is False
    assert cfg.reclaimed_cpu_idle is False
    assert reclaim_setting(cfg).startswith("reclaim off (advisor.enable_reclaim=false)")
    assert cfg.advisor.reserved_for_allocate_cpu == 4
    assert cfg.advisor.reserved_for_allocate_memory == 5 << 30
    assert cfg.advisor.max_ramp_up_step == 10 and cfg.advisor.max_ramp_down_step == 2
    assert cfg.reporter.sliding_window_s == 120
    assert cfg.reporter.min_reclaimed_for_report_cpu == 4
    assert cfg.cpu.ramp_up_period_s == 30


def test_example_file_loads_and_matches_the_defaults_but_turns_reclaim_on() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.advisor.enable_reclaim is True and cfg.reclaimed_cpu_idle is True
    assert "reclaim on" in reclaim_setting(cfg)
    on = AgentConfig.model_validate(
        {"reclaimed_cpu_idle": True, "advisor": {"enable_reclaim": True}}
    )
    assert cfg == on


@pytest.mark.parametrize(
    "path",
    [
        Path(__file__).resolve().parents[2] / "deploy" / "manifests" / "agent-config.yaml",
    ],
)
def test_the_shipped_agent_config_turns_reclaim_on(path: Path) -> None:
    import yaml

    text = yaml.safe_load(path.read_text())["data"]["agent.yaml"]
    cfg = parse_config(yaml.safe_load(text))
    assert cfg.advisor.enable_reclaim is True and cfg.reclaimed_cpu_idle is True


def test_quantities_are_accepted_for_cores_and_bytes() -> None:
    cfg = parse_config({"advisor": {"reserved_for_allocate_cpu": "1500m"}})
    assert cfg.advisor.reserved_for_allocate_cpu == 1.5
    cfg = parse_config({"reporter": {"min_step_memory": "1Gi"}})
    assert cfg.reporter.min_step_memory == 1 << 30


def test_the_fast_watch_is_on_and_takes_go_durations() -> None:
    cfg = parse_config({})
    assert cfg.reaction.enabled and cfg.reaction.period_s == 0.5
    cfg = parse_config({"reaction": {"period_s": "250ms", "cooldown_s": "3s", "grow_band": 0.5}})
    assert (cfg.reaction.period_s, cfg.reaction.cooldown_s) == (0.25, 3.0)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"advisor": {"usage_coefficient": 0}}, "advisor.usage_coefficient"),
        ({"advisor": {"reserved_for_allocate_memory": "lots"}}, "reserved_for_allocate_memory"),
        ({"cpu": {"reserved_cpu_list": "3-1"}}, "reserved_cpu_list"),
        ({"cpu": {"reserved_cpus": -1}}, "cpu.reserved_cpus"),
        ({"reporter": {"max_step_cpu": 1, "min_step_cpu": 2}}, "min_step_cpu"),
        ({"advisr": {}}, "advisr"),
        ({"period_s": 0}, "period_s"),
        ({"admin_qos_config": "no-namespace"}, "admin_qos_config"),
        ({"reclaimed_root": "kubepods/../etc"}, "reclaimed_root"),
        ({"reaction": {"period_s": "0s"}}, "reaction.period_s"),
        ({"reaction": {"cooldown_s": "soon"}}, "reaction.cooldown_s"),
        ({"reaction": {"grow_band": -0.1}}, "reaction.grow_band"),
    ],
)
def test_invalid_config_is_refused_naming_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert field in str(err.value)


def test_unreadable_or_malformed_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("advisor: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_admin_qos_overlay_changes_only_what_it_sets() -> None:
    aqc = AdminQoSConfiguration.from_json(
        {
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {
                "config": {
                    "reclaimedResourceConfig": {
                        "enableReclaim": False,
                        "minReclaimedResourceForReport": {"cpu": "2", "memory": "1Gi"},
                    }
                }
            },
        }
    )
    cfg = AgentConfig().with_admin_qos(aqc)
    assert cfg.advisor.enable_reclaim is False
    assert cfg.reporter.min_reclaimed_for_report_cpu == 2
    assert cfg.reporter.min_reclaimed_for_report_memory == 1 << 30
    assert cfg.advisor.reserved_for_allocate_cpu == 4
    empty = AdminQoSConfiguration.from_json({"metadata": {"name": "b", "namespace": "d"}})
    assert AgentConfig().with_admin_qos(empty) == AgentConfig()


def test_eviction_section_is_the_base_the_admin_qos_overlays(tmp_path: Path) -> None:
    from pykatalyst.agent.eviction import EvictionStage
    from pykatalyst.api import names
    from pykatalyst.apiserver.memory import MemoryCluster
    from pykatalyst.cluster.clock import VirtualClock

    path = tmp_path / "agent.yaml"
    path.write_text(
        "admin_qos_config: kube-system/eviction\n"
        "eviction:\n"
        "  eviction_burst: 1\n"
        "  dry_run: [system-memory-pressure-eviction-plugin]\n"
        "  reclaimed_resource:\n"
        "    eviction_threshold: {katalyst.kubewharf.io/reclaimed_memory: 3}\n"
    )
    cfg = load_config(path)
    assert cfg.eviction.eviction_burst == 1
    assert cfg.eviction.is_dry_run(names.EVICTION_PLUGIN_SYSTEM_MEMORY)
    assert not cfg.eviction.is_dry_run(names.EVICTION_PLUGIN_RECLAIMED_RESOURCE)
    # The legacy resource spelling is read as the current one; a map in the file replaces
    # the default map, so reclaimed cpu is not checked until the cluster sets it.
    assert cfg.eviction.reclaimed_resource.eviction_threshold == {names.RECLAIMED_MEMORY: 3.0}

    cluster = MemoryCluster(clock=VirtualClock(0), namespaces=("default", "kube-system"))
    aqc = {
        "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
        "kind": names.ADMIN_QOS_CONFIGURATION.kind,
        "metadata": {"name": "eviction", "namespace": "kube-system"},
        "spec": {
            "config": {
                "evictionConfig": {
                    "reclaimedResourcesEvictionConfig": {
                        "evictionThreshold": {names.RECLAIMED_MILLICPU: 8}
                    }
                }
            }
        },
    }
    cluster.create(names.ADMIN_QOS_CONFIGURATION, aqc, "kube-system")
    stage = EvictionStage("n1", cluster, cfg.eviction, admin_qos=cfg.admin_qos_config)
    stage.refresh_config(0)
    live = stage.manager.config
    assert live.reclaimed_resource.eviction_threshold == {
        names.RECLAIMED_MILLICPU: 8.0,
        names.RECLAIMED_MEMORY: 3.0,
    }
    assert live.eviction_burst == 1
    assert live.is_dry_run(names.EVICTION_PLUGIN_SYSTEM_MEMORY)


def test_reclaim_overlay_keeps_the_eviction_section() -> None:
    cfg = parse_config({"eviction": {"eviction_burst": 7, "load": {"enabled": True}}})
    aqc = AdminQoSConfiguration.from_json(
        {
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"config": {"reclaimedResourceConfig": {"enableReclaim": False}}},
        }
    )
    overlaid = cfg.with_admin_qos(aqc)
    assert overlaid.advisor.enable_reclaim is False
    assert overlaid.eviction == cfg.eviction


def test_admin_qos_overlap_switch_overlays_the_cpu_policy() -> None:
    base = AgentConfig()
    assert base.cpu.overlap_reclaim_with_share is False  # as Katalyst
    assert base.reclaimed_root == "auto" and base.reclaimed_root_quota is False
    aqc = AdminQoSConfiguration.from_json(
        {
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {
                "config": {
                    "advisorConfig": {
                        "cpuAdvisorConfig": {"allowSharedCoresOverlapReclaimedCores": True}
                    }
                }
            },
        }
    )
    on = base.with_admin_qos(aqc)
    assert on.cpu.overlap_reclaim_with_share is True
    assert on.advisor == base.advisor and on.cpu.ramp_up_period_s == base.cpu.ramp_up_period_s
    # an AdminQoSConfiguration that does not mention it leaves it alone
    silent = AdminQoSConfiguration.from_json({"metadata": {"name": "b", "namespace": "default"}})
    assert base.with_admin_qos(silent).cpu.overlap_reclaim_with_share is False


# A Katalyst user's cpu burst defaults: the KatalystCustomConfig that registers the kind
# and the AdminQoSConfiguration that sets them (katalyst-api's field names).
KATALYST_CPU_BURST = """
apiVersion: config.katalyst.kubewharf.io/v1alpha1
kind: KatalystCustomConfig
metadata:
  name: admin-qos-configuration
spec:
  targetType:
    group: config.katalyst.kubewharf.io
    resource: adminqosconfigurations
    version: v1alpha1
---
apiVersion: config.katalyst.kubewharf.io/v1alpha1
kind: AdminQoSConfiguration
metadata:
  name: default
  namespace: default
spec:
  config:
    fineGrainedResourceConfig:
      cpuBurstConfig:
        defaultCPUBurstPercent: 30
        enableDedicatedCoresDefaultCPUBurst: true
        enableSharedCoresDefaultCPUBurst: false
"""


def burst_pod(level: str, cpu_enhancement: str | None = None) -> PodQoS:
    ann = {names.QOS_LEVEL_ANNOTATION: level}
    if level == names.QOS_DEDICATED_CORES:
        ann[names.MEMORY_ENHANCEMENT_ANNOTATION] = '{"numa_binding": "true"}'
    if cpu_enhancement is not None:
        ann[names.CPU_ENHANCEMENT_ANNOTATION] = cpu_enhancement
    res = {"cpu": "2", "memory": "1Gi"}
    app = {"name": "app", "resources": {"requests": res, "limits": res}}
    return parse_pod_qos({"metadata": {"annotations": ann}, "spec": {"containers": [app]}})


def test_admin_qos_cpu_burst_defaults_reach_the_cpu_burst_decision() -> None:
    kcc, raw = yaml.safe_load_all(KATALYST_CPU_BURST)
    assert kcc["spec"]["targetType"]["resource"] == names.ADMIN_QOS_CONFIGURATION.plural
    base = AgentConfig()
    cfg = base.with_admin_qos(AdminQoSConfiguration.from_json(raw)).cpu
    dedicated, shared = burst_pod(names.QOS_DEDICATED_CORES), burst_pod(names.QOS_SHARED_CORES)
    # Katalyst's defaults: the policy stays default, the percent is 100
    assert base.cpu.cpu_burst(dedicated, 0) == CPUBurst(names.CPU_BURST_POLICY_DEFAULT, 100)
    # the configuration's: dedicated static, shared closed (even the only shared pod), 30 %
    assert cfg.cpu_burst(dedicated, 1) == CPUBurst(names.CPU_BURST_POLICY_STATIC, 30)
    assert cfg.cpu_burst(shared, 1) == CPUBurst(names.CPU_BURST_POLICY_CLOSED, 30)
    # a policy or percent the pod declares stands
    declared = burst_pod(names.QOS_DEDICATED_CORES, '{"cpu_burst_policy": "closed"}')
    assert cfg.cpu_burst(declared, 0).policy == names.CPU_BURST_POLICY_CLOSED
    own = burst_pod(names.QOS_SHARED_CORES, '{"cpu_burst_percent": "70"}')
    assert cfg.cpu_burst(own, 2).percent == 70
    # shared on: static only for the node's only shared pod
    raw["spec"]["config"]["fineGrainedResourceConfig"]["cpuBurstConfig"] = {
        "enableSharedCoresDefaultCPUBurst": True
    }
    on = base.with_admin_qos(AdminQoSConfiguration.from_json(raw)).cpu
    assert on.cpu_burst(shared, 1).policy == names.CPU_BURST_POLICY_STATIC
    assert on.cpu_burst(shared, 2).policy == names.CPU_BURST_POLICY_CLOSED
    # fields left out keep the agent's values
    assert on.default_cpu_burst_percent == 100 and on.dedicated_cores_default_cpu_burst is None


def test_an_out_of_range_cpu_burst_percent_is_refused_with_the_field_named() -> None:
    _, raw = yaml.safe_load_all(KATALYST_CPU_BURST)
    raw["spec"]["config"]["fineGrainedResourceConfig"]["cpuBurstConfig"] = {
        "defaultCPUBurstPercent": 150
    }
    with pytest.raises(ValueError, match="defaultCPUBurstPercent"):
        AdminQoSConfiguration.from_json(raw)
    with pytest.raises(ConfigError, match="default_cpu_burst_percent"):
        parse_config({"cpu": {"default_cpu_burst_percent": -1}})
