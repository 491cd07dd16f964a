"""`katalyst validate`: how Katalyst reads the pods in some manifests, and what is wrong."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from pykatalyst.api import names, support
from pykatalyst.api.manifests import (
    Document,
    ManifestError,
    PodTemplate,
    find_manifest_files,
    load_documents,
    pod_template,
)
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS, container_resources, inspect_pod_qos
from pykatalyst.api.qos_model import annotation_field
from pykatalyst.api.quantity import Quantity
from pykatalyst.cli import config_report
from pykatalyst.cli.output import OutputFormat, print_json, print_message, print_table
from pykatalyst.topology.joint import joint_problem


@dataclass(slots=True)
class Finding:
    """A problem tied to the file and object it was found in."""

    severity: str
    file: str
    object: str
    field: str
    value: str | None
    accepted: str
    message: str
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "object": self.object,
            "field": self.field,
            "value": self.value,
            "accepted": self.accepted,
            "message": self.message,
        }

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        text = f"{where}: {self.object + ': ' if self.object else ''}{self.message}"
        details = []
        if self.field:
            details.append(f"field {self.field}")
        if self.value is not None:
            details.append(f"value {self.value!r}")
        if self.accepted:
            details.append(f"accepted: {self.accepted}")
        return f"{text} ({'; '.join(details)})" if details else text


@dataclass(slots=True)
class Report:
    pods: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    configs: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)

    def errors(self, strict: bool) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error" or strict]

    def to_json(self, strict: bool) -> dict[str, Any]:
        return {
            "valid": not self.errors(strict),
            "files": self.files,
            "pods": self.pods,
            "skipped": self.skipped,
            "configs": self.configs,
            "problems": [f.to_json() for f in self.findings],
        }


def _resources_json(values: dict[str, Quantity]) -> dict[str, str]:
    return {name: str(q) for name, q in sorted(values.items())}


def _template_entry(template: PodTemplate, qos: PodQoS) -> dict[str, Any]:
    doc = template.document
    pod = template.pod
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    containers = []
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for index, container in enumerate(items if isinstance(items, list) else []):
            if not isinstance(container, dict):
                continue
            reqs, lims, _ = container_resources(container, f"spec.{key}[{index}]")
            containers.append(
                {
                    "index": index,
                    "init": key == "initContainers",
                    "name": str(container.get("name", "")),
                    "requests": _resources_json(reqs),
                    "limits": _resources_json(lims),
                }
            )
    view = Pod(pod)
    requests, limits = view.requests(), view.limits()
    return {
        "file": str(doc.path),
        "document": doc.index,
        "kind": doc.kind,
        "namespace": doc.namespace,
        "name": doc.name,
        "template": template.field_prefix,
        "qosLevel": qos.level,
        "enhancements": qos.enhancements.as_dict(),
        "k8sQoSClass": qos.k8s_qos_class,
        "requests": _resources_json(requests),
        "limits": _resources_json(limits),
        "containers": containers,
        "warnings": [str(w) for w in qos.warnings],
    }


def _field(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix and path else prefix or path


_ENHANCEMENT_ANNOTATION = {
    **dict.fromkeys(
        (names.ENH_RSS_OVERUSE_THRESHOLD, names.ENH_NUMA_BINDING, names.ENH_NUMA_EXCLUSIVE),
        names.MEMORY_ENHANCEMENT_ANNOTATION,
    ),
    **dict.fromkeys(
        (names.ENH_NAMESPACE_TYPE, names.ENH_TOPOLOGY_AFFINITY_RESTRICTED),
        names.NETWORK_ENHANCEMENT_ANNOTATION,
    ),
}


_PAIRING_ACCEPTED = {
    names.GPU_RDMA_AFFINITY_ANNOTATION: ", ".join(names.GPU_RDMA_AFFINITIES),
    names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION: (
        '{"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"} (scope optional)'
    ),
}


def _pairing(template: PodTemplate) -> Finding | None:
    """An error for a GPU-RDMA pairing annotation the webhook would refuse."""
    problem = joint_problem(template.pod)
    if not problem:
        return None
    meta = template.pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    key = next(
        k
        for k in (names.GPU_RDMA_AFFINITY_ANNOTATION, names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION)
        if k in ann
    )
    doc = template.document
    path = _field(template.field_prefix, f"metadata.annotations[{key}]")
    return Finding(
        "error", str(doc.path), doc.label, path, str(ann[key]), _PAIRING_ACCEPTED[key], problem
    )


def _not_acted_on(template: PodTemplate, qos: PodQoS) -> list[Finding]:
    """Warnings for the pod's enhancements and resources that nothing acts on yet."""
    doc = template.document
    out: list[Finding] = []
    for key, value in qos.enhancements.as_dict().items():
        feature = support.for_enhancement(key)
        if feature is None or feature.acted_on:
            continue
        annotation = _ENHANCEMENT_ANNOTATION.get(key, names.CPU_ENHANCEMENT_ANNOTATION)
        path = _field(template.field_prefix, annotation_field(annotation, key))
        out.append(
            Finding("warning", str(doc.path), doc.label, path, str(value), "", feature.why_not())
        )
    view = Pod(template.pod)
    for resource in sorted({*view.requests(), *view.limits()}):
        feature = support.for_resource(resource)
        if feature is not None and not feature.acted_on:
            path = _field(template.field_prefix, "spec.containers[].resources")
            out.append(
                Finding("warning", str(doc.path), doc.label, path, resource, "", feature.why_not())
            )
    return out


