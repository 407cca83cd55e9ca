"""No secret is stored or printed (issue 43): planted secrets, searched for in every file the
store, the bundles and the collect tarball hold and in everything each command prints.

The secrets reach omni-host the ways an operator's do: vaulted values nested in a mapping and
in a list of the inventory (decrypted by Ansible with the vault password file), and a running
llama-server's argv and environment on the host (real processes, read by the real helper over
the loopback sshd): the short spelling of an option (``-hft``), ``--opt=value``, a password or
a token inside a URL (``-mu``, ``--model-url=``, ``LLAMA_ARG_MODEL_URL``), a URL's query.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import Sshd, run_cli, until_unlocked
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_host.plan.policy import ExpectedState
from omni_host.remote.procfacts import NOT_KEPT, bench_env, redacted_argv, redacted_url

VAULT_PASSWORD = Path(__file__).parent / "inventories" / "vault" / "vault-pass.txt"
# What is planted, and where: each must be found nowhere in what omni-host keeps or shows.
VAULTED = {"nested": "hf_PLANTEDvaultNested", "list": "/srv/PLANTEDvaultList.gguf",
           "bench env": "PLANTEDvaultBenchEnv"}
SERVER = {"short option": "hf_PLANTEDshortOpt", "url password": "PLANTEDurlPass",
          "url token as user": "PLANTEDurlUser", "url query": "PLANTEDurlQuery",
          "api key =": "sk-PLANTEDapiKey", "env url": "PLANTEDenvUrlPass",
          "env token": "PLANTEDenvToken", "alias": "PLANTEDaliasText",
          "chat template": "PLANTEDtemplate", "unknown option": "PLANTEDunknownOpt",
          "stray word": "PLANTEDstrayWord", "env template": "PLANTEDenvTemplate"}
# A container's environment, command, labels and healthcheck (the collector's allowlist)
CONTAINER = {"env": "PLANTEDcontainerEnv", "cmd": "PLANTEDcontainerCmd",
             "label": "PLANTEDcontainerLabel", "health": "PLANTEDcontainerHealth"}
# Written in clear where secrets live (issue 61: stored verbatim, in report.json, the bundle's
# manifest and --format json): the allowlist keeps none of them.
CLEAR = {"bench env token": "hf_PLANTEDclearToken", "bench env password": "PLANTEDclearPassword",
         "bench env url": "PLANTEDclearUrlPass", "-e env": "PLANTEDextraEnv"}
PLANTED = tuple(VAULTED.values()) + tuple(SERVER.values()) + tuple(CLEAR.values()) + \
    tuple(CONTAINER.values())


class _Vaulted(str):
    """A value written as Ansible's ``!vault`` (encrypted with the tests' vault password)."""


def _vault_yaml(value: dict) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    lib = VaultLib([("default", VaultSecret(VAULT_PASSWORD.read_text().strip().encode()))])

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(_Vaulted, lambda d, v: d.represent_scalar(
        "!vault", lib.encrypt(str(v)).decode(), style="|"))
    return yaml.dump(value, Dumper=Dumper)


def _inventory(sshd: Sshd, path: Path, bench: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    bench = bench or {"llama_bench": "/nonexistent/llama-bench", "model": "/nonexistent/m.gguf"}
    host = {"ansible_host": "127.0.0.1", "ansible_port": sshd.port, "ansible_user": sshd.user,
            "ansible_ssh_private_key_file": str(sshd.client_key),
            "omni_bench": {**bench, "env": {
                "HF_TOKEN": _Vaulted(VAULTED["nested"]), "GGML_PLANTED": _Vaulted(VAULTED["bench env"]),
                "HF_HUB_TOKEN": CLEAR["bench env token"], "MY_PASSWORD": CLEAR["bench env password"],
                "LLAMA_ARG_MODEL_URL": f"https://u:{CLEAR['bench env url']}@hf.example/m.gguf",
                "GGML_CUDA_GRAPHS": "0"}},
            "omni_models": [{"path": _Vaulted(VAULTED["list"]), "loader": "gguf"}]}
    (path / "hosts.yml").write_text(_vault_yaml({"all": {
        "vars": {"omni_build_packages": []}, "children": {"lab": {"hosts": {"loop": host}}}}}))
    return path


@contextlib.contextmanager
def _server_with_secrets() -> Iterator[int]:
    """A real process named llama-server whose argv and environment carry secrets (the helper
    reads any process of that name; this one answers nothing)."""
    argv = ["llama-server", "-c", "import time; time.sleep(300)", "-hft", SERVER["short option"],
            "-mu", f"http://admin:{SERVER['url password']}@models.example/m.gguf",
            f"--model-url=https://{SERVER['url token as user']}@hf.example/m.gguf?sig="
            f"{SERVER['url query']}", f"--api-key={SERVER['api key =']}", "--port", "1",
            "-a", SERVER["alias"], f"--chat-template={SERVER['chat template']}",
            "--from-a-newer-llama-cpp", SERVER["unknown option"], "--metrics",
            SERVER["stray word"]]
    env = {"PATH": "/usr/bin:/bin",
           "LLAMA_ARG_MODEL_URL": f"https://u:{SERVER['env url']}@hf.example/m.gguf",
           "LLAMA_ARG_HF_TOKEN": SERVER["env token"],
           "LLAMA_ARG_CHAT_TEMPLATE": SERVER["env template"]}
    proc = subprocess.Popen(argv, executable=sys.executable, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _container_with_secrets(image: str) -> Iterator[str]:
    """A running container whose environment, command, label and healthcheck carry secrets
    (the audit's docker inspect reads every running container)."""
    name = f"omni-test-secrets-{os.getpid()}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "-e", f"APP_SETTING={CONTAINER['env']}",
         "--label", f"com.example.note={CONTAINER['label']}",
         "--health-cmd", f"test -n {CONTAINER['health']}", "--health-interval", "1s", image,
         "sh", "-c", f"sleep 300 # --note {CONTAINER['cmd']}"],
        capture_output=True, text=True, check=True)
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def _leaks(texts: dict[str, bytes]) -> list[str]:
    return [f"{secret} in {where}" for where, data in texts.items() for secret in PLANTED
            if secret.encode() in data]


