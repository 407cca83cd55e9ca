"""Ansible-format inventories: groups, children, group_vars/host_vars, patterns, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, run_cli

from omni_host.errors import InventoryError
from omni_host.plan.hosts import plan_inventory
from omni_host.plan.inventory import load_inventory
from omni_host.plan.policy import policy_from_vars

FLEET = """
all:
  vars:
    omni_numa_nodes: 2
  children:
    inference:
      vars:
        omni_swap_size_mib: 1024
      hosts:
        gpu[01:03]:
          ansible_user: ops
      children:
        blackwell:
          hosts:
            gpu01:
              ansible_port: 2222
    storage:
      hosts:
        nas:
          ansible_host: 10.0.0.5
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    (tmp_path / "hosts.yml").write_text(FLEET)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "blackwell.yml").write_text("omni_swap_size_mib: 2048\n")
    (tmp_path / "group_vars" / "all.yml").write_text("omni_numa_nodes: 1\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu02.yml").write_text("omni_swap_size_mib: 4096\nansible_user: root\n")
    return tmp_path


def test_groups_ranges_and_precedence(fleet: Path) -> None:
    inv = load_inventory(fleet)
    assert list(inv.hosts) == ["gpu01", "gpu02", "gpu03", "nas"]
    assert inv.hosts["gpu01"].vars["omni_swap_size_mib"] == 2048   # child group file wins
    assert inv.hosts["gpu02"].vars["omni_swap_size_mib"] == 4096   # host_vars win
    assert inv.hosts["gpu03"].vars["omni_swap_size_mib"] == 1024   # group inline vars
    assert inv.hosts["gpu03"].vars["omni_numa_nodes"] == 1         # group_vars/all over inline all
    assert inv.hosts["gpu02"].vars["ansible_user"] == "root"
    assert inv.hosts["gpu01"].vars["ansible_port"] == 2222
    assert "omni_swap_size_mib" not in inv.hosts["nas"].vars


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("all", ["gpu01", "gpu02", "gpu03", "nas"]),
    ("*", ["gpu01", "gpu02", "gpu03", "nas"]),
    ("inference", ["gpu01", "gpu02", "gpu03"]),
    ("blackwell", ["gpu01"]),
    ("gpu02", ["gpu02"]),
    ("gpu0*", ["gpu01", "gpu02", "gpu03"]),
    ("inference:!blackwell", ["gpu02", "gpu03"]),
    ("all:&inference", ["gpu01", "gpu02", "gpu03"]),
    ("nas,gpu03", ["gpu03", "nas"]),
    ("~gpu0[13]", ["gpu01", "gpu03"]),
])
def test_patterns(fleet: Path, pattern: str, hosts: list[str]) -> None:
    assert [h.name for h in load_inventory(fleet).select(pattern)] == hosts


def test_unknown_pattern_names_it(fleet: Path) -> None:
    with pytest.raises(InventoryError, match="'gpu09' matches no host or group"):
        load_inventory(fleet).select("gpu09")


def test_connection_vars_become_ssh_targets(fleet: Path) -> None:
    plans = {p.name: p for p in plan_inventory(load_inventory(fleet), "all")}
    assert plans["gpu01"].address == "ops@gpu01:2222"
    assert plans["nas"].address == "10.0.0.5"  # the port is the SSH config's, read at connect time


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    a: {ansible_port: 22\n    b:\n")
    with pytest.raises(InventoryError, match=r"hosts\.yml:\d+: invalid YAML"):
        load_inventory(tmp_path)


def test_bad_group_shape(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  host:\n    a:\n")
    with pytest.raises(InventoryError, match="unknown key"):
        load_inventory(tmp_path)


@pytest.mark.parametrize(("vars_", "message"), [
    ({"omni_swap_size_mib": -1}, "omni_swap_size_mib: must be an integer >= 0"),
    ({"omni_numa_nodes": "one"}, "omni_numa_nodes: must be an integer >= 1"),
    ({"omni_gpu_driver_min": "latest"}, "omni_gpu_driver_min: must be a dotted version"),
    ({"omni_gpus": [{"model": "RTX 5090"}]}, r"omni_gpus\[0\].vram_gib"),
    ({"omni_swap_path": "swapfile"}, "omni_swap_path: must be an absolute path"),
    ({"omni_swapsize_mib": 1}, "unknown variable"),
    ({"omni_glibc_tunables": "glibc.cpu.hwcaps=-AVX512F,-AVX512VL"}, "AVX512BW,AVX512CD,AVX512DQ missing"),
])
def test_invalid_policy_values(vars_: dict, message: str) -> None:
    with pytest.raises(InventoryError, match=message):
        policy_from_vars(vars_, "host x")


def test_shipped_reference_inventory_is_valid() -> None:
    plans = plan_inventory(load_inventory(REPO / "inventory"), "omni")
    assert [p.name for p in plans] == ["omni"]
    policy = plans[0].policy
    assert policy.numa_nodes == 1 and policy.swap_size_mib == 204800
    assert [g.vram_gib for g in policy.gpus or ()] == [96, 32]
    assert policy.zen5_tunables_containers == ("memgraph",)


def test_cli_bad_inventory_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    a: {ansible_port: 22\n")
    result = run_cli("audit", "-i", str(tmp_path), "--no-store")
    assert result.code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "hosts.yml:" in lines[0] and "Traceback" not in result.stderr


def test_cli_unknown_pattern_exits_2(fleet: Path) -> None:
    result = run_cli("audit", "-i", str(fleet), "nosuchhost", "--no-store")
    assert result.code == 2
    assert "'nosuchhost' matches no host or group" in result.stderr


def test_cli_forks_zero_is_a_usage_error() -> None:
    result = run_cli("audit", "--forks", "0", "--no-store")
    assert result.code == 2
    assert "--forks" in result.stderr
