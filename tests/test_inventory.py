"""Inventories as Ansible reads them. The corpus in tests/inventories/ (YAML, INI, a mixed
directory, an executable script, a vaulted value, group priority, templated values, the
ansible_ssh_* aliases) is resolved by omni-host and, for every host, compared with what
Ansible itself renders for the same source: ``ansible HOST -m debug`` evaluates the variables
exactly as a playbook does. Ansible is the oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, run_cli_process

from omni_host.errors import InventoryError
from omni_host.plan.hosts import plan_inventory
from omni_host.plan.inventory import CONNECTION_VARS, SECRET_VARS, VaultOptions, load_inventory
from omni_host.plan.policy import policy_from_vars

CORPUS = REPO / "tests" / "inventories"
BIN = Path(sys.executable).parent
VAULT = VaultOptions((CORPUS / "vault" / "vault-pass.txt",))
SOURCES = {  # name -> (source, vault?)
    "yaml": (CORPUS / "yaml", False),
    "ini": (CORPUS / "ini" / "hosts.ini", False),
    "mixed": (CORPUS / "mixed", False),
    "script": (CORPUS / "script" / "inventory.py", False),
    "vault": (CORPUS / "vault" / "hosts.yml", True),
    "priority": (CORPUS / "priority" / "hosts.yml", False),
    "templated": (CORPUS / "templated" / "hosts.yml", False),
    "aliases": (CORPUS / "aliases" / "hosts.ini", False),
}
_WANTED = "|".join(v for v in CONNECTION_VARS if v not in SECRET_VARS)


def ansible_oracle(source: Path, vault: bool) -> dict[str, dict]:
    """Per host, the omni_* and connection variables as Ansible renders them in a play."""
    regex = f"^(omni_.*|{_WANTED})$"
    expr = (f"{{{{ dict(query('varnames', '{regex}') | zip(query('vars', "
            f"*query('varnames', '{regex}')))) | to_json }}}}")
    cmd = [str(BIN / "ansible"), "-i", str(source), "all", "-m", "ansible.builtin.debug",
           "-a", f"msg={expr}", "--one-line"]
    if vault:
        cmd += ["--vault-password-file", str(CORPUS / "vault" / "vault-pass.txt")]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = {}
    for line in proc.stdout.splitlines():  # "HOST | SUCCESS => {json}" per host
        host, _, result = line.partition(" | SUCCESS => ")
        out[host] = json.loads(json.loads(result)["msg"])
    return out


@pytest.mark.system  # runs Ansible itself
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_resolved_variables_equal_what_ansible_renders(name: str) -> None:
    """The omni_* values exactly, and the endpoint omni-host connects to equal to the one
    Ansible's connection would use (a play normalises the aliases into ansible_host, _port,
    _user and _ssh_private_key_file, and defaults ansible_host to the inventory name)."""
    source, vault = SOURCES[name]
    expected = ansible_oracle(source, vault)
    inv = load_inventory(source, VAULT if vault else None)
    assert sorted(inv.names()) == sorted(expected)
    plans = {p.name: p for p in plan_inventory(inv, "all")}
    for host, want in expected.items():
        got = {k: v for k, v in inv.host(host).vars.items() if k.startswith("omni_")}
        assert got == {k: v for k, v in want.items() if k.startswith("omni_")}, host
        ssh = plans[host].ssh
        assert ssh is not None
        assert (ssh.alias, ssh.port, ssh.user, ssh.key_file) == (
            want["ansible_host"], want.get("ansible_port"), want.get("ansible_user"),
            want.get("ansible_ssh_private_key_file")), host


# What the corpus files themselves say (so a wrong oracle run cannot hide a wrong reading).
@pytest.mark.parametrize(("name", "host", "var", "value"), [
    ("yaml", "gpu01", "omni_swap_size_mib", 2048),   # group_vars/blackwell.yml (child group)
    ("yaml", "gpu02", "omni_swap_size_mib", 4096),   # host_vars/gpu02.yml
    ("yaml", "gpu03", "omni_swap_size_mib", 1024),   # inference's inline vars
    ("yaml", "gpu03", "omni_numa_nps", 1),         # group_vars/all.yml over all's inline vars
    ("ini", "gpu01", "omni_swap_size_mib", 2048),
    ("ini", "gpu02", "ansible_user", "root"),
    ("ini", "gpu01", "ansible_port", 2222),
    ("mixed", "nas", "omni_swap_size_mib", 0),       # from the .ini beside the .yml
    ("mixed", "gpu01", "omni_swap_size_mib", 8192),
    ("script", "gpu01", "ansible_port", 2201),
    ("vault", "gpu01", "omni_swap_path", "/var/tmp/vaulted-swapfile"),
    ("priority", "gpu01", "omni_swap_size_mib", 1111),  # ansible_group_priority 10 wins
    ("priority", "gpu02", "omni_swap_size_mib", 2222),
    ("templated", "gpu01", "omni_swap_path", "/var/tmp/swapfile"),
    ("templated", "gpu01", "ansible_host", "gpu01.lab.example"),
    ("aliases", "gpu01", "ansible_ssh_port", 2203),
])
def test_corpus_values(name: str, host: str, var: str, value: object) -> None:
    source, vault = SOURCES[name]
    assert load_inventory(source, VAULT if vault else None).host(host).vars[var] == value


def test_a_secret_is_never_rendered_or_decrypted() -> None:
    inv = load_inventory(SOURCES["vault"][0], VAULT)
    host = inv.host("gpu01")
    assert host.vars["ansible_become_password"] == "<set>"
    assert "s3cr3t" not in json.dumps(host.vars)


def test_origins_name_file_and_line() -> None:
    host = load_inventory(CORPUS / "yaml").host("gpu02")
    assert host.origins["omni_swap_size_mib"] == f"{CORPUS / 'yaml' / 'host_vars' / 'gpu02.yml'}:1"


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("all", ["gpu01", "gpu02", "gpu03", "nas"]),
    ("inference", ["gpu01", "gpu02", "gpu03"]),
    ("inference:!blackwell", ["gpu02", "gpu03"]),
    ("all:&inference", ["gpu01", "gpu02", "gpu03"]),
    ("nas,gpu03", ["nas", "gpu03"]),
    ("~gpu0[13]", ["gpu01", "gpu03"]),
    ("inference[0]", ["gpu01"]),
    ("inference[1:]", ["gpu02", "gpu03"]),
])
def test_patterns_as_ansible(pattern: str, hosts: list[str]) -> None:
    assert load_inventory(CORPUS / "ini" / "hosts.ini").select_names(pattern) == hosts


def test_aliases_become_the_ssh_endpoint() -> None:
    plans = {p.name: p for p in plan_inventory(load_inventory(SOURCES["aliases"][0]), "all")}
    assert plans["gpu01"].ssh is not None
    assert (plans["gpu01"].address, plans["gpu01"].ssh.key_file) == ("ops@10.0.3.1:2203",
                                                                    "/keys/ops")
    assert plans["gpu02"].address == "root@10.0.3.2"  # ansible_host wins over ansible_ssh_host


def test_templated_bool_string_is_coerced_as_ansible_does() -> None:
    (plan,) = plan_inventory(load_inventory(SOURCES["templated"][0]), "all")
    assert plan.policy.swap_size_mib == 16384
    assert plan.policy.tunables_everywhere is False  # the string "false", as `| bool` reads it


@pytest.mark.parametrize(("files", "message"), [
    ({"hosts.yml": "all:\n  hosts:\n    a: {ansible_port: 22\n"}, r"hosts\.yml:\d+: YAML parsing failed"),
    ({"hosts.ini": "[lab\na\n"}, r"hosts\.ini: Failed to parse inventory"),
    ({"inv.sh": "#!/bin/sh\necho garbage\n"}, r"inv\.sh: .*JSON"),
    ({"inv.sh": "#!/bin/sh\nexit 3\n"}, r"inv\.sh: .*(exit|status|returned)"),
])
def test_broken_sources_are_one_line_naming_the_file(tmp_path: Path, files: dict[str, str],
                                                      message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755 if name.endswith(".sh") else 0o644)
    source = tmp_path / next(iter(files))
    with pytest.raises(InventoryError, match=message) as err:
        load_inventory(source)
    assert "\n" not in str(err.value)


def test_wrong_vault_password_is_one_line(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("not the password\n")
    inv = load_inventory(SOURCES["vault"][0], VaultOptions((wrong,)))
    with pytest.raises(InventoryError, match="gpu01: omni_swap_path: .*(Decryption|decrypt)"):
        inv.host("gpu01")


def test_missing_vault_password_is_one_line() -> None:
    inv = load_inventory(SOURCES["vault"][0])
    with pytest.raises(InventoryError, match="gpu01: omni_swap_path: .*vault"):
        inv.host("gpu01")


def test_unknown_pattern_names_it() -> None:
    with pytest.raises(InventoryError, match="'gpu09' matches no host or group"):
        load_inventory(CORPUS / "yaml").select("gpu09")


def test_bad_regex_pattern_is_one_line() -> None:
    with pytest.raises(InventoryError, match=r"host pattern '~gpu\(': Invalid host list pattern"):
        load_inventory(CORPUS / "yaml").select("~gpu(")


@pytest.mark.system  # runs Ansible itself
def test_odd_patterns_select_what_ansible_selects() -> None:
    source = CORPUS / "yaml"
    inv = load_inventory(source)
    for pattern in ("~[", "gpu0[1:2]", "inference[-1]", "*:!nas", "gpu*:&blackwell"):
        proc = subprocess.run([str(BIN / "ansible"), "-i", str(source), pattern, "--list-hosts"],
                              capture_output=True, text=True, check=True)
        listed = [line.strip() for line in proc.stdout.splitlines()[1:]]
        if not listed:  # Ansible selects nothing: omni-host says so instead of auditing nothing
            with pytest.raises(InventoryError, match="matches no host"):
                inv.select_names(pattern)
        else:
            assert inv.select_names(pattern) == listed, pattern


@pytest.mark.parametrize(("hostvars", "message"), [
    ("ansible_connection=winrm", "ansible_connection 'winrm'"),
    ("ansible_ssh_common_args='-o ProxyCommand=\"nc %h %p\"'", "ansible_ssh_common_args"),
    ("ansible_password=hunter2", "ansible_password"),
    ("ansible_become=true ansible_become_method=su", "ansible_become_method 'su'"),
])
def test_what_paramiko_cannot_do_is_refused_by_name(tmp_path: Path, hostvars: str,
                                                    message: str) -> None:
    (tmp_path / "hosts.ini").write_text(f"gpu01 {hostvars}\n")
    with pytest.raises(InventoryError, match=f"host gpu01: {message}") as err:
        plan_inventory(load_inventory(tmp_path / "hosts.ini"), "all")
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize(("vars_", "message"), [
    ({"omni_swap_size_mib": -1}, "omni_swap_size_mib: must be >= 0"),
    ({"omni_numa_nps": "one"}, "argument 'omni_numa_nps' is of type str and we were unable "
                                 "to convert to int"),  # Ansible's own words
    ({"omni_tunables_everywhere": "maybe"}, "unable to convert to bool"),
    ({"omni_gpu_driver_min": "latest"}, "omni_gpu_driver_min: must be a dotted version"),
    ({"omni_gpus": [{"model": "RTX 5090"}]}, "missing required arguments: vram_gib found in omni_gpus"),
    ({"omni_models": [{"path": "/m.gguf", "loader": "vllm"}]}, "loader must be one of: gguf, full"),
    ({"omni_swap_path": "swapfile"}, "omni_swap_path: must be an absolute path"),
    ({"omni_swapsize_mib": 1}, "unknown variable"),
    ({"omni_base_packages": ["x"]}, r"omni_base_packages is now omni_build_packages"),
    ({"omni_glibc_tunables": "glibc.cpu.hwcaps=-AVX512F,-AVX512VL"}, "AVX512BW,AVX512CD,AVX512DQ missing"),
])
def test_invalid_policy_values(vars_: dict, message: str) -> None:
    with pytest.raises(InventoryError, match=message):
        policy_from_vars(vars_, "host x")


def test_shipped_reference_inventory_is_valid() -> None:
    plans = plan_inventory(load_inventory(REPO / "inventory"), "omni")
    assert [p.name for p in plans] == ["omni"]
    policy = plans[0].policy
    assert policy.numa_nps == 1 and policy.swap_size_mib == 204800  # NPS1: the role default
    assert [g.vram_gib for g in policy.gpus or ()] == [96, 32]
    assert policy.zen5_tunables_containers == ("memgraph",)


def test_cli_bad_inventory_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    a: {ansible_port: 22\n")
    result = run_cli("audit", "-i", str(tmp_path), "--no-store")
    assert result.code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "hosts.yml:" in lines[0] and "Traceback" not in result.stderr


def test_cli_unknown_pattern_exits_2() -> None:
    result = run_cli("audit", "-i", str(CORPUS / "yaml"), "nosuchhost", "--no-store")
    assert result.code == 2
    assert "'nosuchhost' matches no host or group" in result.stderr


def test_cli_uses_ansible_cfg_inventory_when_i_is_absent(tmp_path: Path) -> None:
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\ninventory = {CORPUS / 'ini' / 'hosts.ini'}\n")
    result = run_cli_process("audit", "nosuchhost", "--no-store", env={"ANSIBLE_CONFIG": str(cfg)})
    assert result.code == 2  # the pattern was looked up in ansible.cfg's inventory
    assert f"matches no host or group in {CORPUS / 'ini' / 'hosts.ini'}" in result.stderr


def test_cli_uses_ansible_inventory_env_when_i_is_absent() -> None:
    result = run_cli("audit", "nosuchhost", "--no-store",
                     env={"ANSIBLE_INVENTORY": str(CORPUS / "ini" / "hosts.ini")})
    assert result.code == 2
    assert f"matches no host or group in {CORPUS / 'ini' / 'hosts.ini'}" in result.stderr


def test_cli_forks_zero_is_a_usage_error() -> None:
    result = run_cli("audit", "--forks", "0", "--no-store")
    assert result.code == 2
    assert "--forks" in result.stderr


def _plan(source: Path, pattern: str = "all", vault: VaultOptions | None = None) -> dict:
    """Plan the hosts of ``source`` as the CLI does, and say whether ansible-core was asked."""
    inv = load_inventory(source, vault)
    plans = plan_inventory(inv, pattern)
    return {"ansible": inv.asked_ansible,
            "plans": {p.name: [p.address, p.expected.values] for p in plans}}


def test_a_static_inventory_is_answered_from_the_cache_until_a_file_changes(
        tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated_home / ".cache"))
    source = tmp_path / "inv"
    shutil.copytree(CORPUS / "ini", source)
    cold, warm = _plan(source / "hosts.ini"), _plan(source / "hosts.ini")
    assert cold["ansible"] is True and warm["ansible"] is False
    assert warm["plans"] == cold["plans"]
    assert warm["plans"]["gpu02"][1]["omni_swap_size_mib"] == 4096
    (source / "host_vars" / "gpu02.yml").write_text("omni_swap_size_mib: 8192\n")
    changed = _plan(source / "hosts.ini")
    assert changed["ansible"] is True
    assert changed["plans"]["gpu02"][1]["omni_swap_size_mib"] == 8192
    cache = isolated_home / ".cache" / "omni-host" / "inventory"
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert {oct(p.stat().st_mode & 0o777) for p in cache.iterdir()} == {"0o600"}
    other = _plan(source / "hosts.ini", "blackwell")  # a new pattern: Ansible answers it once
    assert other["ansible"] is True and list(other["plans"]) == ["gpu01"]
    assert _plan(source / "hosts.ini", "blackwell")["ansible"] is False


_WARM_PROCESS = """
import sys
from omni_host.plan.hosts import plan_inventory
from omni_host.plan.inventory import load_inventory
plan_inventory(load_inventory(sys.argv[1]), "all")
print("ansible.inventory.manager" in sys.modules)
"""


def test_a_cached_inventory_never_imports_ansible(
        tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the cache: a warm start of the CLI does not pay for Ansible's inventory
    machinery (the policy's argument-spec validator is all it loads)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated_home / ".cache"))
    source = CORPUS / "ini" / "hosts.ini"
    assert _plan(source)["ansible"] is True  # cold, in this process: fills the cache
    proc = subprocess.run([sys.executable, "-c", _WARM_PROCESS, str(source)],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("name", ["script", "templated", "vault"])
def test_dynamic_templated_or_vaulted_inventories_are_never_cached(
        name: str, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(isolated_home / ".cache"))
    source, vault = SOURCES[name]
    for _ in range(2):
        assert _plan(source, vault=VAULT if vault else None)["ansible"] is True
    cache = isolated_home / ".cache" / "omni-host" / "inventory"
    assert not cache.exists() or not list(cache.iterdir())


def test_ansible_vault_password_file_from_the_environment_is_honoured(tmp_path: Path) -> None:
    """ANSIBLE_VAULT_PASSWORD_FILE, as Ansible reads it (at import: hence a process)."""
    env = {"ANSIBLE_VAULT_PASSWORD_FILE": str(CORPUS / "vault" / "vault-pass.txt")}
    result = run_cli_process("audit", "-i", str(_vaulted_local(tmp_path)), "--no-store", env=env)
    assert result.code in (0, 1), result.stderr
    assert "omni_swap_path" not in result.stderr and "box" in result.stdout


def _vaulted_local(tmp_path: Path) -> Path:
    """This machine, with the corpus's vaulted omni_swap_path (and become password)."""
    text = (CORPUS / "vault" / "hosts.yml").read_text()
    text = text.replace("    gpu01:\n", "    box:\n      ansible_connection: local\n"
                        "      omni_build_packages: []\n")
    (tmp_path / "hosts.yml").write_text(text)
    return tmp_path / "hosts.yml"


