"""`katalyst demo`: the main job on the bundled examples.

For now it reads the example manifests shipped in the repository and shows how each pod is
interpreted; the simulator takes over this command once it exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

import pykatalyst
from pykatalyst.cli.output import print_message
from pykatalyst.cli.validate import build_report, print_report


def examples_dir() -> Path:
    """The repository's `examples/pods` folder, found next to the package sources."""
    package = Path(pykatalyst.__file__).resolve().parent
    return package.parent.parent / "examples" / "pods"


def demo(
    out: Path | None = typer.Option(  # noqa: B008 - typer reads options from defaults
        None, "--out", help="Also write the report as JSON into this folder."
    ),
) -> None:
    """Validate the bundled example pods and show how Katalyst reads each of them."""
    folder = examples_dir()
    if not folder.is_dir():
        print_message(
            f"error: the bundled examples are not at {folder}; run the demo from a source "
            "checkout (pip install -e .)",
            stderr=True,
        )
        raise typer.Exit(code=2)
    report = build_report([folder])
    print_report(report, strict=False)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        target = out / "validate.json"
        target.write_text(json.dumps(report.to_json(strict=False), indent=2) + "\n")
        print_message(f"wrote {target}")
    if report.errors(strict=False):
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
