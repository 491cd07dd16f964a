from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.api.qos import (
    K8S_QOS_BEST_EFFORT,
    K8S_QOS_BURSTABLE,
    K8S_QOS_GUARANTEED,
    QoSError,
    guaranteed_cpus,
    k8s_qos_class,
    parse_numa_ids,
    parse_pod_qos,
    validate_pod_qos,
)

MEM = names.MEMORY_ENHANCEMENT_ANNOTATION
CPU = names.CPU_ENHANCEMENT_ANNOTATION
NET = names.NETWORK_ENHANCEMENT_ANNOTATION
LEVEL = names.QOS_LEVEL_ANNOTATION


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": extra.pop("name", "app"), "image": "busybox", "resources": resources, **extra}


GUARANTEED = container({"cpu": "2", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})
RECLAIMED = container(
    {names.RECLAIMED_MILLICPU: "2k", names.RECLAIMED_MEMORY: "1Gi"},
    {names.RECLAIMED_MILLICPU: "2k", names.RECLAIMED_MEMORY: "1Gi"},
)


def pod(
    annotations: dict[str, Any] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers if containers is not None else [GUARANTEED]}
    if init is not None:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}},
        "spec": spec,
    }


def dedicated(mem: dict[str, str], **more: str) -> dict[str, Any]:
    return pod({LEVEL: names.QOS_DEDICATED_CORES, MEM: json.dumps(mem), **more})


def errors(p: dict[str, Any]) -> list[str]:
    return [x.field for x in validate_pod_qos(p) if x.severity == "error"]


# --- levels -----------------------------------------------------------------------------


def test_no_annotation_means_shared_cores() -> None:
    assert parse_pod_qos(pod()).level == names.QOS_SHARED_CORES
    assert parse_pod_qos({"metadata": {}, "spec": {"containers": []}}).level == "shared_cores"


@pytest.mark.parametrize(
    "level", [names.QOS_DEDICATED_CORES, names.QOS_SHARED_CORES, names.QOS_RECLAIMED_CORES]
)
def test_numa_binding_levels_are_read(level: str) -> None:
    mem = json.dumps({"numa_binding": "true"})
    containers = [RECLAIMED] if level == names.QOS_RECLAIMED_CORES else [GUARANTEED]
    qos = parse_pod_qos(pod({LEVEL: level, MEM: mem}, containers))
    assert qos.level == level
    assert qos.numa_binding


def warned(qos: Any, field: str) -> bool:
    return any(w.field == field for w in qos.warnings)


def test_system_cores_ignore_numa_binding_as_katalyst_does() -> None:
    qos = parse_pod_qos(pod({LEVEL: "system_cores", MEM: '{"numa_binding": "true"}'}))
    assert qos.is_system and not qos.numa_binding
    assert warned(qos, f"metadata.annotations[{MEM}].numa_binding")


def test_system_cores_with_pool() -> None:
    qos = parse_pod_qos(pod({LEVEL: "system_cores", CPU: '{"cpuset_pool": "sys-agents"}'}))
    assert qos.level == names.QOS_SYSTEM_CORES
    assert qos.cpuset_pool == "sys-agents"
    assert qos.oom_priority == 200


def test_unknown_level_names_annotation_value_and_choices() -> None:
    with pytest.raises(QoSError) as info:
        parse_pod_qos(pod({LEVEL: "premium_cores"}))
    err = info.value
    assert err.field == f"metadata.annotations[{LEVEL}]"
    assert err.value == "premium_cores"
    for level in names.QOS_LEVELS:
        assert level in err.accepted
    text = str(err)
    assert "can't get valid qos level" in text and "premium_cores" in text and LEVEL in text


def test_empty_level_is_rejected_like_katalyst() -> None:
    with pytest.raises(QoSError):
        parse_pod_qos(pod({LEVEL: ""}))


# --- enhancement JSON -------------------------------------------------------------------