def test_cli_vault_password_file_and_nothing_vaulted_is_stored(tmp_path: Path) -> None:
    inv = _vaulted_local(tmp_path)
    password = str(CORPUS / "vault" / "vault-pass.txt")
    result = run_cli("audit", "-i", str(inv), "--vault-password-file", password,
                     "--format", "json", "--report-dir", str(tmp_path / "store"))
    assert result.code in (0, 1), result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    (swap,) = [r for r in host["results"] if r["id"] == "swap.capacity"]
    assert swap["status"] == "fail"  # judged with the decrypted path (no swap file there)...
    assert swap["expected"]["path"] == "<vaulted>"  # ...which no output shows
    assert host["policy"]["values"]["omni_swap_path"] == "<vaulted>"
    assert host["policy"]["origins"]["omni_swap_path"].startswith("vault: ")
    stored = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert b"vaulted-swapfile" not in stored and b"s3cr3t" not in stored
    assert b"<vaulted>" in stored  # the store was searched, and it holds the record


def test_a_host_vars_file_that_appears_is_read_by_the_next_load(tmp_path: Path) -> None:
    """ansible-core remembers which vars files exist per process; a second load in the same
    process (init then audit, the scheduler) must see the file written in between."""
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    box:\n")
    assert "omni_swap_size_mib" not in load_inventory(tmp_path).host("box").vars
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "box.yml").write_text("omni_swap_size_mib: 2048\n")
    assert load_inventory(tmp_path).host("box").vars["omni_swap_size_mib"] == 2048


