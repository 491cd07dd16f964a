"""Loading KubeSchedulerConfiguration files: Katalyst's policies, defaults, merge rules and
the messages for files kube-scheduler would refuse."""

from __future__ import annotations

import itertools
import textwrap

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.scheduler.args import NodeResourcesFitArgs, QoSAwareNodeResourcesFitArgs
from pykatalyst.scheduler.config import (
    NO_EFFECT,
    SchedulerConfigError,
    default_config,
    load_config,
    load_config_text,
)
from tests.scheduler.sched_helpers import EXAMPLES

HEAD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def cfg(body: str) -> str:
    return HEAD + textwrap.dedent(body)


def error_of(text: str) -> str:
    with pytest.raises(SchedulerConfigError) as exc:
        load_config_text(text)
    return str(exc.value)


@pytest.mark.parametrize(
    ("policy", "weight", "strategy"),
    [
        ("spread", 4, "LeastAllocated"),
        ("binpack", 15, "MostAllocated"),
        ("custom", 15, "RequestedToCapacityRatio"),
    ],
)
def test_katalyst_policy_files_load_unchanged(policy: str, weight: int, strategy: str) -> None:
    path = EXAMPLES / f"scheduler-policy-{policy}.yaml"
    if not path.exists():
        pytest.skip("Katalyst's example policies are not checked out next to this repository")
    config = load_config(path)
    assert config.api_version.endswith("/v1beta3")
    (prof,) = config.profiles
    assert prof.scheduler_name == names.DEFAULT_SCHEDULER_NAME
    fit = names.PLUGIN_QOS_AWARE_NODE_RESOURCES_FIT
    assert prof.score_weights[fit] == weight
    assert prof.score_weights[names.PLUGIN_QOS_AWARE_NODE_RESOURCES_BALANCED_ALLOCATION] == 1
    assert "NodeResourcesFit" not in prof.plugins_at("filter")
    assert "NodeResourcesFit" not in prof.plugins_at("score")
    assert "NodeResourcesBalancedAllocation" not in prof.plugins_at("score")
    for point in ("preFilter", "filter", "score", "reserve"):
        assert fit in prof.plugins_at(point)
    args = prof.args_of(fit)
    assert isinstance(args, QoSAwareNodeResourcesFitArgs)
    assert args.scoringStrategy.type == strategy
    # legacy resource names in the file are read as the current ones
    assert [r.name for r in args.scoringStrategy.reclaimedResources] == list(
        names.RECLAIMED_RESOURCES
    )
    native = prof.args_of("NodeResourcesFit")
    assert isinstance(native, NodeResourcesFitArgs)
    # the legacy group in the examples also covers the renamed group
    assert names.RESOURCE_GROUP in native.ignored_groups()


def test_default_profile_matches_kube_scheduler() -> None:
    (prof,) = default_config().profiles
    assert prof.scheduler_name == "default-scheduler"
    assert prof.plugins_at("filter")[:4] == (
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
    )
    assert dict(prof.score_weights) == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }
    assert prof.plugins_at("queueSort") == ("PrioritySort",)
    assert prof.plugins_at("bind") == ("DefaultBinder",)
    fit = prof.args_of("NodeResourcesFit")
    assert isinstance(fit, NodeResourcesFitArgs)
    assert fit.scoringStrategy.type == "LeastAllocated"
    assert [(r.name, r.weight) for r in fit.scoringStrategy.resources] == [
        ("cpu", 1),
        ("memory", 1),
    ]


def test_config_map_wrapping_a_v1_file() -> None:
    inner = textwrap.indent(
        cfg("""\
        profiles:
          - schedulerName: mine
        """),
        "    ",
    )
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  config.yaml: |\n" + inner
    config = load_config_text(text)
    assert [p.scheduler_name for p in config.profiles] == ["mine"]


def test_enabled_default_plugin_is_replaced_in_place_and_star_disables_all() -> None:
    config = load_config_text(
        cfg("""\
        profiles:
          - schedulerName: a
            plugins:
              score:
                enabled:
                  - name: NodeResourcesFit
                    weight: 7
          - schedulerName: b
            plugins:
              filter:
                disabled:
                  - name: "*"
                enabled:
                  - name: NodeName
        """)
    )
    a, b = config.profiles
    assert a.score_weights["NodeResourcesFit"] == 7
    # a specifically configured plugin keeps its place ahead of the multiPoint ones
    assert a.plugins_at("score")[0] == "NodeResourcesFit"
    assert b.plugins_at("filter") == ("NodeName",)