def test_malformed_enhancement_json_reads_as_empty() -> None:
    qos = parse_pod_qos(pod({MEM: '{"numa_binding": "true",}'}))
    assert not qos.numa_binding and qos.enhancements.raw[MEM] == {}
    (warning,) = qos.warnings
    assert warning.field == f"metadata.annotations[{MEM}]"
    assert "malformed JSON" in str(warning) and "empty" in str(warning)


@pytest.mark.parametrize("text", ["[]", '"x"', "1", "null"])
def test_enhancement_that_is_not_an_object_reads_as_empty(text: str) -> None:
    qos = parse_pod_qos(pod({CPU: text}))
    assert qos.enhancements.raw[CPU] == {}
    assert "must hold a JSON object" in str(qos.warnings[0])


def test_enhancement_values_that_are_not_strings_read_as_empty() -> None:
    qos = parse_pod_qos(pod({MEM: '{"numa_binding": true, "oom_priority": "50"}'}))
    assert not qos.numa_binding and qos.oom_priority == 50
    (warning,) = qos.warnings
    assert warning.field == f"metadata.annotations[{MEM}].numa_binding"
    assert "JSON strings" in str(warning) and '"true"' in warning.accepted


@pytest.mark.parametrize("value", ["True", "TRUE", "yes", "1", ""])
def test_booleans_other_than_true_read_as_false_like_katalyst(value: str) -> None:
    qos = parse_pod_qos(pod({MEM: json.dumps({"numa_binding": value})}))
    assert not qos.numa_binding
    assert warned(qos, f"metadata.annotations[{MEM}].numa_binding")


def test_unknown_keys_are_kept_and_warned() -> None:
    qos = parse_pod_qos(pod({CPU: '{"future_knob": "on", "cpu_burst_policy": "dynamic"}'}))
    assert qos.enhancements.raw[CPU]["future_knob"] == "on"
    assert qos.enhancements.cpu_burst_policy == "dynamic"
    assert [w.field for w in qos.warnings] == [f"metadata.annotations[{CPU}].future_knob"]


def test_key_in_the_wrong_annotation_is_warned_not_applied() -> None:
    qos = parse_pod_qos(pod({CPU: '{"numa_binding": "true"}'}))
    assert qos.enhancements.numa_binding is False
    assert MEM in qos.warnings[0].accepted


@pytest.mark.parametrize(
    ("annotation", "key", "value"),
    [
        (MEM, "oom_priority", "high"),
        (MEM, "rss_overuse_threshold", "0"),
        (CPU, "cpu_burst_policy", "turbo"),
        (CPU, "cpu_burst_percent", "-1"),
        (CPU, "cpuset_pool", "bad pool"),
        (NET, "namespace_type", "guest_ns"),
    ],
)
def test_known_keys_are_validated(annotation: str, key: str, value: str) -> None:
    with pytest.raises(QoSError) as info:
        parse_pod_qos(pod({annotation: json.dumps({key: value})}))
    assert info.value.field == f"metadata.annotations[{annotation}].{key}"
    assert info.value.value == value
    assert info.value.accepted


def test_numa_hints() -> None:
    qos = parse_pod_qos(
        dedicated(
            {"numa_binding": "true"},
            **{names.NUMA_NUMBER_ANNOTATION: "2", names.NUMA_IDS_ANNOTATION: "0,2-3"},
        )
    )
    assert qos.enhancements.numa_number == 2
    assert qos.enhancements.numa_ids == (0, 2, 3)
    with pytest.raises(QoSError, match="NUMA number"):
        parse_pod_qos(pod({names.NUMA_NUMBER_ANNOTATION: "0"}))
    with pytest.raises(QoSError, match="NUMA ids"):
        parse_pod_qos(pod({names.NUMA_IDS_ANNOTATION: "3-1"}))


@given(st.lists(st.integers(0, 64), min_size=1, max_size=10))
def test_numa_ids_round_trip(ids: list[int]) -> None:
    assert parse_numa_ids(",".join(str(i) for i in ids)) == tuple(sorted(set(ids)))