def _files(root: Path) -> dict[str, bytes]:
    found = {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    for path in list(found):
        if path.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as tar:
                found.update({f"{path}:{m.name}": tar.extractfile(m).read()
                              for m in tar.getmembers() if m.isfile()})
    return found


def test_redaction_rules_by_what_the_values_are() -> None:
    """llama.cpp's own table: -hft is --hf-token (a value not kept); a kept value (-mu) still
    loses a URL's credentials; an option the table does not know keeps its name, never its
    value, nor does a word no option takes; numbers are kept anywhere."""
    argv = ["llama-server", "-hft", "T1", "--hf-token=T2", "--api-key", "K", "--api-key-file",
            "/etc/k", "-mu", "http://u:p@h/m.gguf", "-m", "/m.gguf", "--server-base",
            "https://tok@h/x?a=1#f", "--new-opt", "12", "stray", "-a", "alias-text",
            "--api-key", "-dash-key", "-ngl", "-1", "--mlock"]
    assert redacted_argv(argv) == [
        "llama-server", "-hft", NOT_KEPT, "--hf-token=" + NOT_KEPT, "--api-key", NOT_KEPT,
        "--api-key-file", "/etc/k", "-mu", "http://(secret)@h/m.gguf", "-m", "/m.gguf",
        "--server-base", NOT_KEPT, "--new-opt", "12", NOT_KEPT, "-a", NOT_KEPT,
        "--api-key", NOT_KEPT, "-ngl", "-1", "--mlock"]
    assert bench_env({"LLAMA_ARG_MODEL_URL": "http://u:p@h/m", "LLAMA_ARG_HF_TOKEN": "t",
                      "LLAMA_API_KEY": "k", "GGML_CUDA_GRAPHS": "0",
                      "LLAMA_ARG_CHAT_TEMPLATE": "t", "LLAMA_ARG_ALIAS": "a"}) == {
        "GGML_CUDA_GRAPHS": "0", "LLAMA_ARG_MODEL_URL": "http://(secret)@h/m"}
    assert redacted_url("no url: here") == "no url: here"
    assert redacted_url("a://" * 3) == "a://a://a://"  # no credentials, nothing taken


def test_a_long_hostile_url_is_redacted_in_linear_time() -> None:
    import time

    text = "http://" + "a" * 200_000 + "@" + "?" * 200_000 + "://" * 50_000
    started = time.monotonic()
    out = redacted_url(text)
    assert time.monotonic() - started < 1.0 and "a" * 100 not in out


def test_a_vaulted_part_of_a_mapping_is_recorded_as_vaulted_and_is_a_secret() -> None:
    state = ExpectedState({"omni_bench": {"env": {"HF_TOKEN": "hf_x1", "A/B": "ab_y2"}, "r": 3},
                           "omni_models": [{"path": "/m/one.gguf"}, {"path": "/m/two.gguf"}]},
                          {"omni_bench": "inventory", "omni_models": "inventory",
                           "omni_bench/env/HF_TOKEN": "vault: hosts.yml:7",
                           "omni_bench/env/A~1B": "vault: hosts.yml:9",
                           "omni_models/1/path": "vault: hosts.yml:12"})
    stored = state.to_dict()["values"]
    assert stored["omni_bench"] == {"env": {"HF_TOKEN": "<vaulted>", "A/B": "<vaulted>"}, "r": 3}
    assert stored["omni_models"] == [{"path": "/m/one.gguf"}, {"path": "<vaulted>"}]
    assert set(state.secrets()) == {"hf_x1", "ab_y2", "/m/two.gguf"}
    assert state.values["omni_bench"]["env"]["HF_TOKEN"] == "hf_x1"  # judged with the clear text


@pytest.mark.system
def test_planted_secrets_are_in_no_output_and_no_stored_file(sshd: Sshd, tmp_path: Path,
                                                             docker_image: str) -> None:
    inv = _inventory(sshd, tmp_path / "inv")
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    extra = tmp_path / "extra.yml"  # -e @file: the same env, one more variable in clear
    extra.write_text(yaml.safe_dump({"omni_bench": {
        "llama_bench": "/nonexistent/llama-bench", "model": "/nonexistent/m.gguf",
        "env": {"SOME_KEY_VAR": CLEAR["-e env"], "HF_HUB_TOKEN": CLEAR["bench env token"]}}}))
    common = ("-i", str(inv), "loop", "--vault-password-file", str(VAULT_PASSWORD),
              "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"))
    printed: dict[str, bytes] = {}
    doc: dict = {}
    with _server_with_secrets() as pid, _container_with_secrets(docker_image) as container:
        for fmt in ("json", "table", "markdown", "html", "junit", "prometheus"):
            result = run_cli("audit", *common, "--report-dir", str(store), "--format", fmt, "-v")
            assert result.code in (0, 1), result.stderr
            printed[f"audit --format {fmt}"] = (result.stdout + result.stderr).encode()
            doc = json.loads(result.stdout) if fmt == "json" else doc
        result = run_cli("audit", *common, "-e", f"@{extra}", "--report-dir", str(store),
                         "--format", "json")
        assert result.code in (0, 1), result.stderr
        printed["audit -e @file"] = (result.stdout + result.stderr).encode()
        given = json.loads(result.stdout)["hosts"][0]["policy"]["values"]["omni_bench"]["env"]
        result = run_cli("collect", *common, "--out", str(out / "fleet.tar.gz"))
        assert result.code == 0, result.stderr
        printed["collect"] = (result.stdout + result.stderr).encode()
        result = run_cli("audit", "--bundle", str(out / "fleet.tar.gz"), "-i", str(inv),
                         "--vault-password-file", str(VAULT_PASSWORD), "--format", "json",
                         "--no-store")
        printed["audit --bundle"] = (result.stdout + result.stderr).encode()
        result = run_cli("serve", "watch", *common, "--for", "2s", "--every", "1s",
                         "--report-dir", str(store), "--format", "json",
                         "--output", str(out / "watch.json"))
        assert result.code in (0, 1), result.stderr
        printed["serve watch"] = (result.stdout + result.stderr).encode()
    kept = _files(store) | _files(out)
    assert not _leaks(printed) and not _leaks(kept)
    # ...and what was searched holds the records: the policy, the server, the watch
    (host,) = doc["hosts"]
    assert host["policy"]["values"]["omni_bench"]["env"]["HF_TOKEN"] == "<vaulted>"
    assert host["policy"]["values"]["omni_models"][0]["path"] == "<vaulted>"
    env = host["policy"]["values"]["omni_bench"]["env"]
    assert env["GGML_CUDA_GRAPHS"] == "0"  # a tuning variable: kept as it is
    assert env["LLAMA_ARG_MODEL_URL"] == "https://(secret)@hf.example/m.gguf"
    assert env["MY_PASSWORD"].startswith("<digest ") and env["HF_HUB_TOKEN"].startswith("<digest ")
    assert given["SOME_KEY_VAR"].startswith("<digest ")
    assert given["HF_HUB_TOKEN"] == env["HF_HUB_TOKEN"]  # the same value: the same digest
    mine = next(s for s in host["facts"]["servers"] if s["pid"] == pid)
    argv = mine["argv"]
    assert "(secret)" in " ".join(argv) and argv[argv.index("-hft") + 1] == NOT_KEPT
    assert argv[argv.index("-a") + 1] == NOT_KEPT and argv[-1] == NOT_KEPT  # the stray word
    assert "--chat-template=" + NOT_KEPT in argv and "--from-a-newer-llama-cpp" in argv
    assert argv[argv.index("--port") + 1] == "1"  # a value the table keeps
    # the container was read (its name, its healthcheck's program), its secrets not
    assert f"{container}: CMD-SHELL test -n <redacted>" in printed["audit --format json"].decode()
    assert any(name.endswith("fleet.tar.gz:loop/manifest.json") for name in kept)
    assert (out / "watch.json").exists()


