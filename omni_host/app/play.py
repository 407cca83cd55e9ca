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
import math
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_host.collect.bundle import write_bundle_dir
from omni_host.collect.run import collect, scrubbed, with_policy
from omni_host.collect.transport.base import MAX_STDERR_BYTES, RawRun, over_cap
from omni_host.errors import TransportError
from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.checks import catalog
from omni_host.model import Status
from omni_host.plan.connection import interpreter
from omni_host.plan.hosts import HostPlan
from omni_host.plan.policy import expected_state, policy_from_vars
from omni_host.plan.waivers import apply_waivers, load_waivers
from omni_host.probes.catalog import probes_for
from omni_host.reports import HostReport, scrub_host

FAIL_ON = ("fail", "warn", "never")  # a host is failed when a check fails; also when one warns; never
Run = Callable[[str, str], RawRun]  # (command line, stdin) -> what came back


@dataclass(frozen=True)
class PlayAudit:
    """One host's audit as its task result says it."""

    report: HostReport
    fail_on: str  # one of FAIL_ON
    bundle_dir: Path | None

    def _ids(self, status: Status) -> list[str]:
        return [r.id for r in self.report.results if r.waiver is None and r.status is status]

    @property
    def failing(self) -> list[str]:
        """The checks that fail (a waived one does not count)."""
        return self._ids(Status.FAIL)

    @property
    def warning(self) -> list[str]:
        return self._ids(Status.WARN)

    @property
    def failed(self) -> bool:
        """Whether the task fails the host, as ``fail_on`` says."""
        if self.fail_on == "fail":
            return bool(self.failing)
        return self.fail_on == "warn" and bool(self.failing or self.warning)

    @property
    def message(self) -> str:
        failing, warning = self.failing, self.warning
        parts = [f"{len(failing)} failing: {', '.join(failing)}" if failing else "no check fails"]
        if warning:
            parts.append(f"{len(warning)} warning: {', '.join(warning)}")
        return "; ".join(parts)

    def result(self) -> dict[str, Any]:
        """The task result's own keys: the findings (what does not pass or skip), the count of
        each verdict, where the bundle went. Ansible adds ``failed`` and ``msg``."""
        results = self.report.results
        counts: dict[str, int] = {}
        for r in results:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        return {
            "failing": self.failing,
            "warning": self.warning,
            "findings": [{"id": r.id, "status": r.status.value, "severity": r.severity.value,
                          "summary": r.summary, "lessons": list(r.lessons),
                          "fix": r.remediation.playbook if r.remediation else None,
                          "waived": r.waiver is not None}
                         for r in results if r.status not in (Status.PASS, Status.SKIP)],
            "counts": counts,
            "bundle": str(self.bundle_dir) if self.bundle_dir is not None else None,
        }


RC_MARK = "omni-host-exit-status "  # the collector's exit status, on the host's stderr
# The play's cap on a host's answer: a quarter of the audit's. Ansible holds an answer about
# 3.5 times over (the connection's bytes, their text, the task's result): at the audit's 64 MiB
# a flooding host cost the play 314 MiB against the audit's 119. Still 240 times the lent
# H100's answer (69 KB, tests/fixtures/captures/collector-h100).
PLAY_ANSWER_BYTES = 16 * 1024 * 1024


def bounded_line(argv: tuple[str, ...], timeout_s: float) -> str:
    """The host-side shell line that bounds the collector itself, in time and in bytes:
    Ansible's connection has neither bound and buffers all it reads (a host printing 300 MB
    held the play for 241 s and about 1 GB; an interpreter that hangs held it for good).

    ``timeout`` (coreutils or busybox) ends the command's whole process group past the
    collector's deadline (TERM, then KILL 5 s later); ``head -c`` stops each stream one byte
    past its cap (the writer then dies of SIGPIPE), so that ``over_cap`` still sees a flood.
    The exit status is written last on the untouched stderr (fd 4), after the bounded one."""
    limit = max(1, math.ceil(timeout_s))
    return (f"{{ {{ timeout -k 5 {limit} {shlex.join(argv)} 2>&1 1>&3 3>&- 4>&-; "
            f"echo \"{RC_MARK}$?\" >&4; }} | head -c {MAX_STDERR_BYTES + 1} >&2; }} "
            f"3>&1 4>&2 | head -c {PLAY_ANSWER_BYTES + 1}")


def unbounded(raw: RawRun) -> RawRun:
    """What ``bounded_line`` ran, as if run plainly: its exit status taken out of stderr
    (-1 when the line never wrote it: the shell itself was killed)."""
    lines = raw.stderr.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.startswith(RC_MARK)
             and line[len(RC_MARK):].strip().isdigit()]
    if not marks:
        return RawRun(-1, raw.stdout, raw.stderr, raw.duration_s)
    last = marks[-1]
    code = int(lines[last][len(RC_MARK):].strip())
    return RawRun(code, raw.stdout, "".join(lines[:last] + lines[last + 1:]), raw.duration_s)


class _AnsibleConnection:
    """Ansible's connection as omni-host's transport: the collector's command line (its
    ``become`` is the play's), bounded on the host (``bounded_line``), and the answer within
    the transports' caps."""

    name = "ansible"

    def __init__(self, run: Run) -> None:
        self._run = run

    def run(self, argv: tuple[str, ...], *, stdin: str, timeout_s: float, sudo: bool) -> RawRun:
        raw = unbounded(self._run(bounded_line(argv, timeout_s), stdin))
        too_much = over_cap(len(raw.stdout), len(raw.stderr), PLAY_ANSWER_BYTES)
        if too_much:
            raise TransportError(too_much)
        if raw.exit_code in (124, 137):  # timeout's own: the collector ran past its deadline
            raise TransportError(f"the collector did not finish within {timeout_s:g}s "
                                 "(ended on the host by timeout)")
        return raw

    def close(self) -> None:
        """Ansible owns the connection."""


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
    started = time.time()
    bundle = collect(plan.name, _AnsibleConnection(run), probes=probes_for(plan.policy),
                     probe_timeout_s=probe_timeout_s, python=plan.python)
    kept = scrubbed(with_policy(bundle, plan), plan)
    written = write_bundle_dir(kept, bundle_dir) if bundle_dir is not None else None
    report = scrub_host(evaluate_bundle(kept, plan.policy, address="ansible",
                                        duration_s=time.time() - started,
                                        expected=plan.expected), plan.secrets)
    if accepted:
        (report,), _ = apply_waivers([report], accepted, dt.date.today())
    return PlayAudit(report, fail_on, written)