def test_a_vault_password_given_once_does_not_decrypt_a_later_inventory(tmp_path: Path) -> None:
    """Ansible keeps vault secrets per process; the scheduler and recheck load more than one
    inventory in a process, and a password given for the first must not open the second."""
    inv = _vaulted_local(tmp_path)
    password = str(CORPUS / "vault" / "vault-pass.txt")
    first = run_cli("audit", "-i", str(inv), "--vault-password-file", password, "--no-store")
    assert first.code in (0, 1), first.stderr
    second = run_cli("audit", "-i", str(inv), "--no-store")
    assert second.code == 2 and "box: omni_swap_path:" in second.stderr


def test_cli_vaulted_inventory_without_password_is_one_line(tmp_path: Path) -> None:
    result = run_cli("audit", "-i", str(_vaulted_local(tmp_path)), "--no-store")
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "box: omni_swap_path:" in result.stderr


@pytest.mark.system  # runs Ansible itself
def test_limit_selects_what_ansible_limit_selects(tmp_path: Path) -> None:
    """``--limit`` as ``ansible PATTERN --limit SUBSET --list-hosts`` has it: the pattern's
    hosts, in its order, within the subset (a pattern, or @file)."""
    from omni_host.plan.hosts import selected_names

    source = CORPUS / "yaml"
    inv = load_inventory(source)
    listing = tmp_path / "retry"
    listing.write_text("gpu02\n\ngpu01\n")
    patterns = tmp_path / "patterns"  # Ansible reads each line as a pattern: a group, a glob
    patterns.write_text("storage\ngpu0*\n")
    for pattern, limit in (("all", "gpu0*"), ("all", "inference[0]"), ("inference", "gpu02,nas"),
                           ("all", f"@{listing}"), ("all", f"@{patterns}"),
                           ("all", f"nas,@{listing}")):
        proc = subprocess.run([str(BIN / "ansible"), "-i", str(source), pattern, "--limit", limit,
                               "--list-hosts"], capture_output=True, text=True, check=True)
        listed = [line.strip() for line in proc.stdout.splitlines()[1:]]
        assert listed and selected_names(inv, pattern, limit) == listed, (pattern, limit)
    with pytest.raises(InventoryError, match="limited to 'nas' matches no host"):
        selected_names(inv, "inference", "nas")


