"""Helpers shared by tests: reading the real GPU-machine bundles and their raw outputs."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from omni_host.collect.bundle import Bundle, read_bundles

BUNDLES = Path(__file__).resolve().parent / "fixtures" / "bundles"
GPU_MACHINES = ("h100-x1", "h200-x2")


@cache
def gpu_bundle(name: str) -> Bundle:
    (bundle,) = read_bundles(BUNDLES / f"{name}.tar.gz")
    return bundle


def raw(name: str, probe_id: str) -> str:
    """The raw stdout one probe captured on a real machine."""
    return gpu_bundle(name).results[probe_id].stdout


def assert_valid_report(doc: dict) -> None:
    """A report.json (or --format json) document fits the published JSON Schema, judged by
    the jsonschema library, and reads back into the same typed report."""
    import json

    import jsonschema

    from omni_host.model import Report
    from omni_host.report.schema import SCHEMA_FILE

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert Report.from_dict(doc).to_dict() == doc