# --- OOM priority -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "declared", "effective"),
    [
        ("shared_cores", "50", 50),
        ("shared_cores", "150", 99),
        ("shared_cores", "-5", 0),
        ("dedicated_cores", "10", 100),
        ("dedicated_cores", "300", 300),
        ("shared_cores", "-300", -300),
    ],
)
def test_oom_priority_is_clamped_into_level_range(
    level: str, declared: str, effective: int
) -> None:
    mem: dict[str, str] = {"oom_priority": declared}
    if level == "dedicated_cores":
        mem["numa_binding"] = "true"
    qos = parse_pod_qos(pod({LEVEL: level, MEM: json.dumps(mem)}))
    assert qos.oom_priority == effective
    assert bool(qos.warnings) == (str(effective) != declared)


def test_default_oom_priority_is_level_floor() -> None:
    assert parse_pod_qos(pod({LEVEL: "reclaimed_cores"}, [RECLAIMED])).oom_priority == -100


# --- level rules ------------------------------------------------------------------------


def test_numa_exclusive_without_numa_binding_has_no_effect() -> None:
    p = pod(
        {LEVEL: "shared_cores", MEM: json.dumps({"numa_exclusive": "true"})},
    )
    qos = parse_pod_qos(p)
    assert not qos.numa_exclusive
    assert warned(qos, f"metadata.annotations[{MEM}].numa_exclusive")


def test_numa_exclusive_off_dedicated_is_ignored_as_katalyst_does() -> None:
    p = pod({MEM: json.dumps({"numa_binding": "true", "numa_exclusive": "true"})})
    qos = parse_pod_qos(p)
    assert qos.is_shared and qos.numa_binding and not qos.numa_exclusive
    assert "only dedicated_cores" in str(qos.warnings[0])


def test_dedicated_requires_numa_binding() -> None:
    with pytest.raises(QoSError, match="requires numa_binding"):
        parse_pod_qos(pod({LEVEL: "dedicated_cores"}))


def test_dedicated_numa_exclusive_is_valid() -> None:
    qos = parse_pod_qos(dedicated({"numa_binding": "true", "numa_exclusive": "true"}))
    assert qos.is_dedicated and qos.numa_binding and qos.numa_exclusive
    assert qos.k8s_qos_class == K8S_QOS_GUARANTEED


@pytest.mark.parametrize("key", ["distribute_evenly_across_numa", "full_pcpus_pairing"])
def test_numa_exclusive_conflicts(key: str) -> None:
    p = dedicated(
        {"numa_binding": "true", "numa_exclusive": "true"}, **{CPU: f'{{"{key}":"true"}}'}
    )
    assert f"metadata.annotations[{CPU}].{key}" in errors(p)


def test_dedicated_fractional_cpu_is_rounded_up_with_a_warning() -> None:
    half = container({"cpu": "1500m", "memory": "1Gi"}, {"cpu": "1500m", "memory": "1Gi"})
    qos = parse_pod_qos(pod({LEVEL: "dedicated_cores", MEM: '{"numa_binding":"true"}'}, [half]))
    assert qos.is_dedicated
    (warning,) = qos.warnings
    assert warning.field == "spec.containers[0].resources.requests.cpu"
    assert warning.value == "1500m" and "rounded up to 2" in warning.message


def test_dedicated_not_guaranteed_runs_with_a_warning() -> None:
    burstable = container({"cpu": "2", "memory": "1Gi"}, {"cpu": "4", "memory": "1Gi"})
    p = pod({LEVEL: "dedicated_cores", MEM: '{"numa_binding":"true"}'}, [burstable])
    qos = parse_pod_qos(p)
    assert qos.is_dedicated and qos.k8s_qos_class == K8S_QOS_BURSTABLE
    assert [w.field for w in qos.warnings] == ["spec.containers[0].resources.limits.cpu"]


def test_dedicated_without_cpu_request_is_an_error() -> None:
    p = pod({LEVEL: "dedicated_cores", MEM: '{"numa_binding":"true"}'}, [container()])
    assert "spec.containers[0].resources.requests.cpu" in errors(p)