@pytest.mark.system
def test_a_bench_stores_no_vaulted_value(sshd: Sshd, llama, tmp_path: Path) -> None:
    """The vaulted variables of omni_bench.env reach llama-bench (GGML_PLANTED is one the
    bench records as speed-relevant) and nowhere else."""
    from test_serve import BENCH_ARGS

    binary, model = llama
    spec = {"llama_bench": str(binary), "model": str(model), "args": BENCH_ARGS,
            "repetitions": 2, "max_other_cpus": 4, "max_spread_pct": 10000}
    inv = _inventory(sshd, tmp_path / "inv", spec)
    store = tmp_path / "store"
    result = until_unlocked(lambda: run_cli(
        "bench", "-i", str(inv), "loop", "--vault-password-file", str(VAULT_PASSWORD),
        "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"),
        "--report-dir", str(store), "--format", "json", timeout=900))
    assert result.code in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    perf = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.tokens-per-s")
    assert perf["status"] != "skip", perf["summary"]  # it ran, with the clear value in its env
    assert "<vaulted>" in result.stdout
    assert not _leaks({"bench": (result.stdout + result.stderr).encode()}) and \
        not _leaks(_files(store))


_names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
# longer than any name, so a value is never found as a name
_secrets = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=13, max_size=24)


@settings(max_examples=200, deadline=None)
@given(env=st.dictionaries(_names, _secrets, max_size=6), undeclared=_secrets, url=_secrets)
def test_no_value_of_a_key_not_known_safe_is_ever_stored(env: dict, undeclared: str,
                                                         url: str) -> None:
    """The property (issue 61): whatever the names, a value is stored only where its key is
    known safe (a speed variable, a declared option), a URL's password never, and the same
    value always digests the same (a change stays visible)."""
    from omni_host.plan.storable import env_safe

    values = {"omni_bench": {"env": {**env, "LLAMA_ARG_MODEL_URL": f"https://u:{url}@h/m"},
                             "repetitions": 3},
              "omni_not_declared": undeclared}
    stored = ExpectedState(values, {}).to_dict()["values"]
    text = json.dumps(stored)
    assert url not in text and undeclared not in text
    for name, value in env.items():
        kept = stored["omni_bench"]["env"][name]
        assert (kept == value) == env_safe(name), (name, kept)
        if not env_safe(name):
            assert value not in text and kept == ExpectedState(values, {}).to_dict()[
                "values"]["omni_bench"]["env"][name]
    assert stored["omni_bench"]["repetitions"] == 3


