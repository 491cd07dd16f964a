"""The CRDs in deploy/crds: valid apiextensions.k8s.io/v1 objects with structural schemas that
match the kinds the code speaks, and that accept what the system writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes.client.models import V1CustomResourceDefinition

from pykatalyst.api import names

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
EXAMPLES = Path("/work/shared/katalyst-examples")
KATALYST_CRDS = Path("/work/shared/katalyst-api-crds")

# The value validations an apiextensions v1 structural schema may carry inside
# allOf/anyOf/oneOf/not (no type, no properties, no descriptions there).
_JUNCTOR_FORBIDDEN = {"type", "description", "default", "additionalProperties", "nullable"}
_PRINTER_TYPES = {"integer", "number", "string", "boolean", "date"}
_PY_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


def _load() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            docs[doc["spec"]["names"]["kind"]] = doc
    return docs


CRDS = _load()


def _schema(kind: str, version: str | None = None) -> dict[str, Any]:
    """The schema of `version`, by default the one the code speaks."""
    if version is None:
        version = next(k.version for k in names.KATALYST_KINDS if k.kind == kind)
    versions = CRDS[kind]["spec"]["versions"]
    schema: dict[str, Any] = next(v for v in versions if v["name"] == version)["schema"][
        "openAPIV3Schema"
    ]
    return schema


def _structural_errors(node: dict[str, Any], path: str, in_junctor: bool = False) -> list[str]:
    """The apiextensions v1 structural-schema rules, as the API server applies them."""
    errors: list[str] = []
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if in_junctor:
        errors += [
            f"{path}: {k} not allowed inside a junctor" for k in _JUNCTOR_FORBIDDEN & set(node)
        ]
    elif "type" not in node and not (int_or_string or preserve):
        errors.append(f"{path}: no type")
    if int_or_string:
        any_of = node.get("anyOf")
        if "type" in node or any_of not in (None, [{"type": "integer"}, {"type": "string"}]):
            errors.append(f"{path}: int-or-string must be anyOf [integer, string] without type")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: properties and additionalProperties together")
    kind = node.get("type")
    if kind == "array" and "items" not in node:
        errors.append(f"{path}: array without items")
    if kind is not None and kind not in {
        "object",
        "array",
        "string",
        "integer",
        "number",
        "boolean",
    }:
        errors.append(f"{path}: unknown type {kind!r}")
    if kind != "object" and ("properties" in node or "additionalProperties" in node):
        errors.append(f"{path}: properties on a non-object")
    for value in node.get("enum", []):
        expected = _PY_TYPES.get(str(kind))
        if expected is not None and not isinstance(value, expected):
            errors.append(f"{path}: enum value {value!r} is not a {kind}")
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except re.error as exc:
            errors.append(f"{path}: bad pattern: {exc}")
    for missing in set(node.get("required", [])) - set(node.get("properties", {})):
        errors.append(f"{path}: required field {missing!r} has no schema")
    for name, child in node.get("properties", {}).items():
        errors += _structural_errors(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        errors += _structural_errors(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        errors += _structural_errors(node["items"], f"{path}[]")
    for junctor in ("allOf", "anyOf", "oneOf"):
        for i, child in enumerate(node.get(junctor, [])):
            if int_or_string and junctor == "anyOf":
                continue
            errors += _structural_errors(child, f"{path}.{junctor}[{i}]", in_junctor=True)
    return errors


def test_every_katalyst_kind_has_exactly_one_crd() -> None:
    assert sorted(CRDS) == sorted(k.kind for k in names.KATALYST_KINDS)


@pytest.mark.parametrize("kind", names.KATALYST_KINDS, ids=lambda k: k.kind)
def test_crd_matches_the_names_the_code_uses(kind: names.Kind) -> None:
    crd = CRDS[kind.kind]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{kind.plural}.{kind.group}"
    assert spec["group"] == kind.group
    assert spec["names"]["plural"] == kind.plural
    assert spec["names"].get("shortNames", []) == list(kind.short_names)
    assert spec["scope"] == ("Namespaced" if kind.namespaced else "Cluster")
    served = [v["name"] for v in spec["versions"] if v["served"]]
    assert kind.version in served
    assert len([v for v in spec["versions"] if v["storage"]]) == 1


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_crd_is_a_valid_apiextensions_v1_object(kind: str) -> None:
    crd = CRDS[kind]
    # the official client's models are generated from the API server's OpenAPI document and
    # reject unknown fields, so a typo in a CRD field name fails here
    V1CustomResourceDefinition.model_validate(crd)
    schema = V1CustomResourceDefinition.model_json_schema(by_alias=True)
    jsonschema.validate(crd, schema)
    props_schema = {"$defs": schema["$defs"], "$ref": "#/$defs/V1JSONSchemaProps"}
    validator = jsonschema.Draft202012Validator(props_schema)

    def walk(node: dict[str, Any]) -> None:
        # the generated schema stops at additionalProperties/items: check every level
        validator.validate(node)
        for child in node.get("properties", {}).values():
            walk(child)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key])

    walk(_schema(kind))


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_crd_schema_is_structural(kind: str) -> None:
    schema = _schema(kind)
    assert schema["type"] == "object"
    assert set(schema["properties"]["metadata"]) == {"type"}, "metadata may not be constrained"
    assert _structural_errors(schema, "openAPIV3Schema") == []
    for version in CRDS[kind]["spec"]["versions"]:
        assert "status" in version["subresources"]
        for column in version["additionalPrinterColumns"]:
            assert column["type"] in _PRINTER_TYPES
            assert column["jsonPath"].startswith(".")


def test_structural_check_catches_the_usual_mistakes() -> None:
    bad: dict[str, Any] = {
        "type": "object",
        "properties": {
            "untyped": {"description": "no type"},
            "list": {"type": "array"},
            "both": {
                "type": "object",
                "properties": {},
                "additionalProperties": {"type": "string"},
            },
            "junctor": {"type": "string", "anyOf": [{"type": "string"}]},
        },
    }
    errors = _structural_errors(bad, "root")
    assert any("root.untyped: no type" in e for e in errors)
    assert any("root.list: array without items" in e for e in errors)
    assert any("root.both: properties and additionalProperties" in e for e in errors)
    assert any("root.junctor.anyOf[0]: type not allowed" in e for e in errors)


def _valid(kind: str, obj: dict[str, Any]) -> bool:
    return jsonschema.Draft4Validator(_schema(kind)).is_valid(obj)


def test_schemas_accept_what_the_system_writes_and_reject_bad_values() -> None:
    cnr: dict[str, Any] = {
        "apiVersion": names.CUSTOM_NODE_RESOURCE.api_version,
        "kind": "CustomNodeResource",
        "metadata": {"name": "node-1"},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "qosLevel": "reclaimed_cores"}]},
        "status": {
            "resources": {"allocatable": {names.RECLAIMED_MILLICPU: "44k"}},
            "topologyPolicy": names.TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER,
            "topologyZone": [
                {
                    "type": names.ZONE_SOCKET,
                    "name": "0",
                    "children": [
                        {
                            "type": names.ZONE_NUMA,
                            "name": "0",
                            "resources": {"allocatable": {"cpu": 24, "memory": "64Gi"}},
                            "allocations": [{"consumer": "ns/p/uid", "requests": {"cpu": "4"}}],
                        }
                    ],
                }
            ],
        },
    }
    assert _valid("CustomNodeResource", cnr)
    cnr["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU] = "lots"
    assert not _valid("CustomNodeResource", cnr)

    noc = {
        "spec": {"nodeOvercommitSelectorVal": "pool-a", "resourceOvercommitRatio": {"cpu": "1.5"}}
    }
    assert _valid("NodeOvercommitConfig", noc)
    assert not _valid("NodeOvercommitConfig", {"spec": {"resourceOvercommitRatio": {"cpu": {}}}})

    spd = {"spec": {"targetRef": {"kind": "Deployment", "name": "web"}, "baselinePercent": 50}}
    assert _valid("ServiceProfileDescriptor", spd)
    spd["spec"]["baselinePercent"] = 150
    assert not _valid("ServiceProfileDescriptor", spd)

    aqc = {"spec": {"nodeLabelSelector": "pool=a", "priority": 1, "config": {"evictionConfig": {}}}}
    assert _valid("AdminQoSConfiguration", aqc)
    assert not _valid("AdminQoSConfiguration", {"spec": {"priority": "high", "config": {}}})

    kvpa = {"spec": {"targetRef": {"kind": "Deployment", "name": "web"}}}
    assert _valid("KatalystVerticalPodAutoscaler", kvpa)
    kvpa["spec"]["updatePolicy"] = {"podUpdatingStrategy": "Sometimes"}
    assert not _valid("KatalystVerticalPodAutoscaler", kvpa)


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="Katalyst's example manifests are not present")
def test_katalyst_example_custom_configs_validate() -> None:
    seen = 0
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in CRDS:
                assert _valid(doc["kind"], doc), path.name
                seen += 1
    assert seen > 0


# --- what the system writes survives a real API server's pruning ------------------------------


def _pruned(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """The fields a real API server would silently drop from `value` under `schema`."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True
        out: list[str] = []
        for key, item in value.items():
            if item is None:  # nulls of non-nullable fields are dropped: not data
                continue
            if props is not None and key in props:
                out += _pruned(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += _pruned(item, extra, f"{path}.{key}")
            elif not keep_unknown:
                out.append(f"{path}.{key}")
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            p
            for i, item in enumerate(value)
            for p in _pruned(item, schema["items"], f"{path}[{i}]")
        ]
    return []


