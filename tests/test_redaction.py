"""Secrets never leave the host: the collector redacts docker inspect before output."""

from __future__ import annotations

import json

from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _inspect(config: dict, **doc) -> dict:
    return json.loads(redact_docker_inspect(json.dumps([{"Name": "/c", "Config": config,
                                                          **doc}])))[0]


def test_a_containers_command_keeps_only_words_known_safe() -> None:
    """By allowlist (issue 61): the program, option names, numbers, absolute paths, URLs
    without their credentials and query, shell operators; no other word, whatever its name."""
    doc = _inspect({
        "Cmd": ["/app/llama-server", "-m", "/models/m.gguf", "--port", "8080", "--alias",
                "plain-text-one", "--hf-token=hf_two", "--api-key", "/looks/like/a/path"],
        "Entrypoint": ["sh", "-c", "exec server --key=k3y --url https://u:pw@h:1/p?sig=s1g "
                       "&& echo tok_three"],
        "Healthcheck": {"Test": ["CMD-SHELL", "curl -f -H 'Authorization: Bearer b34rer' "
                                              "http://localhost:8080/health || exit 1"]},
        "Labels": {"com.docker.compose.service": "llm", "com.example.note": "lab_four",
                   "org.opencontainers.image.source": "https://example.org/x"}},
        Args=["-m", "/models/m.gguf", "MY_PASSWORD=pw_five", "--api-key", "sk six", "--token",
              7], Path="/app/llama-server")
    text = json.dumps(doc)
    for secret in ("plain-text-one", "hf_two", "/looks/like/a/path", "k3y", "pw", "s1g",
                   "tok_three", "b34rer", "lab_four", "pw_five", "sk six", "sk"):
        assert secret not in text.replace('"/app', "").replace("/models", ""), secret
    config = doc["Config"]
    assert config["Cmd"] == ["/app/llama-server", "-m", "/models/m.gguf", "--port", "8080",
                             "--alias", "<redacted>", "--hf-token=<redacted>", "--api-key",
                             "<redacted>"]
    assert config["Entrypoint"] == ["sh", "-c", "exec <redacted> --key=<redacted> --url "
                                    "https://h:1/p && echo <redacted>"]
    assert config["Healthcheck"]["Test"] == [
        "CMD-SHELL", "curl -f -H <redacted> <redacted> <redacted> "
        "http://localhost:8080/health || exit 1"]
    assert config["Labels"] == {"com.docker.compose.service": "llm",
                                "com.example.note": "<redacted>",
                                "org.opencontainers.image.source": "https://example.org/x"}
    # a value with a space after a secret option is no shell line (its first word was kept
    # as a program), and a number after one is no number to keep
    assert doc["Args"] == ["-m", "/models/m.gguf", "<redacted>", "--api-key", "<redacted>",
                           "--token", "<redacted>"] and doc["Path"] == "/app/llama-server"


_word = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                max_size=12)


@settings(max_examples=300, deadline=None)
@given(words=st.lists(_word, max_size=8), secret=st.text(alphabet="abcdefghijklmnop",
                                                         min_size=12, max_size=20),
       shell=st.booleans(), option=st.sampled_from(["--api-key", "--note", "-x", "--a="]))
def test_no_word_of_a_container_command_outside_the_allowlist_leaves_the_host(
        words: list[str], secret: str, shell: bool, option: str) -> None:
    """The property: a secret word (letters only, so neither a number nor a path nor an
    option) given as a value, inside a shell line or not, never appears in the output."""
    value = [option + secret] if option.endswith("=") else [option, secret]
    argv = ["prog", *words, *value, *words]
    cmd = ["sh", "-c", " ".join(argv)] if shell else argv
    doc = _inspect({"Cmd": cmd, "Healthcheck": {"Test": ["CMD", *argv]}}, Args=argv[1:])
    assert secret not in json.dumps(doc)
    # a value holding a space after an option that says secret: one argument, no shell line
    spaced = _inspect({"Cmd": ["prog", *words, "--api-key", f"{secret[:6]} {secret[6:]}"]})
    assert secret[:6] not in json.dumps(spaced) and secret[6:] not in json.dumps(spaced)