def test_reclaimed_asking_native_resources_runs_with_a_warning() -> None:
    native = container({"cpu": "1"}, name="worker")
    qos = parse_pod_qos(pod({LEVEL: "reclaimed_cores"}, [RECLAIMED, native]))
    assert qos.is_reclaimed
    (warning,) = qos.warnings
    assert warning.field == "spec.containers[1].resources.requests.cpu"
    assert "'worker'" in str(warning) and names.RECLAIMED_MILLICPU in warning.accepted


def test_suppression_tolerance_only_for_reclaimed() -> None:
    ok = parse_pod_qos(
        pod({LEVEL: "reclaimed_cores", CPU: '{"suppression_tolerance_rate": "2.5"}'}, [RECLAIMED])
    )
    assert ok.enhancements.suppression_tolerance_rate == 2.5
    with pytest.raises(QoSError, match="only allowed for reclaimed_cores"):
        parse_pod_qos(pod({CPU: '{"suppression_tolerance_rate": "2.5"}'}))


def test_cpuset_pool_only_for_shared_and_system() -> None:
    assert parse_pod_qos(pod({CPU: '{"cpuset_pool": "flink"}'})).cpuset_pool == "flink"
    qos = parse_pod_qos(pod({LEVEL: "reclaimed_cores", CPU: '{"cpuset_pool": "x"}'}, [RECLAIMED]))
    assert qos.cpuset_pool == names.POOL_RECLAIM and qos.enhancements.cpuset_pool is None
    assert "no effect on reclaimed_cores" in str(qos.warnings[0])


def test_cpuset_pool_on_dedicated_is_ignored_as_katalyst_does() -> None:
    qos = parse_pod_qos(dedicated({"numa_binding": "true"}, **{CPU: '{"cpuset_pool": "x"}'}))
    assert qos.is_dedicated and qos.cpuset_pool == names.POOL_DEDICATED
    assert warned(qos, f"metadata.annotations[{CPU}].cpuset_pool")


def test_validate_collects_every_problem() -> None:
    p = pod(
        {
            LEVEL: "dedicated_cores",
            MEM: '{"numa_exclusive": "true", "mystery": "1"}',
            CPU: '{"cpu_burst_policy": "turbo"}',
        },
        [container({"memory": "1Gi"})],
    )
    problems = validate_pod_qos(p)
    severities = [x.severity for x in problems]
    assert severities.count("error") >= 3 and "warning" in severities
    assert severities == sorted(severities)  # errors first


# --- Kubernetes QoS class ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([container()], None, K8S_QOS_BEST_EFFORT),
        ([container({"cpu": "0"})], None, K8S_QOS_BEST_EFFORT),
        ([container({names.RECLAIMED_MILLICPU: "1k"})], None, K8S_QOS_BEST_EFFORT),
        ([GUARANTEED], None, K8S_QOS_GUARANTEED),
        # limits alone: requests default to them
        ([container(None, {"cpu": "1", "memory": "1Gi"})], None, K8S_QOS_GUARANTEED),
        ([container({"cpu": "1"}, {"cpu": "1"})], None, K8S_QOS_BURSTABLE),
        ([container({"cpu": "1", "memory": "1Gi"})], None, K8S_QOS_BURSTABLE),
        ([container({"cpu": "1000m", "memory": "1Gi"}, {"cpu": "1", "memory": "1024Mi"})],
         None, K8S_QOS_GUARANTEED),
        ([GUARANTEED], [container({"cpu": "1"})], K8S_QOS_BURSTABLE),
        ([GUARANTEED, container()], None, K8S_QOS_BURSTABLE),
    ],
)  # fmt: skip
def test_k8s_qos_class_like_kubelet(
    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None, expected: str
) -> None:
    assert k8s_qos_class(pod(None, containers, init)) == expected