def test_pruning_check_finds_undeclared_fields() -> None:
    schema = _schema("NodeOvercommitConfig")
    obj = {"spec": {"nodeOvercommitSelectorVal": "a", "selector": "b"}, "status": {"x": 1}}
    assert _pruned(obj, schema, "") == [".spec.selector", ".status.x"]
    deep = {"children": [{"children": [{"children": [{"anything": {"goes": 1}}]}]}]}
    cnr = {"status": {"topologyZone": [{"y": 1, **deep}]}}
    assert _pruned(cnr, _schema("CustomNodeResource"), "") == [".status.topologyZone[0].y"]


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _check_survives(kind: str, obj: dict[str, Any]) -> None:
    body = _without_nulls({k: v for k, v in obj.items() if k != "metadata"})
    schema = _schema(kind)
    assert _pruned(body, schema, "") == []
    errors = [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(body)]
    assert errors == []


def test_the_agents_cnr_status_survives() -> None:
    from pykatalyst.agent.reporter import NumaAllocation, ReportInput, build_status
    from pykatalyst.api.crds import CNRTaint, new_cnr
    from pykatalyst.topology.cpuset import CPUSet
    from pykatalyst.topology.machine import CPUTopology

    topo = CPUTopology.synthetic(sockets=2, cores_per_socket=4, memory_per_numa=2**34)
    report = ReportInput(
        topology=topo,
        reserve=CPUSet.parse("0"),
        cpu_cores=6.5,
        memory_bytes=2.0**33,
        cpu_per_numa={0: 3.0, 1: 3.5},
        memory_per_numa={0: 2.0**32, 1: 2.0**32},
        allocations=[NumaAllocation("default/p/uid", 1, 4, 2**30)],
    )
    cnr = new_cnr("node-1", uid="u").to_json()
    cnr["spec"] = {
        "taints": [
            CNRTaint(key=names.UNSCHEDULABLE_TAINT_KEY, effect="NoSchedule").to_json(),
        ]
    }
    cnr["status"] = build_status(report, names.TOPOLOGY_POLICY_NUMERIC_CONTAINER)
    cnr["status"]["conditions"] = [
        {
            "type": names.CNR_CONDITION_AGENT_READY,
            "status": "True",
            "reason": "AgentReporting",
            "message": "reporting",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    _check_survives("CustomNodeResource", cnr)


def test_the_crd_models_dump_what_the_schemas_keep() -> None:
    from pykatalyst.api import crds

    ref = crds.CrossVersionObjectReference(kind="Deployment", name="web", api_version="apps/v1")
    objects: dict[str, Any] = {
        "AdminQoSConfiguration": crds.AdminQoSConfiguration(
            spec=crds.AdminQoSSpec(node_label_selector="pool=a", priority=1)
        ),
        "NodeOvercommitConfig": crds.NodeOvercommitConfig(
            spec=crds.NOCSpec(
                node_overcommit_selector_val="pool-a", resource_overcommit_ratio={"cpu": "1.5"}
            ),
            status=crds.NOCStatus(matched_node_list=["n1"]),
        ),
        "KatalystCustomConfig": crds.KatalystCustomConfig(
            spec=crds.KCCSpec(
                target_type=crds.GroupVersionResource(
                    group=names.CONFIG_GROUP,
                    version="v1alpha1",
                    resource=names.ADMIN_QOS_CONFIGURATION.plural,
                ),
                node_label_selector_allowed_key_list=[
                    crds.PriorityKeyList(priority=0, key_list=["pool"])
                ],
            )
        ),
        "CustomNodeConfig": crds.CustomNodeConfig(
            status=crds.CNCStatus(
                katalyst_custom_config_list=[
                    crds.TargetConfig(
                        config_type=crds.GroupVersionResource(
                            group=names.CONFIG_GROUP,
                            version="v1alpha1",
                            resource=names.ADMIN_QOS_CONFIGURATION.plural,
                        ),
                        config_name="default",
                        config_namespace="default",
                        hash="abc",
                    )
                ]
            )
        ),
        "ServiceProfileDescriptor": crds.ServiceProfileDescriptor(
            spec=crds.SPDSpec(
                target_ref=ref,
                baseline_percent=50,
                business_indicator=[
                    crds.IndicatorGroup(
                        name="RPCLatency",
                        indicators=[crds.Indicator(indicator_level="UpperBound", value=10.0)],
                    )
                ],
            )
        ),
        "KatalystVerticalPodAutoscaler": crds.KatalystVerticalPodAutoscaler(
            spec=crds.KVPASpec(
                target_ref=ref,
                resource_policy=crds.ResourcePolicy(
                    container_policies=[
                        crds.ContainerResourcePolicy(
                            container_name="main", controlled_values="RequestsOnly"
                        )
                    ]
                ),
            )
        ),
    }
    for kind, model in objects.items():
        _check_survives(kind, model.model_dump(mode="json", by_alias=True))


# --- Katalyst's own CRDs: ours store every object theirs accept -------------------------------


def _katalyst_crds() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(KATALYST_CRDS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        docs[doc["spec"]["names"]["kind"]] = doc
    return docs


needs_katalyst_crds = pytest.mark.skipif(
    not KATALYST_CRDS.is_dir(), reason="Katalyst's CRDs (katalyst-api config/crd/bases) absent"
)
KATALYST = _katalyst_crds() if KATALYST_CRDS.is_dir() else {}


def _open(node: dict[str, Any]) -> bool:
    return node.get("x-kubernetes-preserve-unknown-fields") is True


def _kind_of(node: dict[str, Any]) -> str | None:
    if node.get("x-kubernetes-int-or-string") is True:
        return "int-or-string"
    kind = node.get("type")
    return None if kind is None else str(kind)


_ADMITS = {
    "int-or-string": {"int-or-string"},
    "integer": {"integer", "number", "int-or-string"},
    "number": {"number"},
    "string": {"string", "int-or-string"},
}


def _incompatible(theirs: dict[str, Any], ours: dict[str, Any], path: str) -> list[str]:
    """Where a value Katalyst's schema admits at `path` is not admitted, or not stored, by ours.
    A field under one of our open objects is kept whatever it is; Katalyst leaves a
    recursive field (topology zones' children) unchecked and we may check it."""
    theirs_kind, ours_kind = _kind_of(theirs), _kind_of(ours)
    if ours_kind is None and _open(ours):
        return []
    if theirs_kind is None:
        return [] if _open(theirs) else [f"{path}: untyped"]
    if ours_kind != theirs_kind and ours_kind not in _ADMITS.get(theirs_kind, set()):
        return [f"{path}: {theirs_kind} in Katalyst's, {ours_kind} in ours"]
    errors: list[str] = []
    if "enum" in ours and not set(theirs.get("enum", [None])) <= set(ours["enum"]):
        errors.append(f"{path}: our enum {ours['enum']} is narrower than {theirs.get('enum')}")
    if "pattern" in ours and ours.get("pattern") != theirs.get("pattern"):
        errors.append(f"{path}: our pattern differs")
    for bound, looser in (("minimum", min), ("maximum", max)):
        if bound in ours and looser(ours[bound], theirs.get(bound, ours[bound])) != ours[bound]:
            errors.append(f"{path}: our {bound} is stricter")
    stricter = set(ours.get("required", [])) - set(theirs.get("required", []))
    if stricter:
        errors.append(f"{path}: we require {sorted(stricter)}")
    for name, child in theirs.get("properties", {}).items():
        mine = ours.get("properties", {}).get(name)
        if mine is None and isinstance(ours.get("additionalProperties"), dict):
            mine = ours["additionalProperties"]
        if mine is None:
            errors += [] if _open(ours) else [f"{path}.{name}: not in ours (pruned)"]
        else:
            errors += _incompatible(child, mine, f"{path}.{name}")
    for key, suffix in (("additionalProperties", ".*"), ("items", "[]")):
        if isinstance(theirs.get(key), dict):
            if isinstance(ours.get(key), dict):
                errors += _incompatible(theirs[key], ours[key], path + suffix)
            elif not _open(ours):
                errors.append(f"{path}{suffix}: not in ours")
    return errors


def test_the_compatibility_check_finds_what_ours_would_lose() -> None:
    theirs = {
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "number"},
            "c": {"type": "object", "additionalProperties": {"type": "string"}},
            "d": {"type": "string", "enum": ["x", "y"]},
        },
    }
    ours = {
        "type": "object",
        "required": ["a", "b"],
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "d": {"type": "string", "enum": ["x"]},
        },
    }
    errors = _incompatible(theirs, ours, "")
    assert ": we require ['b']" in errors
    assert ".b: number in Katalyst's, object in ours" in errors
    assert ".c: not in ours (pruned)" in errors
    assert any(e.startswith(".d: our enum") for e in errors)
    assert _incompatible(theirs, {"type": "object", **_OPEN}, "") == []


