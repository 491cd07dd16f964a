"""Eviction configuration: Katalyst's defaults, refusals that name the field, and the
AdminQoSConfiguration overlay the agent picks up from the cluster."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pykatalyst.agent.eviction import EvictionConfig, EvictionStage
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock


def test_defaults_are_katalysts() -> None:
    cfg = EvictionConfig()
    assert cfg.sync_period_s == 5 and cfg.eviction_burst == 3
    assert cfg.condition_transition_period_s == 300
    rr = cfg.reclaimed_resource
    assert rr.eviction_threshold == {names.RECLAIMED_MILLICPU: 5.0, names.RECLAIMED_MEMORY: 5.0}
    assert rr.soft_eviction_threshold == {
        names.RECLAIMED_MILLICPU: 1.5,
        names.RECLAIMED_MEMORY: 1.2,
    }
    assert rr.deletion_grace_s == 60
    assert cfg.system_memory.kswapd_rate_threshold == 2000
    assert cfg.system_memory.kswapd_rate_exceed_duration_s == 120
    assert (cfg.numa_memory.reclaimed_times_threshold, cfg.numa_memory.any_times_threshold) == (
        6,
        12,
    )
    load = cfg.load
    assert (load.soft_ratio, load.hard_ratio, load.met_percentage, load.ring_size) == (
        1.0,
        1.8,
        0.8,
        10,
    )
    assert load.cool_down_s == 300


def test_bad_values_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="eviction_burst"):
        EvictionConfig.model_validate({"eviction_burst": 0})
    with pytest.raises(ValidationError, match="unknown resource 'cpu'"):
        EvictionConfig.model_validate({"reclaimed_resource": {"eviction_threshold": {"cpu": 2}}})
    with pytest.raises(ValidationError, match="evction_burst"):
        EvictionConfig.model_validate({"evction_burst": 2})


def aqc(eviction: dict[str, object]) -> AdminQoSConfiguration:
    return AdminQoSConfiguration.from_json(
        {
            "metadata": {"name": "default", "namespace": "kube-system"},
            "spec": {"config": {"evictionConfig": eviction}},
        }
    )


def test_admin_qos_overlay_sets_only_what_it_names() -> None:
    # Katalyst's KCC example raises the reclaimed threshold to 10 (legacy resource names)
    overlay = aqc(
        {
            "dryRun": [names.EVICTION_PLUGIN_NUMA_MEMORY],
            "reclaimedResourcesEvictionConfig": {
                "evictionThreshold": {
                    names.LEGACY_RECLAIMED_MILLICPU: 10,
                    names.LEGACY_RECLAIMED_MEMORY: 10,
                }
            },
            "memoryPressureEvictionConfig": {
                "enableNumaLevelEviction": False,
                "systemKswapdRateThreshold": 1,
            },
            "cpuPressureEvictionConfig": {"enableLoadEviction": True},
        }
    )
    base = EvictionConfig(eviction_burst=2)
    cfg = base.with_admin_qos(overlay)
    assert cfg.reclaimed_resource.eviction_threshold[names.RECLAIMED_MILLICPU] == 10
    assert cfg.reclaimed_resource.soft_eviction_threshold[names.RECLAIMED_MILLICPU] == 1.5
    assert cfg.is_dry_run(names.EVICTION_PLUGIN_NUMA_MEMORY)
    assert not cfg.numa_memory.enabled and cfg.system_memory.enabled
    assert cfg.system_memory.kswapd_rate_threshold == 1
    assert cfg.system_memory.kswapd_rate_exceed_duration_s == 120
    assert cfg.load.enabled and cfg.load.hard_ratio == 1.8
    assert cfg.eviction_burst == 2  # not an evictionConfig field: the agent's own setting


def test_an_admin_qos_without_eviction_config_changes_nothing() -> None:
    base = EvictionConfig(eviction_burst=2)
    empty = AdminQoSConfiguration.from_json({"metadata": {"name": "x", "namespace": "y"}})
    assert base.with_admin_qos(empty) is base


def test_the_stage_follows_the_admin_qos_in_the_cluster() -> None:
    cluster = MemoryCluster(clock=VirtualClock(0), namespaces=("default", "kube-system"))
    body = aqc(
        {"reclaimedResourcesEvictionConfig": {"evictionThreshold": {names.RECLAIMED_MILLICPU: 8}}}
    ).to_json()
    cluster.create(names.ADMIN_QOS_CONFIGURATION, body, "kube-system")
    stage = EvictionStage("n1", cluster, admin_qos="kube-system/default", config_ttl_s=15)
    stage.refresh_config(0)
    assert stage.manager.config.reclaimed_resource.eviction_threshold[names.RECLAIMED_MILLICPU] == 8
    cluster.delete(names.ADMIN_QOS_CONFIGURATION, "default", "kube-system")
    stage.refresh_config(5)  # within the TTL: not read again
    assert stage.config_warning is None
    stage.refresh_config(20)
    assert stage.config_warning is not None and "kube-system/default" in stage.config_warning
    assert stage.manager.config.reclaimed_resource.eviction_threshold[names.RECLAIMED_MILLICPU] == 8


def test_a_dry_run_agent_stays_dry_run_whatever_the_cluster_says() -> None:
    cluster = MemoryCluster(clock=VirtualClock(0), namespaces=("default", "kube-system"))
    cluster.create(names.ADMIN_QOS_CONFIGURATION, aqc({"dryRun": []}).to_json(), "kube-system")
    stage = EvictionStage("n1", cluster, dry_run=True, admin_qos="kube-system/default")
    assert stage.manager.config.is_dry_run(names.EVICTION_PLUGIN_SYSTEM_MEMORY)
    stage.refresh_config(0)
    assert stage.manager.config.is_dry_run(names.EVICTION_PLUGIN_RECLAIMED_RESOURCE)