def test_zero_weights_default_to_one() -> None:
    config = load_config_text(
        cfg("""\
        profiles:
          - plugins:
              score:
                enabled:
                  - name: NodeResourcesFit
                    weight: 0
            pluginConfig:
              - name: NodeResourcesFit
                args:
                  scoringStrategy:
                    resources: [{name: cpu, weight: 0}]
        """)
    )
    prof = config.profiles[0]
    assert prof.score_weights["NodeResourcesFit"] == 1
    args = prof.args_of("NodeResourcesFit")
    assert isinstance(args, NodeResourcesFitArgs)
    assert args.scoringStrategy.resources[0].weight == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "profiles: [{plugins: {filter: {enabled: [{name: NodeResourcesFitt}]}}}]",
            "unknown plugin 'NodeResourcesFitt'",
        ),
        (
            "profiles: [{plugins: {filter: {enabled: [{name: ImageLocality}]}}}]",
            "plugin 'ImageLocality' does not extend filter",
        ),
        (
            "profiles: [{plugins: {score: {enabled: [{name: NodeAffinity, weight: -3}]}}}]",
            "plugins.score.enabled[NodeAffinity].weight: -3 must be a positive integer",
        ),
        (
            "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: "
            "{resources: [{name: cpu, weight: 101}]}}}]}]",
            "pluginConfig[NodeResourcesFit].args.scoringStrategy.resources[0].weight: "
            "weight 101 is not in the valid range [1, 100]",
        ),
        (
            "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: "
            "{type: RequestedToCapacityRatio, requestedToCapacityRatio: {shape: "
            "[{utilization: 50, score: 1}, {utilization: 10, score: 5}]}}}}]}]",
            "shape[1].utilization 10: utilization values must be sorted in strictly increasing",
        ),
        (
            "profiles: [{pluginConfig: [{name: QoSAwareNodeResourcesFit, args: {scoringStrategy: "
            "{type: RequestedToCapacityRatio, requestedToCapacityRatio: {shape: "
            "[{utilization: 0, score: 11}]}}}}]}]",
            "QoSAwareNodeResourcesFit].args.scoringStrategy.requestedToCapacityRatio.shape: "
            "shape[0].score 11 is not in the valid range [0, 10]",
        ),
        (
            "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: "
            "{type: RequestedToCapacityRatio}}}]}]",
            "requestedToCapacityRatio: required when type is RequestedToCapacityRatio",
        ),
        (
            "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: "
            "{type: Packed}}}]}]",
            "scoringStrategy.type: must be 'LeastAllocated'",
        ),
        ("profiles: [{schedulerName: x}, {schedulerName: x}]", "duplicate scheduler name"),
        ("percentageOfNodesToScore: 120", "percentageOfNodesToScore: 120 is not in the valid"),
        (
            "profiles: [{pluginConfig: [{name: NodeResourcesFit}, {name: NodeResourcesFit}]}]",
            "repeated config for plugin 'NodeResourcesFit'",
        ),
        ("profile: []", "profile: unknown field"),
        ("clientConnection: {burst: -1}", "clientConnection.burst: -1 must be greater than"),
        ("clientConnection: {qpss: 5}", "clientConnection.qpss: unknown field"),
        ("clientConnection: {qps: fast}", "clientConnection.qps: Input should be a valid number"),
    ],
)
def test_invalid_configs_are_refused_naming_the_problem(body: str, expected: str) -> None:
    assert expected in error_of(HEAD + body)


def test_unsupported_api_version_lists_accepted_ones() -> None:
    text = "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\n"
    msg = error_of(text)
    assert "'kubescheduler.config.k8s.io/v1beta2' is not supported" in msg
    assert "kubescheduler.config.k8s.io/v1beta3" in msg


def test_every_problem_is_reported_at_once() -> None:
    msg = error_of(
        cfg("""\
        profiles:
          - schedulerName: a
            plugins: {filter: {enabled: [{name: Nope}]}}
          - schedulerName: b
            plugins: {score: {enabled: [{name: AlsoNope}]}}
        """)
    )
    assert "'Nope'" in msg and "'AlsoNope'" in msg


def test_rtcr_reclaimed_shape_falls_back_to_native_shape() -> None:
    config = load_config_text(
        cfg("""\
        profiles:
          - pluginConfig:
              - name: QoSAwareNodeResourcesFit
                args:
                  scoringStrategy:
                    type: RequestedToCapacityRatio
                    requestedToCapacityRatio:
                      shape: [{utilization: 0, score: 10}, {utilization: 100, score: 0}]
        """)
    )
    args = config.profiles[0].args_of("QoSAwareNodeResourcesFit")
    assert isinstance(args, QoSAwareNodeResourcesFitArgs)
    reclaimed = args.scoringStrategy.reclaimedRequestedToCapacityRatio
    assert reclaimed is not None and reclaimed.shape[0].score == 10