# --- robustness -------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_known = st.sampled_from(
    [
        "numa_binding",
        "numa_exclusive",
        "oom_priority",
        "cpuset_pool",
        "cpu_burst_policy",
        "cpu_burst_percent",
        "suppression_tolerance_rate",
        "rss_overuse_threshold",
        "namespace_type",
        "distribute_evenly_across_numa",
    ]
)
_enh_value = st.one_of(
    _text,
    st.dictionaries(_known | _text, _text | st.sampled_from(["true", "false", "50", "-300"])).map(
        json.dumps
    ),
    _json_values.map(json.dumps),
)
_annotations = st.dictionaries(
    st.sampled_from(
        [
            LEVEL,
            MEM,
            CPU,
            NET,
            names.NUMA_NUMBER_ANNOTATION,
            names.NUMA_IDS_ANNOTATION,
            "other/annotation",
        ]
    ),
    st.one_of(st.sampled_from([*names.QOS_LEVELS, "", "x"]), _enh_value, st.integers()),
)
_quantities = st.sampled_from(["1", "500m", "2Gi", "0", "bogus", "1.5", 3, 0.25])


@settings(max_examples=300, deadline=None)
@given(
    _annotations,
    st.lists(
        st.dictionaries(st.sampled_from(["cpu", "memory", names.RECLAIMED_MILLICPU]), _quantities),
        max_size=2,
    ),
)
def test_any_annotations_parse_or_raise_qos_error(
    annotations: dict[str, Any], requests: list[dict[str, Any]]
) -> None:
    p = pod(annotations, [container(r, r) for r in requests])
    try:
        qos = parse_pod_qos(p)
    except QoSError as err:
        assert err.field
        assert any(x.severity == "error" for x in validate_pod_qos(p))
    else:
        assert qos.level in names.QOS_LEVELS
        assert not any(x.severity == "error" for x in validate_pod_qos(p))


# --- cpu burst (katalyst-core pkg/agent/qrm-plugins/cpu/util/util_test.go,
#     pkg/util/qos/cpu_enhancement.go) ----------------------------------------------------

SHARED, DEDICATED_L = names.QOS_SHARED_CORES, names.QOS_DEDICATED_CORES
BINDING_MEM = '{"numa_binding":"true"}'

