"""The remediation as an Ansible collection (omni.host): `ansible-galaxy collection build`
makes an installable artifact, and every playbook of the installed copy parses with the
collection found the way AWX or a user's ansible.cfg would find it (ANSIBLE_COLLECTIONS_PATH).
ansible-lint's production profile runs in .ci/run beside ruff."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO

COLLECTION = REPO / "ansible_collections" / "omni" / "host"
BIN = Path(sys.executable).parent


@pytest.mark.system  # ansible-galaxy and ansible-playbook processes
def test_the_collection_builds_installs_and_its_playbooks_parse(tmp_path: Path) -> None:
    built = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION),
                            "--output-path", str(tmp_path)], capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr
    (artifact,) = tmp_path.glob("omni-host-*.tar.gz")
    with tarfile.open(artifact) as tar:
        names = set(tar.getnames())
    assert {"galaxy.yml", "MANIFEST.json"} & names == {"MANIFEST.json"}  # built, not copied
    assert {"roles/omni/meta/argument_specs.yml", "roles/omni_swap/tasks/main.yml",
            "plugins/filter/omni.py", "playbooks/site.yml", "plugins/action/audit.py",
            "plugins/modules/audit.py", "roles/omni_swap/meta/argument_specs.yml"} <= names
    assert not any("__pycache__" in n for n in names)

    installed = tmp_path / "collections"
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", str(artifact),
                           "-p", str(installed), "--force"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(installed), "ANSIBLE_NOCOLOR": "1"}
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("box ansible_connection=local\n")
    playbooks = sorted((installed / "ansible_collections" / "omni" / "host" / "playbooks").glob("*.yml"))
    assert [p.name for p in playbooks] == [
        "audit.yml", "collect.yml", "glibc-tunables.yml", "isolation.yml", "kernel-knobs.yml",
        "nvidia-driver.yml", "packages.yml", "persistence.yml", "restart-policy.yml", "site.yml",
        "swap.yml"]
    for playbook in playbooks:
        parsed = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory),
                                 "--syntax-check", str(playbook)], capture_output=True, text=True,
                                env=env, check=False, cwd=tmp_path)
        assert parsed.returncode == 0, (playbook.name, parsed.stdout[-1500:] + parsed.stderr[-1500:])


@pytest.mark.system  # ansible-playbook
def test_a_role_used_by_name_validates_the_omni_variables(tmp_path: Path) -> None:
    """An operator's own play that names omni.host.omni_swap gets the one spec's validation:
    a swap size that is not an int is refused before any task runs."""
    play = tmp_path / "mine.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles:\n    - omni.host.omni_swap\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("box ansible_connection=local omni_swap_path=/swapfile "
                         "omni_swap_size_mib=lots\n")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "--check",
                          str(play)], capture_output=True, text=True, env=env, check=False,
                         cwd=tmp_path)
    assert run.returncode != 0
    assert "omni_swap_size_mib" in run.stdout and "Validating arguments" in run.stdout, run.stdout[-2000:]


def _filters():
    import importlib.util

    spec = importlib.util.spec_from_file_location("omni_filters",
                                                  COLLECTION / "plugins" / "filter" / "omni.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_services_are_counted_as_the_audit_counts_gpu_containers() -> None:
    doc = {"services": {
        "toolkit": {"environment": ["NVIDIA_VISIBLE_DEVICES=all"]},
        "void": {"environment": {"NVIDIA_VISIBLE_DEVICES": "void"}},  # the toolkit's "none"
        "reserved": {"deploy": {"resources": {"reservations": {"devices": [
            {"capabilities": ["gpu"], "count": "all"}]}}}},
        "runtime": {"runtime": "nvidia"},
        "web": {"image": "nginx"}}}
    assert _filters().gpu_services(doc) == ["toolkit", "reserved", "runtime"]


def test_the_override_keeps_the_keys_other_roles_wrote() -> None:
    import yaml

    f = _filters()
    main = {"version": "3.8", "services": {"llm": {"image": "x"}}}
    tunables = f.compose_override({}, main, f.service_patch(["llm"], {
        "environment": {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"}}))
    both = f.compose_override(yaml.safe_load(tunables), main,
                              f.service_patch(["llm"], {"restart": "unless-stopped"}))
    assert both.startswith(f.MARK)
    assert yaml.safe_load(both) == {"version": "3.8", "services": {"llm": {
        "environment": {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"},
        "restart": "unless-stopped"}}}


def test_isolation_names_each_thing_an_override_cannot_undo() -> None:
    f = _filters()
    doc = {"services": {"llm": {"networks": {"back": {}, "front": {"aliases": ["a"]}}},
                        "host": {"network_mode": "host"}, "gw": {"networks": ["front"]}},
           "networks": {"back": {"internal": True}, "front": {}}}
    assert f.isolation_problems(doc, ["llm", "host"], ["gw", "nope"]) == [
        "nope: not a service of the Compose file",
        "llm: on network(s) front, which an override cannot remove (take them out of the file)",
        "host: network_mode host (remove it)"]
    assert f.isolation_patch(doc, ["llm"], ["gw"], "omni_internal") == {
        "networks": {"omni_internal": {"internal": True}},
        "services": {"llm": {"networks": {"omni_internal": {}}},
                     "gw": {"networks": {"front": {}, "omni_internal": {}}}}}


def test_each_fix_role_declares_the_schema_variables_its_tasks_read() -> None:
    """Each fix role's meta/argument_specs.yml is the one schema cut to the variables the role's
    files name (regenerate with OMNI_UPDATE_GOLDEN=1 and read the diff)."""
    from omni_host.plan.policy import spec
    from omni_host.remediate.role_specs import fix_roles, read_variables, role_spec_text, spec_path

    roles = fix_roles()
    assert "omni_swap" in roles and "omni" not in roles
    # what the swap role's tasks name, read off their text (its assert lists both)
    assert read_variables("omni_swap") == ["omni_swap_size_mib", "omni_swap_path"]
    # a role that includes the omni role's compose tasks reads the Compose file through them
    assert "omni_compose_file" in read_variables("omni_restart")
    stale = []
    for role in roles:
        want = role_spec_text(role)
        if os.environ.get("OMNI_UPDATE_GOLDEN"):
            spec_path(role).write_text(want)
        if spec_path(role).read_text() != want:
            stale.append(role)
    assert not stale, f"{stale}: regenerate with OMNI_UPDATE_GOLDEN=1 and review the diff"
    # every value that only the remediation reads is read by some fix role
    read = {name for role in roles for name in read_variables(role)}
    remediation_only = {name for name, option in spec().items()
                        if "Remediation only." in option.get("description", [])}
    assert remediation_only and remediation_only <= read, remediation_only - read


@pytest.mark.system  # ansible-doc processes
def test_ansible_doc_shows_each_fix_roles_variables() -> None:
    """What an AWX or Galaxy user reads: ``ansible-doc -t role omni.host.omni_swap``."""
    import json

    from omni_host.plan.policy import spec

    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run([str(BIN / "ansible-doc"), "-t", "role", "-j", "omni.host.omni_swap",
                          "omni.host.omni_tunables"], capture_output=True, text=True, env=env,
                         check=False)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    swap = doc["omni.host.omni_swap"]["entry_points"]["main"]["options"]
    assert set(swap) == {"omni_swap_size_mib", "omni_swap_path"}
    assert swap["omni_swap_path"]["description"] == spec()["omni_swap_path"]["description"]
    tunables = doc["omni.host.omni_tunables"]["entry_points"]["main"]["options"]
    assert tunables["omni_glibc_tunables"]["default"].startswith("glibc.cpu.hwcaps=-AVX512F")


@pytest.mark.system  # pip builds the wheel (hatchling), ansible-doc reads it
def test_the_wheel_installs_the_collection_where_ansible_finds_it(tmp_path: Path) -> None:
    """``pip install omni-host`` is all an execution environment needs: the wheel puts omni.host
    in site-packages/ansible_collections, which Ansible scans on its own sys.path."""
    import zipfile

    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(tmp_path / "dist"), str(REPO)], capture_output=True, text=True,
                           check=False, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("omni_host-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ansible_collections/omni/host/plugins/action/audit.py",
            "ansible_collections/omni/host/playbooks/audit.yml",
            "ansible_collections/omni/host/roles/omni_swap/meta/argument_specs.yml",
            "omni_host/_data/checks/catalog.yaml"} <= names
    assert not any(n.startswith("omni_host/_data/ansible_collections") for n in names)  # one copy
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                           str(site), str(wheel)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(site), "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "none"),
           "ANSIBLE_NOCOLOR": "1"}
    doc = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "-j", "omni.host.audit"],
                         capture_output=True, text=True, env=env, check=False, cwd=tmp_path)
    assert doc.returncode == 0, doc.stderr
    assert str(site) in doc.stdout  # found in the installed wheel, not in this checkout
    # as docs/awx.md tells AWX users to read it: the text view validates the types (-j does
    # not): an unquoted ": " made a description a mapping, "Expected string in description"
    text = subprocess.run([str(BIN / "ansible-doc"), "omni.host.audit"], capture_output=True,
                          text=True, env=env, check=False, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "A waivers file (omni-host's format): accepted findings" in " ".join(text.stdout.split())
    where = subprocess.run([sys.executable, "-c", "from omni_host.resources import "
                            "collection_path, data_path; print(collection_path()); "
                            "print(data_path('checks'))"], capture_output=True, text=True,
                           env=env, check=False, cwd=tmp_path)
    assert where.stdout.split() == [str(site / "ansible_collections" / "omni" / "host"),
                                    str(site / "omni_host" / "_data" / "checks")], where.stderr


def test_the_execution_environment_installs_the_wheel_the_docs_build() -> None:
    """execution-environment.yml (ansible-builder v3) takes the wheel from dist/, as docs/awx.md
    builds it, and installs it in the image's final stage."""
    import yaml

    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert ee["additional_build_files"] == [{"src": "dist", "dest": "omni-host"}]
    steps = " ".join(ee["additional_build_steps"]["append_final"])
    assert "pip install" in steps and "_build/omni-host/" in steps and "omni_host-*.whl" in steps
    assert "pip wheel --no-deps -w dist ." in (REPO / "docs" / "awx.md").read_text()


def test_the_running_stacks_project_is_read_off_its_containers_labels() -> None:
    """The labels Compose puts on a container (docker inspect), as v1 and v2 write them."""
    compose_projects = _filters().compose_projects

    def container(project: str, files: str, workdir: str) -> dict:
        return {"Config": {"Labels": {"com.docker.compose.project": project,
                                      "com.docker.compose.project.config_files": files,
                                      "com.docker.compose.project.working_dir": workdir}}}

    running = [container("opsstack", "/srv/stack/docker-compose.yml", "/srv/stack"),
               container("other", "/srv/other/compose.yml", "/srv/other"),
               container("rel", "docker-compose.yml,extra.yml", "/srv/stack"),  # relative
               {"Config": {"Labels": {}}}, {}]
    assert compose_projects(running, "/srv/stack/docker-compose.yml") == ["opsstack", "rel"]
    assert compose_projects(running, "/srv/stack/./docker-compose.yml") == ["opsstack", "rel"]
    assert compose_projects(running, "/srv/none.yml") == []
    assert compose_projects("not a list", "/srv/stack/docker-compose.yml") == []
