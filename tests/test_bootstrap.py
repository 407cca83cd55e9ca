"""A fresh box, for real: a minimal Debian 12 built from Debian's packages by mmdebstrap
(minbase, plus openssh-server and python3: what an installer's "SSH server" task leaves), run
as a container with its own sshd and host key, brought to its expected state by
`omni-host bootstrap` and proven by the audit that ends it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PLAYBOOKS, Sshd, free_port, keygen, run_cli, wait_port
from helpers import assert_valid_report

from omni_host.collect.runner import run_playbook

pytestmark = pytest.mark.system  # a Debian system built, a container, ansible-runner runs

IMAGE = "omni-test/debian-fresh:bookworm"
PY = {"ansible_python_interpreter": "/usr/bin/python3"}
BUILD_DEPS = ["numactl", "pkg-config", "libhwloc-dev"]  # the policy's default (F-015)
START = ("rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null && mkdir -p /run/sshd /root/.ssh "
         "&& printf '%s\\n' \"$KEY\" > /root/.ssh/authorized_keys && exec /usr/sbin/sshd -D -e")


@pytest.fixture(scope="session")
def fresh_image(docker_image: str) -> str:
    """The image, built once per machine with mmdebstrap from deb.debian.org and imported."""
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True,
                      check=False).returncode == 0:
        return IMAGE
    if not shutil.which("mmdebstrap"):
        pytest.fail("mmdebstrap is not installed (run tests/setup.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        built = subprocess.run(
            ["mmdebstrap", "--variant=minbase", "--include=openssh-server,python3",
             "--mode=root", "bookworm", str(rootfs), "http://deb.debian.org/debian"],
            capture_output=True, text=True, check=False)
        if built.returncode:
            pytest.fail(f"mmdebstrap failed (needs deb.debian.org): {built.stderr[-1500:]}")
        subprocess.run(["docker", "import", str(rootfs), IMAGE], check=True, capture_output=True)
    return IMAGE


@pytest.fixture
def fresh_box(fresh_image: str, tmp_path: Path) -> Iterator[tuple[Sshd, str]]:
    """A container of the image with its own sshd on a loopback port; its host key, generated
    at start, is read through Docker (a trusted channel) into known_hosts."""
    work = tmp_path / "box"
    work.mkdir()
    client_key = work / "client_ed25519"
    client_pub = keygen(client_key)
    port = free_port()
    name = f"omni-test-fresh-{uuid.uuid4().hex[:6]}"
    subprocess.run(["docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:22",
                    "-e", f"KEY={client_pub}", fresh_image, "sh", "-c", START],
                   check=True, capture_output=True)
    try:
        wait_port(port, timeout_s=60, banner=b"SSH-")
        host_pub = ""
        for _ in range(50):
            got = subprocess.run(["docker", "exec", name, "cat",
                                  "/etc/ssh/ssh_host_ed25519_key.pub"],
                                 capture_output=True, text=True, check=False)
            if got.returncode == 0 and got.stdout.strip():
                host_pub = got.stdout.strip()
                break
        known = work / "known_hosts"
        known.write_text(f"[127.0.0.1]:{port} {' '.join(host_pub.split()[:2])}\n")
        yield Sshd(port, "root", client_key, known, host_pub, work, None), name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def cli(box: Sshd, *args: str, report_dir: Path):
    return run_cli(*args, "--known-hosts", str(box.known_hosts), "--ssh-config",
                   str(box.workdir / "none"), "--report-dir", str(report_dir))


def installed(name: str) -> set[str]:
    out = subprocess.run(["docker", "exec", name, "dpkg-query", "-W", "-f",
                          "${Package} ${db:Status-Status}\\n"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.endswith(" installed")}


def dpkg_status(name: str) -> str:
    out = subprocess.run(["docker", "exec", name, "cat", "/var/lib/dpkg/status"],
                         capture_output=True, check=True).stdout
    return hashlib.sha256(out).hexdigest()


def test_a_fresh_debian_box_is_bootstrapped_and_proven_by_the_audit(
        fresh_box: tuple[Sshd, str], tmp_path: Path, report_dir: Path) -> None:
    box, name = fresh_box
    inv = box.inventory(tmp_path / "inv", {"fresh": PY},
                        group_vars={"omni_build_packages": BUILD_DEPS})
    audit = cli(box, "audit", "-i", str(inv), "--format", "json", report_dir=report_dir)
    results = {r["id"]: r for r in json.loads(audit.stdout)["hosts"][0]["results"]}
    assert results["packages.build-deps"]["status"] == "fail"
    assert results["packages.build-deps"]["summary"] == f"missing: {', '.join(BUILD_DEPS)}"

    # The preview: Ansible's apt module cannot run in check mode without python3-apt, which a
    # fresh box lacks; the plan says what the apply will install, python3-apt included.
    before = dpkg_status(name)
    preview = cli(box, "bootstrap", "-i", str(inv), "fresh", report_dir=tmp_path / "preview")
    assert preview.code == 0, preview.stdout + preview.stderr
    assert ("CHANGED: Package plan without Python's apt bindings: apt install numactl "
            "pkg-config libhwloc-dev python3-apt") in preview.stdout, preview.stdout
    # and what apt itself will install with them: the preview said 4 and the apply put 91
    would = [line for line in preview.stdout.splitlines() if "apt would install" in line]
    assert len(would) == 1, preview.stdout
    would = would[0]
    named = set(would.split("recommends included: ", 1)[1].split())
    assert int(would.split("CHANGED: What apt would install: ")[1].split()[0]) == len(named)
    assert {"numactl", "pkg-config", "libhwloc-dev", "python3-apt"} <= named
    assert dpkg_status(name) == before
    packages_before = installed(name)

    applied = cli(box, "bootstrap", "-i", str(inv), "fresh", "--apply", "--yes",
                  report_dir=report_dir)
    assert "baseline audit stored in" in applied.stderr, applied.stdout + applied.stderr
    assert installed(name) - packages_before == named  # the preview told the whole truth
    stored = [p for p in report_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    (report,) = [d for d in (json.loads((p / "report.json").read_text()) for p in stored)
                 if d["source"] == "bootstrap"]
    assert_valid_report(report)
    assert report["baseline"] is True
    after = {r["id"]: r for r in report["hosts"][0]["results"]}
    assert after["packages.build-deps"]["status"] == "pass"
    assert after["packages.build-deps"]["summary"] == "3 build package(s) installed"
    assert applied.code == (0 if all(r["status"] != "fail" for r in after.values()) else 1)

    for check_mode in (False, True):  # a second apply, then check mode after apply
        again = run_playbook(playbook=PLAYBOOKS / "site.yml", inventory=inv, hosts=("fresh",),
                             check_mode=check_mode, artifacts_dir=tmp_path / f"a{check_mode}",
                             known_hosts=box.known_hosts, extravars={})
        assert again.status == "successful", again.failure("fresh")
        assert again.changed("fresh") == [], (check_mode, again.changed("fresh"))