@settings(max_examples=100, deadline=None)
@given(env=st.dictionaries(_names, _secrets, max_size=6))
def test_a_probes_argv_keeps_no_value_of_an_env_name_not_known_safe(env: dict) -> None:
    """The bench helper's argv carries omni_bench.env to the host; the bundle's manifest keeps
    every probe's argv (HF_TOKEN was stored there in clear, issue 61)."""
    from omni_host.plan.storable import env_safe, storable_argv

    argv = ("python3", "-c", "code", "--env-json", json.dumps(env), "--", "-p", "512")
    kept = storable_argv(argv)
    assert kept[:4] == argv[:4] and kept[5:] == argv[5:]
    stored = json.loads(kept[4])
    assert {k for k in env if env_safe(k)} == {k for k, v in stored.items() if v == env[k]}
    assert not any(v in kept[4] for k, v in env.items() if not env_safe(k))


HELP = Path(__file__).parent / "fixtures" / "captures" / "serve" / "llama-server-help_0.3.36.txt"
# the value hints of llama-server --help whose values are free text or secrets: never kept
FREE_TEXT = {"KEY", "TOKEN", "JINJA_TEMPLATE", "GRAMMAR", "SCHEMA", "JSON", "MESSAGE", "PROMPT",
             "STRING", "HEADERS"}