def _check_kind(doc: Document, report: Report) -> bool:
    """A kind that nothing acts on yet: warned about and skipped (True)."""
    feature = support.for_kind(doc.kind)
    if feature is None or feature.acted_on or config_report.handles(doc):
        return False
    problem = config_report.kind_problem(doc.kind, feature)
    report.findings.append(
        Finding(
            problem.severity,
            str(doc.path),
            doc.label,
            problem.field,
            problem.value,
            problem.accepted,
            problem.message,
        )
    )
    report.skipped.append(
        {
            "file": str(doc.path),
            "document": doc.index,
            "kind": doc.kind,
            "name": doc.name,
            "reason": feature.why_not(),
        }
    )
    return True


def _check_document(doc: Document, report: Report) -> None:
    if _check_kind(doc, report):
        return
    if config_report.handles(doc):
        entry, found = config_report.inspect(doc)
        report.configs.append(entry)
        report.findings += [
            Finding(p.severity, str(doc.path), doc.label, p.field, p.value, p.accepted, p.message)
            for p in found
        ]
        return
    template = pod_template(doc)
    if template is None:
        report.skipped.append(
            {
                "file": str(doc.path),
                "document": doc.index,
                "kind": doc.kind,
                "name": doc.name,
                "reason": "holds no pod template",
            }
        )
        return
    if not template.pod or not isinstance(template.pod.get("spec"), dict):
        report.findings.append(
            Finding(
                "error",
                str(doc.path),
                doc.label,
                _field(template.field_prefix, "spec"),
                None,
                "a pod spec with containers",
                "no pod spec found",
            )
        )
        return
    qos, problems = inspect_pod_qos(template.pod)
    problems.sort(key=lambda p: p.severity != "error")
    for problem in problems:
        report.findings.append(
            Finding(
                problem.severity,
                str(doc.path),
                doc.label,
                _field(template.field_prefix, problem.field),
                problem.value,
                problem.accepted,
                problem.message,
            )
        )
    if any(p.severity == "error" for p in problems):
        return
    pairing = _pairing(template)
    if pairing is not None:
        report.findings.append(pairing)
        return
    report.findings += _not_acted_on(template, qos)
    report.pods.append(_template_entry(template, qos))


