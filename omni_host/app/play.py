"""The audit as a task of an Ansible play: the collection's ``omni.host.audit`` action (AWX
job templates, ``ansible-playbook omni.host.audit``) runs this for each host of the play.

Ansible owns the connection (its credentials, become, forks, per-host results); omni-host
owns the rest, unchanged: the host's variables are read and validated as the inventory's are
(``rendered_vars``, the one schema), the same collector payload runs in one command, and its
output is judged by the same checks into the same host report. The bundle written under
``bundle_dir`` is the one ``omni-host audit --bundle`` reads.
"""

from __future__ import annotations

import datetime as dt
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_host.collect.bundle import bundle_from_output, write_bundle_dir
from omni_host.collect.run import payload, scrubbed, with_policy
from omni_host.collect.transport.base import RawRun, collector_argv, over_cap
from omni_host.errors import TransportError
from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.checks import catalog
from omni_host.model import HostReport, Status, scrub_host
from omni_host.plan.connection import interpreter
from omni_host.plan.hosts import HostPlan
from omni_host.plan.policy import expected_state, policy_from_vars
from omni_host.plan.waivers import apply_waivers, load_waivers
from omni_host.probes.catalog import probes_for

FAIL_ON = ("fail", "warn", "never")  # a host is failed when a check fails; also when one warns; never
Run = Callable[[str, str], RawRun]  # (command line, stdin) -> what came back


@dataclass(frozen=True)
class PlayAudit:
    """One host's audit as its task result says it."""

    report: HostReport
    failed: bool
    message: str
    bundle_dir: Path | None

    def result(self) -> dict[str, Any]:
        """The task result's own keys: the findings (what does not pass or skip), the count of
        each verdict, where the bundle went. Ansible adds ``failed`` and ``msg``."""
        doc = self.report.to_dict()
        live = [r for r in doc["results"] if not r.get("waiver")]
        counts: dict[str, int] = {}
        for r in doc["results"]:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return {
            "failing": [r["id"] for r in live if r["status"] == Status.FAIL.value],
            "warning": [r["id"] for r in live if r["status"] == Status.WARN.value],
            "findings": [{**{k: r.get(k) for k in ("id", "status", "severity", "summary",
                                                    "lessons")},
                          "fix": (r.get("remediation") or {}).get("playbook"),
                          "waived": bool(r.get("waiver"))}
                         for r in doc["results"] if r["status"] not in ("pass", "skip")],
            "counts": counts,
            "bundle": str(self.bundle_dir) if self.bundle_dir is not None else None,
        }


def play_plan(name: str, values: dict[str, Any], origins: dict[str, str],
              origin: str) -> HostPlan:
    """The host's plan from its rendered variables; the connection is Ansible's."""
    where = f"{origin}: host {name}"
    return HostPlan(name, policy_from_vars(values, where), False, None, interpreter(values),
                    expected_state(values, origins))


def play_audit(plan: HostPlan, run: Run, *, fail_on: str = "fail",
               bundle_dir: Path | None = None, waivers: Path | None = None,
               probe_timeout_s: float | None = None) -> PlayAudit:
    """Collect through ``run`` (Ansible's connection), judge, keep the bundle; raises
    TransportError when the collector's output is not a bundle (the host's own words)."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
    accepted = load_waivers(waivers, set(catalog())) if waivers is not None else ()
    probes = probes_for(plan.policy)
    started = time.time()
    raw = run(shlex.join(collector_argv(plan.python)), payload(probes, probe_timeout_s))
    too_much = over_cap(len(raw.stdout), len(raw.stderr))
    if too_much:
        raise TransportError(too_much)
    bundle = bundle_from_output(plan.name, "ansible", stdout=raw.stdout, stderr=raw.stderr,
                                exit_code=raw.exit_code, duration_s=raw.duration_s,
                                started=started, python=plan.python)
    kept = scrubbed(with_policy(bundle, plan), plan)
    written = write_bundle_dir(kept, bundle_dir) if bundle_dir is not None else None
    report = scrub_host(evaluate_bundle(kept, plan.policy, address="ansible",
                                        duration_s=time.time() - started,
                                        expected=plan.expected), plan.secrets)
    if accepted:
        (report,), _ = apply_waivers([report], accepted, dt.date.today())
    live = [r for r in report.results if r.waiver is None]
    failing = [r.id for r in live if r.status is Status.FAIL]
    warning = [r.id for r in live if r.status is Status.WARN]
    failed = bool(failing) if fail_on == "fail" else bool(failing or warning) \
        if fail_on == "warn" else False
    parts = [f"{len(failing)} failing: {', '.join(failing)}" if failing else "no check fails"]
    if warning:
        parts.append(f"{len(warning)} warning: {', '.join(warning)}")
    return PlayAudit(report, failed, "; ".join(parts), written)