_OPEN = {"x-kubernetes-preserve-unknown-fields": True}


@needs_katalyst_crds
def test_we_install_every_katalyst_crd_under_katalysts_names() -> None:
    assert sorted(KATALYST) == sorted(CRDS)
    for kind, theirs in KATALYST.items():
        mine = CRDS[kind]
        assert mine["metadata"]["name"] == theirs["metadata"]["name"]
        for key in ("group", "scope"):
            assert mine["spec"][key] == theirs["spec"][key], (kind, key)
        for key in ("kind", "plural", "singular", "listKind"):
            assert mine["spec"]["names"][key] == theirs["spec"]["names"][key], (kind, key)
        short = theirs["spec"]["names"].get("shortNames", [])
        # Katalyst's short names first; ours only as additions.
        assert mine["spec"]["names"].get("shortNames", [])[: len(short)] == short, kind

        def versions(crd: dict[str, Any]) -> list[tuple[str, bool, bool, Any]]:
            return [
                (v["name"], v["served"], v["storage"], v.get("subresources"))
                for v in crd["spec"]["versions"]
            ]

        assert versions(mine) == versions(theirs), kind


@needs_katalyst_crds
@pytest.mark.parametrize("kind", sorted(KATALYST))
def test_every_field_katalysts_schema_admits_ours_admits_and_keeps(kind: str) -> None:
    for version in KATALYST[kind]["spec"]["versions"]:
        theirs = version["schema"]["openAPIV3Schema"]
        ours = _schema(kind, version["name"])
        assert _incompatible(theirs, ours, f"{kind}/{version['name']}") == []