def _files(paths: list[Path], report: Report) -> list[Path]:
    """Every manifest file named or found; a missing path is a finding, not the end."""
    files: list[Path] = []
    for path in paths:
        try:
            files.extend(find_manifest_files([path]))
        except ManifestError as exc:
            report.findings.append(
                Finding("error", str(exc.path), "", "", None, "a file or folder", exc.reason)
            )
            report.files.append({"file": str(exc.path), "documents": 0, "valid": False})
    return files


def build_report(paths: list[Path]) -> Report:
    """Check every file: a file that cannot be read is reported and the others still are."""
    report = Report()
    for path in _files(paths, report):
        before = len(report.findings)
        try:
            docs = load_documents(path)
        except ManifestError as exc:
            report.findings.append(
                Finding("error", str(path), "", "", None, "", exc.reason, line=exc.line)
            )
            docs = []
        for doc in docs:
            _check_document(doc, report)
        found = report.findings[before:]
        report.files.append(
            {
                "file": str(path),
                "documents": len(docs),
                "valid": not any(f.severity == "error" for f in found),
                "warnings": sum(f.severity == "warning" for f in found),
            }
        )
    return report


def _fmt_resources(values: dict[str, str]) -> str:
    return "\n".join(f"{k}={v}" for k, v in values.items()) or "-"


def _fmt_enhancements(values: dict[str, Any]) -> str:
    parts = []
    for key, value in values.items():
        if value is True:
            parts.append(key)
        elif isinstance(value, list):
            parts.append(f"{key}={','.join(str(v) for v in value)}")
        else:
            parts.append(f"{key}={value}")
    return "\n".join(parts) or "-"


def print_report(report: Report, strict: bool) -> None:
    """The table of pod templates, then notes on skipped objects, then the problems."""
    rows = [
        (
            f"{p['kind']} {p['namespace'] + '/' if p['namespace'] else ''}{p['name']}",
            p["file"],
            p["qosLevel"],
            _fmt_enhancements(p["enhancements"]),
            p["k8sQoSClass"],
            _fmt_resources(p["requests"]),
            _fmt_resources(p["limits"]),
        )
        for p in report.pods
    ]
    if rows:
        print_table(
            "Pod templates",
            ("object", "file", "QoS level", "enhancements", "k8s QoS", "requests", "limits"),
            rows,
        )
    config_report.print_configs(report.configs)
    for skipped in report.skipped:
        print_message(
            f"note: skipped {skipped['kind'] or '<no kind>'} {skipped['name']} in "
            f"{skipped['file']}: {skipped['reason']}",
            style="dim",
        )
    for finding in report.findings:
        label = "error" if finding.severity == "error" or strict else "warning"
        print_message(
            f"{label}: {finding}", stderr=True, style="red" if label == "error" else "yellow"
        )
    invalid = [f["file"] for f in report.files if not f["valid"]]
    print_message(
        f"checked {len(report.files)} file(s): {len(report.files) - len(invalid)} valid, "
        f"{len(invalid)} with errors" + (f" ({', '.join(invalid)})" if invalid else ""),
        stderr=True,
        style="dim",
    )


def validate(
    files: list[Path] = typer.Option(  # noqa: B008 - typer reads options from defaults
        ...,
        "--filename",
        "-f",
        help="Manifest files or folders (searched for *.yaml/*.yml/*.json).",
    ),
    output: OutputFormat = typer.Option(  # noqa: B008
        OutputFormat.TABLE, "--output", "-o", help="table or json."
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Treat warnings (among them: what pykatalyst does not act on) as errors.",
    ),
) -> None:
    """Show how Katalyst reads each pod template: QoS level, enhancements, QoS class, resources.

    Warns about what pykatalyst does not act on yet (kinds, config fields, pod
    enhancements; see the README's table). Exits 1 when any manifest is invalid (or, with
    --strict, raises a warning); a folder with no manifests is an error.
    """
    report = build_report(files)
    if output is OutputFormat.JSON:
        print_json(report.to_json(strict))
    else:
        print_report(report, strict)
    if report.errors(strict):
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
