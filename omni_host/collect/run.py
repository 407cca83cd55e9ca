"""Collection: ship the collector and the probe plan to a host in one round trip.

The same payload (``collector.py`` + one ``main(plan)`` line) runs over every engine: a local
subprocess, an SSH channel, or Ansible's ``script`` module. Only the transport differs.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from omni_host.collect.transport.base import SshOptions, Transport, collector_argv
from omni_host.collect.transport.loading import import_ssh
from omni_host.plan.connection import DEFAULT_PYTHON
from omni_host.plan.hosts import HostPlan
from omni_host.probes.catalog import DYNAMIC, PROBES, Probe, probes_for

if TYPE_CHECKING:
    from omni_host.model import Bundle

# Room for the fallbacks that run after the primaries, and for the connection itself.
_SLACK_S = 15.0


@lru_cache(maxsize=1)
def collector_source() -> str:
    """The collector's source, read beside this package (importlib.resources' readers cost
    9 ms of an audit's start for a package that is never zipped)."""
    return (Path(__file__).parent.parent / "remote" / "collector.py").read_text(encoding="utf-8")


def payload(probes: tuple[Probe, ...], probe_timeout_s: float | None = None) -> str:
    plan = json.dumps([p.plan_entry(probe_timeout_s) for p in probes])
    return f"{collector_source()}\nmain({plan!r})\nleave()\n"


def deadline_s(probes: tuple[Probe, ...], probe_timeout_s: float | None = None) -> float:
    """The host's whole deadline: the slowest chain of a primary and its fallbacks (a
    fallback runs after the probe it stands in for; the fallbacks of one probe side by side),
    then the probes that run last (a benchmark's budget), plus slack."""
    def limit(p: Probe) -> float:
        return probe_timeout_s or p.timeout_s

    def chain(p: Probe) -> float:
        return limit(p) + max((chain(f) for f in probes if f.fallback_for == p.id), default=0.0)

    longest = max(chain(p) for p in probes if not p.fallback_for and not p.last)
    after = sum(p.timeout_s for p in probes if p.last)  # its own budget, never the override
    return longest + after + _SLACK_S


def collect(
    host: str,
    transport: Transport,
    *,
    become: bool = False,
    probes: tuple[Probe, ...] = PROBES,
    probe_timeout_s: float | None = None,
    python: str = DEFAULT_PYTHON,
) -> Bundle:
    """Run every probe on ``host`` through ``transport``; raises TransportError when the host
    cannot be reached or the collector itself cannot run. ``python`` is the host's
    interpreter (Ansible's ``ansible_python_interpreter``; default: python3 on its PATH)."""
    started = time.time()
    raw = transport.run(collector_argv(python), stdin=payload(probes, probe_timeout_s),
                        timeout_s=deadline_s(probes, probe_timeout_s), sudo=become)
    # the report's types load once the host runs its probes, never before a bench starts them
    from omni_host.collect.bundle import bundle_from_output

    return bundle_from_output(host, transport.name, stdout=raw.stdout, stderr=raw.stderr,
                              exit_code=raw.exit_code, duration_s=raw.duration_s,
                              started=started, python=python)


def import_transports(plans: list[HostPlan], ssh_config: Path | None = None) -> None:
    """Import the SSH transport once, in the calling thread, before a pool starts: never
    first inside concurrent worker threads (see ``transport.loading``)."""
    if any(p.ssh is not None for p in plans):
        import_ssh(ssh_config)


def collect_host(plan: HostPlan, ssh: SshOptions, probe_timeout_s: float | None, *,
                 extra: tuple[Probe, ...] = ()) -> Bundle:
    """One host's bundle through its transport (local, or SSH imported only when needed);
    ``extra``: probes beyond the policy's (the bench)."""
    return _collect_closing(plan, open_transport(plan, ssh), probe_timeout_s, extra)