def test_extra_vars_win_over_the_inventory_and_are_recorded_as_the_runs_own() -> None:
    from omni_host.plan.inventory import parse_extra_vars

    extra = parse_extra_vars(["omni_swap_size_mib=2048 omni_numa_nps=4",
                              '{"omni_gpus": [{"model": "RTX 5090", "vram_gib": 32}]}'])
    assert extra["omni_swap_size_mib"] == "2048"  # a string, typed by the schema below
    inv = load_inventory(CORPUS / "yaml")
    (plan,) = plan_inventory(inv, "gpu01", extra=extra)
    assert plan.policy.swap_size_mib == 2048 and plan.policy.numa_nps == 4
    assert plan.expected.origins["omni_swap_size_mib"] == "extra var (-e)"
    assert plan.expected.values["omni_gpus"] == [{"model": "RTX 5090", "vram_gib": 32}]
    for bad, message in ((["ansible_host=evil"], "only omni_\\* values"),
                         (["just words"], "not name=value"),
                         (["@/nonexistent/x.yml"], "No such file")):
        with pytest.raises(InventoryError, match=message):
            parse_extra_vars(bad)
    with pytest.raises(InventoryError, match="omni_swap_size_mib"):
        plan_inventory(inv, "gpu01", extra={"omni_swap_size_mib": "lots"})
    with pytest.raises(InventoryError, match="omni_swap_size_mb"):
        plan_inventory(inv, "gpu01", extra={"omni_swap_size_mb": "1"})


