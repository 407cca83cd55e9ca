"""The remediate and bootstrap use cases: audit now -> plan -> preview (check mode) -> apply
-> re-audit -> store, as one call: ``run(RemediateRequest, confirm, listener)``. The CLI is
told of each step (``Listener``: the plan, each task, the preview) to print it, asks for the
confirmation when ``confirm`` is called, and reads the outcome (``Remediated``); every
decision (what is planned, which hosts may be applied to, what is kept, the verdicts the exit
code is read from) is made here.

What is kept of an applied play (ansible-runner's artifacts, attached to the stored report)
has the clear text of every vaulted value the play was given scrubbed first: the store never
holds a secret, whatever a task printed.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from omni_host.app.audit import AuditRun, Hosts, finish, keep
from omni_host.app.past import past_of, priors
from omni_host.collect.runner import TaskOutcome
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import PlayCanceled, UsageError
from omni_host.evaluate.audit import audit_many
from omni_host.evaluate.checks import catalog
from omni_host.model import SCRUBBED, Source, scrub
from omni_host.plan.hosts import HostPlan, Targets
from omni_host.plan.waivers import Waiver
from omni_host.remediate.flow import (
    Step,
    artifacts_dir,
    available_playbooks,
    execute,
    hosts_ok,
    outcomes,
)
from omni_host.remediate.plan import Plan, PlaybookRun, make_plan
from omni_host.report.history import load_history
from omni_host.reports import FixOutcome, FixVerdict, HostReport, Report


@dataclass(frozen=True)
class Settings:
    """What every playbook run of one remediation shares."""

    inventory: Path
    known_hosts: Path
    allow_reboot: bool
    vault_password_files: tuple[Path, ...]
    store_root: Path
    secrets: tuple[str, ...]  # the clear text of the vaulted values the plays are given
    waivers: tuple[Waiver, ...] = ()  # applied to every report of the run, as an audit's are
    # what the reports name for pasted hints: the operator's inventory and options (None: this
    # machine, whose inventory is the run's own and gone at its exit)
    reported_inventory: str | None = None
    hint_args: tuple[str, ...] = ()


def _audited(settings: Settings, plans: list[HostPlan], ssh: SshOptions, *, forks: int,
             source: Source, started: float) -> tuple[list[HostReport], AuditRun]:
    """The hosts audited, each judged against its past in the store (read once), and the
    report finished through the audit's own finish (waivers, Cold Case), so every report
    layer reaches the remediation's reports as well."""
    history = load_history(settings.store_root)
    pasts = {p.name: past_of(history, p.name) for p in plans}
    hosts = list(audit_many(plans, ssh, forks=forks,
                            priors=priors(pasts)).results)
    return hosts, finish(Hosts(hosts, source, started), inventory=settings.reported_inventory,
                         waivers=settings.waivers, history=history,
                         hint_args=settings.hint_args, pasts=pasts)


@dataclass(frozen=True)
class Planned:
    run: AuditRun  # the audit the plan is made from: the pre-remediation report once kept
    plan: Plan
    pre: Path | None  # the stored pre-remediation audit (an apply only)

    @property
    def findings(self) -> tuple[HostReport, ...]:
        return self.run.report.hosts

    @property
    def unreachable(self) -> bool:
        return any(not h.reachable for h in self.findings)


def known_check(check_id: str) -> None:
    """``--check ID`` names a check of the catalog (else the nearest one is suggested)."""
    import difflib

    if check_id not in catalog():
        close = difflib.get_close_matches(check_id, list(catalog()), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"--check {check_id}: no such check{hint}")


def plan_fixes(host_plans: list[HostPlan], ssh: SshOptions, *, forks: int, only: frozenset[str],
               allow_reboot: bool, settings: Settings, started: float) -> Planned:
    """Each host audited now, finished as an audit is (a waived finding is not fixed unless
    named with ``--check``). Nothing is stored: a preview, a declined apply or one with
    nothing to do changes nothing (the next report diff compares real audits)."""
    _, run = _audited(settings, host_plans, ssh, forks=forks, source=Source.PRE_REMEDIATION,
                      started=started)
    plan = make_plan([h for h in run.report.hosts if h.reachable], only=only,
                     allow_reboot=allow_reboot, available=available_playbooks())
    return Planned(run, plan, None)


def keep_pre(planned: Planned, *, settings: Settings) -> Planned:
    """The state a confirmed apply starts from, stored before anything changes."""
    return dataclasses.replace(planned, pre=keep(planned.run, settings.store_root))