def test_print_form_lists_plugins_weights_args_and_what_is_not_implemented() -> None:
    out = default_config().to_json()
    prof = out["profiles"][0]
    assert {"name": "TaintToleration", "weight": 3} in prof["plugins"]["score"]
    assert "DefaultPreemption" in prof["notImplemented"]
    assert "InterPodAffinity" not in prof["notImplemented"]
    assert any(c["name"] == "NodeResourcesFit" for c in prof["pluginConfig"])


def test_print_form_says_overcommit_ratios_are_not_applied() -> None:
    config = load_config_text(
        cfg("""\
        profiles:
          - plugins:
              filter:
                enabled: [{name: NodeOvercommitment}]
        """)
    )
    reason = config.profiles[0].to_json()["notImplemented"]["NodeOvercommitment"]
    # nothing in pykatalyst applies the ratios yet: the text must not promise otherwise
    assert "webhook" not in reason
    assert reason == (
        "this scheduler applies no overcommit ratio: pods are placed against the Node's "
        "allocatable as it is published"
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 105), st.integers(-2, 12)), min_size=0, max_size=5))
def test_shapes_are_accepted_exactly_when_kube_would(points: list[tuple[int, int]]) -> None:
    shape = ", ".join(f"{{utilization: {u}, score: {s}}}" for u, s in points)
    text = cfg(f"""\
        profiles:
          - pluginConfig:
              - name: NodeResourcesFit
                args:
                  scoringStrategy:
                    type: RequestedToCapacityRatio
                    requestedToCapacityRatio: {{shape: [{shape}]}}
        """)
    utils = [u for u, _ in points]
    valid = (
        bool(points)
        and all(0 <= u <= 100 and 0 <= s <= 10 for u, s in points)
        and all(a < b for a, b in itertools.pairwise(utils))
    )
    if valid:
        load_config_text(text)
    else:
        assert "requestedToCapacityRatio.shape" in error_of(text)


def test_client_connection_defaults_are_kube_schedulers() -> None:
    config = default_config()
    assert (config.client_qps, config.client_burst, config.kubeconfig) == (50.0, 100, "")


@settings(max_examples=50, deadline=None)
@given(qps=st.floats(-1e4, 1e4, allow_nan=False), burst=st.integers(0, 10**6))
def test_client_connection_qps_and_burst(qps: float, burst: int) -> None:
    config = load_config_text(
        cfg(f"clientConnection: {{qps: {qps!r}, burst: {burst}, kubeconfig: /etc/k.conf}}\n")
    )
    # 0 means kube-scheduler's default, a negative qps no limit at all (0 for our client)
    assert config.client_qps == (50.0 if qps == 0 else 0.0 if qps < 0 else qps)
    assert config.client_burst == (burst or 100)
    assert config.kubeconfig == "/etc/k.conf"
    again = load_config_text(
        HEAD + yaml.safe_dump({"clientConnection": config.to_json()["clientConnection"]})
    )
    assert (again.client_qps, again.client_burst) == (config.client_qps, config.client_burst)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("parallelism: 32\n", "parallelism"),
        ("enableProfiling: false\n", "enableProfiling"),
        ("enableContentionProfiling: false\n", "enableContentionProfiling"),
        (
            "clientConnection: {contentType: application/vnd.kubernetes.protobuf}\n",
            "clientConnection.contentType",
        ),
        (
            "clientConnection: {acceptContentTypes: 'application/json'}\n",
            "clientConnection.acceptContentTypes",
        ),
    ],
)
def test_fields_without_effect_are_accepted_and_said_to_have_none(body: str, field: str) -> None:
    config = load_config_text(cfg(body))
    assert config.no_effect == (field,)
    listed = config.to_json()["notImplemented"]
    assert list(listed) == [field] and listed[field] == NO_EFFECT[field]
    # a file that does not set it is not told about it
    assert "notImplemented" not in default_config().to_json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("parallelism: 0\n", "parallelism"),
        ("enableProfiling: [1]\n", "enableProfiling"),
        ("enableContentionProfiling: {}\n", "enableContentionProfiling"),
        ("clientConnection: {contentType: [json]}\n", "clientConnection.contentType"),
        ("delayCacheUntilActive: sometimes\n", "delayCacheUntilActive"),
    ],
)
def test_those_fields_are_still_checked(body: str, field: str) -> None:
    assert field in error_of(cfg(body))


def test_delay_cache_until_active_is_read_and_printed() -> None:
    assert default_config().delay_cache_until_active is False
    config = load_config_text(cfg("delayCacheUntilActive: true\n"))
    assert config.delay_cache_until_active is True
    assert config.no_effect == ()
    assert config.to_json()["delayCacheUntilActive"] is True