def _collect_closing(plan: HostPlan, transport: Transport, probe_timeout_s: float | None,
                     extra: tuple[Probe, ...]) -> Bundle:
    """``collect_over``, then the transport closed whatever happened."""
    try:
        return collect_over(plan, transport, probe_timeout_s, extra)
    finally:
        transport.close()


class Background:
    """A collection under way in a thread of its own, so that the caller's own work (imports,
    reading the store) overlaps the host's. ``bundle()`` gives what the collection gave, or
    raises what it raised. ``ready``: the caller goes on once it is set (or the work ended):
    a local collector gets its program before the caller's imports hold the interpreter."""

    def __init__(self, work: Callable[[], Bundle], ready: threading.Event | None = None, *,
                 plan: HostPlan | None = None) -> None:
        self.plan = plan  # the host's plan, where the work is its collection
        self._bundle: Bundle | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._bundle = work()
            except BaseException as exc:  # handed to the caller, who reports it as ever
                self._error = exc

        self._thread = threading.Thread(target=run, name="collection", daemon=True)
        self._thread.start()
        while ready is not None and not ready.wait(0.1) and self._thread.is_alive():
            pass  # short waits: Ctrl-C reaches the main thread

    def cancel(self) -> None:
        """Nothing to stop: a local collector watches this process and ends with it, and an
        SSH one with its session; a caller that goes on lets the collection finish unread."""

    def bundle(self) -> Bundle:
        while self._thread.is_alive():  # short joins: Ctrl-C reaches the main thread
            self._thread.join(0.1)
        if self._error is not None:
            raise self._error
        assert self._bundle is not None
        return self._bundle


def collect_ahead(plan: HostPlan, ssh: SshOptions, probe_timeout_s: float | None, *,
                  extra: tuple[Probe, ...] = ()) -> Background:
    """``collect_host`` under way in the background, returned once a local host's collector
    has its program: the caller's imports, which hold the interpreter for a while, then
    overlap the host's probes instead of delaying their start (issue 44)."""
    from omni_host.collect.transport.local import LocalTransport

    transport = open_transport(plan, ssh)
    return Background(lambda: _collect_closing(plan, transport, probe_timeout_s, extra),
                      transport.fed if isinstance(transport, LocalTransport) else None, plan=plan)


def open_transport(plan: HostPlan, ssh: SshOptions) -> Transport:
    """The host's transport: local, or SSH (imported only when needed); the caller closes it."""
    if plan.ssh is None:
        from omni_host.collect.transport.local import LocalTransport

        return LocalTransport()
    from omni_host.collect.transport.ssh import SshTransport

    return SshTransport(plan.name, plan.ssh, ssh)


def collect_over(plan: HostPlan, transport: Transport, probe_timeout_s: float | None,
                 extra: tuple[Probe, ...] = ()) -> Bundle:
    """The plan's probes run through an open transport; the bundle records the policy."""
    bundle = collect(plan.name, transport, become=plan.become, probe_timeout_s=probe_timeout_s,
                     python=plan.python, probes=probes_for(plan.policy) + extra)
    return with_policy(bundle, plan)


def with_policy(bundle: Bundle, plan: HostPlan) -> Bundle:
    """The bundle with the expected state it was collected under (the manifest keeps it)."""
    record = plan.expected.to_dict() if plan.expected is not None else None
    return dataclasses.replace(bundle, policy=record)


def scrubbed(bundle: Bundle, plan: HostPlan) -> Bundle:
    """The bundle as it may be stored: no clear text of a vaulted value in any output."""
    return bundle.scrubbed(plan.secrets)


def host_deadline_s(ssh: SshOptions, probe_timeout_s: float | None,
                    host_timeout_s: float | None = None) -> float:
    """How long one host may take in all: the operator's ``--host-timeout`` when given, else
    connecting (through one jump), then collecting."""
    if host_timeout_s:
        return host_timeout_s
    return 2 * ssh.connect_timeout_s + deadline_s((*PROBES, *DYNAMIC), probe_timeout_s) + 5.0