def site_plan(host_plans: list[HostPlan]) -> Plan:
    """What bootstrap runs: site.yml on every host."""
    return Plan((PlaybookRun("site.yml", tuple(p.name for p in host_plans), ()),), ())


@dataclass
class Runs:
    """The playbook runs of one remediation, their artifacts in one private directory."""

    plan: Plan
    settings: Settings
    artifacts: Path = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.artifacts = artifacts_dir(self.settings.store_root)

    def _execute(self, check_mode: bool, hosts: set[str] | None,
                 on_task: Callable[[TaskOutcome], None]) -> list[Step]:
        s = self.settings
        return execute(self.plan, inventory=s.inventory, check_mode=check_mode,
                       allow_reboot=s.allow_reboot, known_hosts=s.known_hosts,
                       artifacts_root=self.artifacts, hosts=hosts, on_task=on_task,
                       vault_password_files=s.vault_password_files)

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host of the plan, in its order."""
        return tuple(dict.fromkeys(h for run in self.plan.runs for h in run.hosts))

    def preview(self, on_task: Callable[[TaskOutcome], None]) -> tuple[list[Step], set[str]]:
        """Check mode on every host; returns the steps and the hosts whose preview passed."""
        steps = self._execute(True, None, on_task)
        return steps, hosts_ok(steps, self.hosts)

    def apply(self, good: set[str], on_task: Callable[[TaskOutcome], None]) -> list[Step]:
        """For real, on the hosts whose preview passed only."""
        return self._execute(False, good, on_task)

    def discard(self) -> None:
        """A preview leaves nothing behind."""
        shutil.rmtree(self.artifacts, ignore_errors=True)

    def kept(self) -> Path:
        """The artifacts as they may be stored: every secret scrubbed from every file."""
        scrub_tree(self.artifacts, self.settings.secrets)
        return self.artifacts


def scrub_tree(root: Path, secrets: tuple[str, ...]) -> None:
    """Replace each secret (and its JSON-escaped form) in every file under ``root``."""
    import json

    forms = sorted({f for s in secrets if s for f in (s, json.dumps(s)[1:-1])}, key=len,
                   reverse=True)
    if not forms:
        return
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        new = data
        for form in forms:
            new = new.replace(form.encode(), SCRUBBED.encode())
        if new != data:
            path.write_bytes(new)


@dataclass(frozen=True)
class Fixed:
    report: Report
    records: tuple[FixOutcome, ...]
    path: Path

    @property
    def errored(self) -> bool:
        """A fix that could not be judged, or a host lost on the way."""
        return any(r.outcome is FixVerdict.ERROR for r in self.records) or \
            bool(self.report.unreachable)

    @property
    def all_fixed(self) -> bool:
        return all(r.outcome is FixVerdict.FIXED for r in self.records)


def reaudit(runs: Runs, applied: list[Step], planned: Planned, host_plans: list[HostPlan],
            ssh: SshOptions, *, forks: int, started: float) -> Fixed:
    """The touched hosts audited again; each (host, check) fixed, still failing or error;
    the report finished as an audit's and stored with the scrubbed artifacts, pointing to its
    pre-remediation audit."""
    touched = {h for step in applied for h in step.run.hosts}
    after, run = _audited(runs.settings, [p for p in host_plans if p.name in touched], ssh,
                          forks=forks, source=Source.REMEDIATION, started=started)
    # the task titles and messages of a play may name a vaulted value: scrubbed as everywhere
    records = scrub(outcomes(planned.plan, applied, after), runs.settings.secrets)
    run = dataclasses.replace(run, report=dataclasses.replace(
        run.report, remediation=records,
        pre_state=planned.pre.name if planned.pre is not None else None))
    path = keep(run, runs.settings.store_root, attach={"ansible": runs.kept()})
    return Fixed(run.report, records, path)


def baseline(runs: Runs, host_plans: list[HostPlan], ssh: SshOptions, *, forks: int,
             started: float) -> tuple[Report, Path]:
    """After bootstrap's site.yml: every host audited, finished as an audit, stored as its
    baseline."""
    _, run = _audited(runs.settings, host_plans, ssh, forks=forks, source=Source.BOOTSTRAP,
                      started=started)
    run = dataclasses.replace(run, report=dataclasses.replace(run.report, baseline=True))
    return run.report, keep(run, runs.settings.store_root, attach={"ansible": runs.kept()})


@dataclass(frozen=True)
class RemediateRequest:
    """``omni-host remediate`` or ``bootstrap``, parsed: the hosts, how to reach them, what to
    fix, whether to apply, and what every playbook run shares."""

    targets: Targets
    ssh: SshOptions
    inventory: Path  # the inventory the playbooks read (this machine's own, made for the run)
    forks: int
    only: frozenset[str] = frozenset()  # --check IDs
    apply: bool = False
    allow_reboot: bool = False
    bootstrap: bool = False  # site.yml on every host, then the baseline audit
    vault_password_files: tuple[Path, ...] = ()
    store_root: Path | None = None  # None: the default store
    waivers: Path | None = None  # None: as for audit
    reported_inventory: str | None = None
    hint_args: tuple[str, ...] = ()


class Listener(Protocol):
    """What the CLI is told as the run goes, to print it."""

    def planned(self, planned: Planned) -> None: ...
    def previewing(self, secrets: tuple[str, ...]) -> None: ...  # scrubbed from what it prints
    def task(self, task: TaskOutcome) -> None: ...
    def previewed(self, steps: list[Step]) -> None: ...
    def pre_kept(self, path: Path) -> None: ...
    def applying(self) -> None: ...


Ended = Literal["nothing", "previewed", "no host passed", "declined", "stopped", "fixed",
                "baselined"]


@dataclass(frozen=True)
class Remediated:
    """How a remediation or bootstrap ended: ``ended`` says where (nothing to do, previewed
    only, no host passed its preview, declined, stopped by a signal, fixed, baselined)."""

    ended: Ended
    secrets: tuple[str, ...]
    planned: Planned | None = None  # None for bootstrap
    hosts: tuple[str, ...] = ()  # every host of the plan
    good: frozenset[str] = frozenset()  # those whose preview passed
    stopped: PlayCanceled | None = None
    artifacts: Path | None = None  # a stopped play's run, kept
    fixed: Fixed | None = None
    baseline: tuple[Report, Path] | None = None


def run(req: RemediateRequest, confirm: Callable[[], bool], tell: Listener) -> Remediated:
    """Audit, plan, preview; on ``req.apply`` and ``confirm()``, keep the state before, apply
    to the hosts whose preview passed, re-audit them (bootstrap: audit every host as its
    baseline) and store the outcome. A play a signal cancels ends the run, said."""
    from omni_host.app.audit import read_waivers
    from omni_host.app.stored import store_at

    for check_id in req.only:
        known_check(check_id)
    started = time.time()
    host_plans = req.targets.plans()
    settings = Settings(req.inventory, req.ssh.known_hosts, req.allow_reboot,
                        req.vault_password_files, store_at(req.store_root),
                        tuple(s for p in host_plans for s in p.secrets), read_waivers(req.waivers),
                        req.reported_inventory, req.hint_args)
    planned = None
    if not req.bootstrap:
        planned = plan_fixes(host_plans, req.ssh, forks=req.forks, only=req.only,
                             allow_reboot=req.allow_reboot, settings=settings, started=started)
        tell.planned(planned)
        if planned.plan.empty:
            return Remediated("nothing", settings.secrets, planned)
    runs = Runs(planned.plan if planned is not None else site_plan(host_plans), settings)
    ended = functools.partial(Remediated, secrets=settings.secrets, hosts=runs.hosts)
    try:
        tell.previewing(settings.secrets)
        preview, good = runs.preview(tell.task)
        tell.previewed(preview)
        said: Ended | None = ("previewed" if not req.apply else "no host passed" if not good
                              else "declined" if not confirm() else None)
        if said is not None:
            runs.discard()
            return ended(said, planned=planned, good=frozenset(good))
        if planned is not None:
            planned = keep_pre(planned, settings=settings)
            assert planned.pre is not None
            tell.pre_kept(planned.pre)
        tell.applying()
        applied = runs.apply(good, tell.task)
    except PlayCanceled as exc:
        return ended("stopped", planned=planned, stopped=exc, artifacts=runs.artifacts)
    if planned is None:
        return ended("baselined", baseline=baseline(runs, host_plans, req.ssh, forks=req.forks,
                                                     started=started))
    return ended("fixed", planned=planned, good=frozenset(good),
                 fixed=reaudit(runs, applied, planned, host_plans, req.ssh, forks=req.forks,
                               started=started))
