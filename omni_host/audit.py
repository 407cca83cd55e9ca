"""The audit flow: targets -> collect (one round trip) -> facts -> checks -> host reports.

Collecting and evaluating are separate: a live audit evaluates the very bundle it collected,
through the same ``evaluate_bundle`` an offline ``--bundle`` audit uses, so both give the same
verdicts. One host's failure is that host's result, never the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omni_host.bundle import Bundle
from omni_host.checks import run_checks
from omni_host.collect import DEFAULT_PYTHON, collect, deadline_s
from omni_host.errors import InventoryError, TransportError
from omni_host.facts import facts_from_bundle
from omni_host.inventory import Inventory, InventoryHost
from omni_host.policy import Policy, policy_from_vars, reference_vars
from omni_host.pool import PoolResult, run_pool
from omni_host.probes import DYNAMIC, PROBES, probes_for
from omni_host.report import HostReport, Report
from omni_host.sentinel import fact_summary, strategic
from omni_host.transport.local import LocalTransport
from omni_host.transport.ssh import SshOptions, SshTarget, SshTransport, resolve_target


@dataclass(frozen=True)
class HostPlan:
    """One host to audit: how to reach it and what it should look like."""

    name: str
    policy: Policy
    become: bool
    ssh: SshTarget | None  # None = this machine, through the local transport
    python: str = DEFAULT_PYTHON

    @property
    def address(self) -> str:
        if self.ssh is None:
            return "local"
        user = f"{self.ssh.user}@" if self.ssh.user else ""
        return f"{user}{self.ssh.hostname}:{self.ssh.port}"


def _bool(value: object) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "yes", "true", "on")


def plan_host(host: InventoryHost, *, source: str, ssh_config: Path | None) -> HostPlan:
    """Validate a host's policy and connection variables (before any host is touched)."""
    hv = host.vars
    policy = policy_from_vars(hv, f"{source}: host {host.name}")
    become = _bool(hv.get("ansible_become", False))
    python = str(hv.get("ansible_python_interpreter") or DEFAULT_PYTHON)
    if python.startswith("auto"):  # Ansible's discovery modes: python3 on the PATH
        python = DEFAULT_PYTHON
    if hv.get("ansible_connection") == "local":
        return HostPlan(host.name, policy, become, None, python)
    port = hv.get("ansible_port")
    if port is not None and (not str(port).isdigit() or not 0 < int(port) < 65536):
        raise InventoryError(f"{source}: host {host.name}: ansible_port {port!r} is not a port")
    target = resolve_target(
        host.name,
        host=hv.get("ansible_host"),
        port=int(port) if port is not None else None,
        user=hv.get("ansible_user"),
        key_file=hv.get("ansible_ssh_private_key_file"),
        ssh_config=ssh_config,
    )
    return HostPlan(host.name, policy, become, target, python)


def plan_inventory(inv: Inventory, pattern: str, *, ssh_config: Path | None) -> list[HostPlan]:
    return [plan_host(h, source=inv.source, ssh_config=ssh_config) for h in inv.select(pattern)]


def local_plan() -> HostPlan:
    """This machine against the built-in reference policy."""
    return HostPlan("localhost", policy_from_vars(reference_vars(), "built-in policy"), False, None)


def evaluate_bundle(bundle: Bundle, policy: Policy, *, address: str | None = None,
                    duration_s: float = 0.0) -> HostReport:
    facts = facts_from_bundle(bundle)
    results = tuple(run_checks(facts, policy))
    probes = {pid: {"outcome": p.outcome.value, "reason": p.reason}
              for pid, p in facts.probes.items()}
    summary = fact_summary(facts)
    return HostReport(bundle.host, address, bundle.transport, True, None, duration_s, results,
                      bundle, probes, summary, tuple(strategic(summary)))


def collect_host(plan: HostPlan, ssh: SshOptions, probe_timeout_s: float | None) -> Bundle:
    transport = LocalTransport() if plan.ssh is None else SshTransport(plan.ssh, ssh)
    try:
        return collect(plan.name, transport, become=plan.become, probe_timeout_s=probe_timeout_s,
                       python=plan.python, probes=probes_for(plan.policy))
    finally:
        transport.close()


def audit_host(plan: HostPlan, ssh: SshOptions, probe_timeout_s: float | None = None) -> HostReport:
    start = time.monotonic()
    try:
        bundle = collect_host(plan, ssh, probe_timeout_s)
    except TransportError as exc:
        error = str(exc)
    except Exception as exc:  # a bug must cost this host its audit, not the fleet its run
        error = f"internal error while collecting: {type(exc).__name__}: {exc}"
    else:
        return evaluate_bundle(bundle, plan.policy, address=plan.address,
                               duration_s=time.monotonic() - start)
    return HostReport(plan.name, plan.address, "local" if plan.ssh is None else "ssh", False,
                      error, time.monotonic() - start)


def host_deadline_s(ssh: SshOptions, probe_timeout_s: float | None) -> float:
    """How long one host may take in all: connecting (through one jump), then collecting."""
    return 2 * ssh.connect_timeout_s + deadline_s((*PROBES, *DYNAMIC), probe_timeout_s) + 5.0


def _failed(plan: HostPlan, error: str, elapsed: float) -> HostReport:
    return HostReport(plan.name, plan.address, "local" if plan.ssh is None else "ssh", False,
                      error, elapsed)


def audit_many(plans: list[HostPlan], ssh: SshOptions, *, forks: int,
               probe_timeout_s: float | None = None, host_timeout_s: float | None = None,
               on_start: Callable[[HostPlan], None] | None = None,
               on_done: Callable[[HostPlan, HostReport], None] | None = None,
               ) -> PoolResult[HostReport]:
    """Audit hosts in a bounded pool; a host past its deadline is reported unreachable with
    the reason, and Ctrl-C returns what finished (the rest marked interrupted)."""
    deadline = host_timeout_s or host_deadline_s(ssh, probe_timeout_s)
    return run_pool(
        plans, lambda p: audit_host(p, ssh, probe_timeout_s), forks=forks, deadline_s=deadline,
        late=lambda p, t: _failed(p, f"no answer within the host deadline of {deadline:g}s", t),
        cancelled=lambda p: _failed(p, "interrupted before this host finished", 0.0),
        on_start=on_start, on_done=on_done)


def make_report(hosts: list[HostReport], *, started_at: float, source: str,
                inventory: str | None, interrupted: bool = False) -> Report:
    return Report(started_at, time.time(), source, inventory, tuple(hosts), interrupted)