def test_katalyst_shaped_objects_survive_unpruned() -> None:
    """What Katalyst's agent and controllers write, field for field."""
    attrs = [{"name": "numa_distance", "value": "10,21"}]
    pool = {"poolName": "p0", "attributes": attrs, "minAllocatable": {"cpu": "2"}}
    package = {"packageName": "pk0", "allocatable": {"cpu": "4"}, "attributes": attrs}
    resources = {
        "allocatable": {"cpu": "24"},
        "capacity": {"cpu": "24"},
        "resourcePools": [pool],
        "resourcePackages": [package],
    }
    numa = {
        "type": names.ZONE_NUMA,
        "name": "0",
        "resources": resources,
        "attributes": attrs,
        "siblings": [{"type": names.ZONE_NUMA, "name": "1", "attributes": attrs}],
    }
    cnr = {
        "spec": {},
        "status": {
            "topologyPolicy": "none",
            "resources": resources,
            "topologyZone": [
                {"type": names.ZONE_SOCKET, "name": "0", "resources": resources, "children": [numa]}
            ],
        },
    }
    _check_survives("CustomNodeResource", cnr)
    spd = {
        "spec": {"targetRef": {"kind": "Deployment", "name": "web"}},
        "status": {"businessStatus": [{"name": "latency", "current": 12.5}]},
    }
    _check_survives("ServiceProfileDescriptor", spd)
