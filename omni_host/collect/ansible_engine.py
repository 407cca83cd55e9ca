"""Ansible as the collection engine for large fleets: ``playbooks/collect.yml`` runs the same
collector payload on every host with Ansible's forks; the raw outputs become bundles here
through the same ``bundle_from_output`` an SSH collection uses."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from omni_host.collect.bundle import Bundle, bundle_from_output
from omni_host.collect.run import payload, scrubbed, with_policy
from omni_host.collect.runner import run_playbook
from omni_host.errors import TransportError
from omni_host.plan.hosts import HostPlan
from omni_host.probes.catalog import probes_for
from omni_host.resources import collection_path


def collect_with_ansible(*, inventory: Path, plans: list[HostPlan], known_hosts: Path,
                         forks: int, probe_timeout_s: float | None) -> tuple[list[Bundle], list[str]]:
    """Bundles of the hosts that answered, and one line per host that did not. Each host gets
    the payload of its own policy (its model paths, binaries, packages)."""
    hosts = [p.name for p in plans]
    by_name = {p.name: p for p in plans}
    with tempfile.TemporaryDirectory(prefix="omni-ansible-collect-") as tmp:
        work = Path(tmp)
        (work / "payloads").mkdir()
        for plan in plans:
            (work / "payloads" / f"{plan.name}.py").write_text(
                payload(probes_for(plan.policy), probe_timeout_s))
        (work / "out").mkdir()
        started = time.time()
        outcome = run_playbook(
            playbook=collection_path("playbooks") / "collect.yml", inventory=inventory,
            hosts=tuple(hosts), check_mode=False, artifacts_dir=work / "runner",
            known_hosts=known_hosts, forks=forks,
            extravars={"omni_payload_dir": str(work / "payloads"), "omni_out": str(work / "out")})
        elapsed = time.time() - started
        bundles, errors = [], []
        for host in hosts:
            raw = work / "out" / f"{host}.out"
            failure = outcome.failure(host)
            if failure is not None or not raw.is_file():
                why = f"{failure.status}: {failure.message}" if failure else "unreachable: no output"
                errors.append(f"{host}: {why}")
                continue
            try:
                bundle = bundle_from_output(host, "ansible", stdout=raw.read_text(), stderr="",
                                            exit_code=0, duration_s=elapsed, started=started)
                bundles.append(scrubbed(with_policy(bundle, by_name[host]), by_name[host]))
            except TransportError as exc:
                errors.append(f"{host}: {exc}")
        return bundles, errors
