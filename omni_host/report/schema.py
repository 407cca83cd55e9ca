"""The published JSON Schema of report.json (``report.schema.json`` beside this module), derived
from the typed report so the two cannot drift: a test regenerates it and compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omni_host import codec
from omni_host.model import REPORT_SCHEMA
from omni_host.reports import Report

SCHEMA_FILE = Path(__file__).with_name("report.schema.json")


def report_schema() -> dict[str, Any]:
    return codec.json_schema(Report, schema_id=f"urn:omni-host:report:{REPORT_SCHEMA}",
                             title=f"omni-host report.json (schema_version {REPORT_SCHEMA})")


def schema_text() -> str:
    return json.dumps(report_schema(), indent=2) + "\n"