@pytest.mark.system  # audits this machine
def test_the_cli_takes_limit_and_extra_vars() -> None:
    """``-e`` on this machine's audit: the value judges, the report records it as the run's;
    ``python -m omni_host`` is the same program."""
    result = subprocess.run([sys.executable, "-m", "omni_host", "audit", "-e",
                             "omni_swap_size_mib=10000000", "--format", "json", "--no-store"],
                            capture_output=True, text=True, check=False, timeout=120)
    doc = json.loads(result.stdout)
    (host,) = doc["hosts"]
    swap = next(r for r in host["results"] if r["id"] == "swap.capacity")
    assert swap["status"] == "fail" and "10,000,000 MiB" in swap["summary"]
    assert host["policy"]["origins"]["omni_swap_size_mib"] == "extra var (-e)"
    refused = run_cli("audit", "-e", "ansible_host=x", "--no-store")
    assert refused.code == 2 and "only omni_* values" in refused.stderr
    limited = run_cli("audit", "-i", str(CORPUS / "yaml"), "all", "--limit", "nothing-here",
                      "--no-store")
    assert limited.code == 2 and "nothing-here" in refused.stderr + limited.stderr


@pytest.mark.system  # an executable inventory script, run by Ansible
def test_a_hanging_inventory_script_is_stopped_and_named(tmp_path: Path) -> None:
    script = tmp_path / "hangs.py"
    script.write_text("#!/usr/bin/env python3\nimport time\ntime.sleep(120)\n")
    script.chmod(0o755)
    result = run_cli("audit", "-i", str(script), "all", "--no-store",
                     env={"OMNI_HOST_INVENTORY_TIMEOUT": "1.5"})
    assert result.code == 2, result.stderr
    assert f"{script}: did not finish in 1.5s" in result.stderr
    assert result.seconds < 20 and "Traceback" not in result.stderr


