"""Secrets never leave the host: the collector redacts docker inspect before output."""

from __future__ import annotations

import json

from conftest import FIXTURES

from omni_host.probes.parsers.docker import parse_docker_inspect
from omni_host.remote.collector import redact_docker_inspect

RAW = (FIXTURES / "captures" / "docker-inspect_vm-busybox-3containers_raw.json").read_text()
SECRETS = ("hunter2", "s3cret", "topsecret")


def test_real_inspect_holds_secrets_before_redaction() -> None:
    assert all(secret in RAW for secret in SECRETS)


def test_redaction_removes_env_values_and_secret_flags_but_keeps_tunables() -> None:
    redacted = redact_docker_inspect(RAW)
    assert not any(secret in redacted for secret in SECRETS)
    containers = {c.name: c for c in parse_docker_inspect(redacted)}
    assert containers["memgraph"].env_value("GLIBC_TUNABLES") == "glibc.cpu.hwcaps=-AVX512F,-AVX512VL"
    assert containers["memgraph"].env_value("DB_PASSWORD") == "<redacted>"
    assert containers["qdrant"].env_value("QDRANT__SERVICE__API_KEY") == "<redacted>"
    doc = {d["Name"]: d for d in json.loads(redacted)}
    assert doc["/memgraph"]["Config"]["Cmd"] == ["sleep", "3600", "--api-key", "<redacted>"]
    assert doc["/memgraph"]["Args"] == ["3600", "--api-key", "<redacted>"]


def test_redaction_passes_non_json_through() -> None:
    assert redact_docker_inspect("Cannot connect to the Docker daemon") == \
        "Cannot connect to the Docker daemon"