def _help_table(text: str) -> tuple[dict[str, int], set[str]]:
    """llama-server --help as a table: each spelling -> 0 (no value), 1 (a value kept), 2 (two
    kept: START END), -1 (a value never kept); and the variables of the never-kept ones."""
    table, env, last = {}, set(), 0
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            head = re.split(r"\s{2,}", re.sub(r",\s+", ", ", line.strip()), maxsplit=1)[0]
            *names, tail = head.split(", ")
            name, _, hint = tail.partition(" ")
            words = re.sub(r"<[^>]*>", "X", hint).split()
            last = -1 if hint in FREE_TEXT else min(len(words), 2) if hint else 0
            table.update({n: last for n in [*names, name]})
        found = re.search(r"\(env: (\w+)\)", line)
        if found and last == -1:
            env.add(found.group(1))
    return table, env


def test_the_argv_allowlist_is_llama_cpps_own_table() -> None:
    """The table the host helper keeps values by is the one llama-server's own --help gives
    (the capture, not a list typed here): 412 spellings, 19 of them free text or secrets."""
    from omni_host.remote import procfacts

    table, env = _help_table(HELP.read_text())
    assert table == procfacts._TAKES
    assert set(procfacts.NOT_KEPT_ENV) == env
    assert len(table) == 412 and sum(v == -1 for v in table.values()) == 19
    assert table["-hft"] == table["--api-key"] == table["-a"] == -1
    assert table["-ot"] == table["-ngl"] == table["-m"] == table["--port"] == 1
    assert table["--metrics"] == 0 and table["--control-vector-layer-range"] == 2
    assert "--mlock" not in table  # this llama.cpp has --load-mode; older ones: a name kept


_words = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                 max_size=10)


@settings(max_examples=300, deadline=None)
@given(before=st.lists(_words, max_size=6), secret=_secrets,
       option=st.sampled_from(["--api-key", "-hft", "-a", "--chat-template", "-r", "-j",
                               "--not-an-option", "--server-base", "--mlock"]),
       after=st.lists(_words, max_size=6), eq=st.booleans())
def test_a_server_argv_keeps_no_value_the_table_does_not_say_is_safe(
        before: list[str], secret: str, option: str, after: list[str], eq: bool) -> None:
    """Whatever surrounds it, a value given to an option whose value is free text or a
    secret, to an option llama.cpp does not have, or as a word no option takes, never leaves
    the host (the digits-only words the generator cannot make here are numbers, kept)."""
    from omni_host.remote.procfacts import redacted_argv

    secret = "k" + secret  # a word of digits only is a number, kept after an unknown option
    arg = [f"{option}={secret}"] if eq else [option, secret]
    argv = ["llama-server", *before, "--metrics", *arg, *after]
    out = redacted_argv(argv)
    assert len(out) == len(argv) and out[0] == "llama-server"
    assert secret not in " ".join(out), (argv, out)
    assert "1234567890123" not in " ".join(redacted_argv(["llama-server", "--api-key",
                                                          "1234567890123"]))