def test_an_ansible_cfg_in_a_world_writable_directory_is_ignored_with_a_warning(
        tmp_path: Path) -> None:
    """As Ansible: ./ansible.cfg in a world-writable directory is not read (anyone could have
    put it there), and omni-host says so instead of silently auditing another target."""
    inventory = CORPUS / "ini" / "hosts.ini"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}

    def audit_in(directory: Path, mode: int) -> subprocess.CompletedProcess:
        directory.mkdir()
        directory.chmod(mode)
        (directory / "ansible.cfg").write_text(f"[defaults]\ninventory = {inventory}\n")
        return subprocess.run([sys.executable, "-m", "omni_host", "audit", "nosuchhost",
                               "--no-store"], capture_output=True, text=True, cwd=directory,
                              env=env, check=False, timeout=60)

    private = audit_in(tmp_path / "private", 0o755)
    assert f"matches no host or group in {inventory}" in private.stderr  # read, as Ansible does
    assert "ignored" not in private.stderr
    shared = tmp_path / "shared"
    ignored = audit_in(shared, 0o777)
    assert (shared.stat().st_mode & 0o002), "the directory must be world-writable"
    assert "ansible.cfg ignored, as Ansible ignores it: the directory is world-writable" \
        in ignored.stderr
    assert "needs an inventory (-i)" in ignored.stderr  # not read: no inventory at all


def test_extra_vars_refuse_yaml_aliases_at_once(tmp_path: Path) -> None:
    """The billion-laughs document as ``-e @file``: refused in its first alias, at once."""
    import time

    from omni_host.plan.inventory import parse_extra_vars

    bomb = tmp_path / "bomb.yml"
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    bomb.write_text("\n".join(lines) + "\nomni_numa_nps: *i\n")
    start = time.monotonic()
    with pytest.raises(InventoryError,
                       match=r"bomb.yml: line \d+: YAML aliases \(\*name\) are not accepted"):
        parse_extra_vars([f"@{bomb}"])
    assert time.monotonic() - start < 2