# (case, level, cpu_enhancement, dynamic config's dedicated default, its shared default,
#  sole shared pod, Katalyst's policy)
BURST_POLICIES = [
    ("shared, static declared", SHARED, '{"cpu_burst_policy":"static"}', None, None, False,
     "static"),
    ("shared, closed declared", SHARED, '{"cpu_burst_policy":"closed"}', None, None, False,
     "closed"),
    ("shared, nothing declared", SHARED, None, None, None, False, "default"),
    ("dedicated, none declared, dynamic config on", DEDICATED_L, None, True, None, False,
     "static"),
    ("dedicated, none declared, dynamic config off", DEDICATED_L, None, False, None, False,
     "closed"),
    ("shared, sole shared pod, dynamic config on", SHARED, None, None, True, True, "static"),
    ("shared, not the sole one, dynamic config on", SHARED, None, None, True, False, "closed"),
    ("shared, dynamic config off", SHARED, None, None, False, True, "closed"),
    ("shared, static declared, dynamic config off", SHARED, '{"cpu_burst_policy":"static"}',
     None, False, False, "static"),
    ("reclaimed, static declared", names.QOS_RECLAIMED_CORES, '{"cpu_burst_policy":"static"}',
     None, None, False, "closed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("level", "cpu", "dedicated_default", "shared_default", "sole", "want"),
    [case[1:] for case in BURST_POLICIES],
    ids=[case[0] for case in BURST_POLICIES],
)
def test_cpu_burst_policy_is_katalysts(
    level: str,
    cpu: str | None,
    dedicated_default: bool | None,
    shared_default: bool | None,
    sole: bool,
    want: str,
) -> None:
    ann: dict[str, Any] = {LEVEL: level}
    if cpu is not None:
        ann[CPU] = cpu
    if level == DEDICATED_L:
        ann[MEM] = BINDING_MEM
    containers = [RECLAIMED] if level == names.QOS_RECLAIMED_CORES else None
    qos = parse_pod_qos(pod(ann, containers))
    burst = qos.cpu_burst(
        dedicated_default=dedicated_default, shared_default=shared_default, sole_shared=sole
    )
    assert burst.policy == want


def test_a_reclaimed_pods_cpu_burst_is_read_as_closed_with_a_warning() -> None:
    p = pod({LEVEL: names.QOS_RECLAIMED_CORES, CPU: '{"cpu_burst_policy":"static"}'}, [RECLAIMED])
    assert parse_pod_qos(p).enhancements.cpu_burst_policy == names.CPU_BURST_POLICY_CLOSED
    (warning,) = [w for w in validate_pod_qos(p) if w.field.endswith("cpu_burst_policy")]
    assert warning.severity == "warning" and "closed" in warning.message


@pytest.mark.parametrize(
    ("cpu", "default", "want"),
    [
        ('{"cpu_burst_percent":"50"}', 100, 50),
        ('{"cpu_burst_percent":"150"}', 100, 100),  # capped at 100
        (None, 100, 100),  # none declared: the dynamic config's default
        (None, 30, 30),
        ('{"cpu_burst_percent": "50"', 30, 30),  # malformed JSON: Katalyst finds no percent
        ('["cpu_burst_percent"]', 30, 30),  # not an object: the same
    ],
)
def test_cpu_burst_percent_falls_back_to_the_dynamic_default(
    cpu: str | None, default: int, want: int
) -> None:
    ann: dict[str, Any] = {LEVEL: SHARED}
    if cpu is not None:
        ann[CPU] = cpu
    qos = parse_pod_qos(pod(ann))
    assert qos.cpu_burst(default_percent=default).percent == want


# --- the cpus the kubelet's static policy pins (Katalyst's PodGuaranteedCPUs) ---------------

_MILLI = st.integers(min_value=1, max_value=16_000)


def _guaranteed(apps: list[int], inits: list[int]) -> dict[str, Any]:
    def c(milli: int, i: int, kind: str) -> dict[str, Any]:
        res = {"cpu": f"{milli}m", "memory": "64Mi"}
        return {"name": f"{kind}{i}", "resources": {"requests": res, "limits": dict(res)}}

    return {
        "spec": {
            "containers": [c(m, i, "app") for i, m in enumerate(apps)],
            "initContainers": [c(m, i, "init") for i, m in enumerate(inits)],
        }
    }


@given(st.lists(_MILLI, min_size=1, max_size=4), st.lists(_MILLI, max_size=3))
def test_guaranteed_cpus_are_the_larger_of_the_largest_init_and_the_apps_whole_cpus(
    apps: list[int], inits: list[int]
) -> None:
    def whole(m: int) -> int:
        return m // 1000 if m % 1000 == 0 else 0

    pod = _guaranteed(apps, inits)
    assert k8s_qos_class(pod) == K8S_QOS_GUARANTEED
    expected = max(max((whole(m) for m in inits), default=0), sum(whole(m) for m in apps))
    assert guaranteed_cpus(pod) == expected


@given(st.lists(_MILLI, min_size=1, max_size=4))
def test_a_pod_that_is_not_guaranteed_pins_no_cpus(apps: list[int]) -> None:
    pod = _guaranteed(apps, [])
    # a limit above the request makes it Burstable: the kubelet pins nothing
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = f"{apps[0] + 1000}m"
    assert k8s_qos_class(pod) == K8S_QOS_BURSTABLE
    assert guaranteed_cpus(pod) == 0


def test_guaranteed_cpus_examples() -> None:
    assert guaranteed_cpus(_guaranteed([2000, 1000], [])) == 3
    assert guaranteed_cpus(_guaranteed([2000, 1500], [])) == 2  # a fractional one counts 0
    assert guaranteed_cpus(_guaranteed([1000], [4000])) == 4  # the init container is larger
    assert guaranteed_cpus({"spec": {"containers": [{"name": "a"}]}}) == 0  # BestEffort
