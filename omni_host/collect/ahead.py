"""One host's SSH session, opened before the rest of the audit is ready for it.

A one-host audit spends most of its time waiting: for the handshake, for the host's login
shell, for the collector. So its connection opens as soon as the inventory says where the host
is (``plan.connection``), and the host's interpreter is started (``python3 -I -S -``, reading its
program from stdin) at once: the policy is validated, and the checks and renderers are
imported, while the host logs in. The program (the probes of the validated plan) is sent when
``go`` hands the plan over; ``cancel`` (an invalid policy, an interruption) closes the
connection instead, and the waiting interpreter ends with nothing run.

Light at import (the standard library, ``plan.connection``): paramiko comes through
``transport.loading``, in the caller's thread, before the session's thread starts.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from omni_host.collect.transport.base import SshOptions, collector_argv
from omni_host.plan.connection import Connection

if TYPE_CHECKING:
    from omni_host.model import Bundle
    from omni_host.plan.hosts import HostPlan


class Ahead:
    """``bundle()`` gives what ``collect_host`` would have given for the plan handed to ``go``,
    or raises what it would have raised (a ``TransportError`` for a host that cannot be
    reached, whether or not ``go`` was called)."""

    def __init__(self, name: str, conn: Connection, options: SshOptions) -> None:
        if conn.ssh is None:
            raise ValueError(f"{name}: a local host has no session to open ahead")
        self.name = name
        self.conn = conn
        self.plan: HostPlan | None = None
        self._probe_timeout_s: float | None = None
        self._go = threading.Event()
        self._started = threading.Event()
        self._bundle: Bundle | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(options,),
                                        name=f"ahead {name}", daemon=True)
        self._thread.start()

    def _run(self, options: SshOptions) -> None:
        from omni_host.collect.transport.ssh import SshTransport

        assert self.conn.ssh is not None
        transport = SshTransport(self.name, self.conn.ssh, options)
        try:
            transport.start(collector_argv(self.conn.python), sudo=self.conn.become)
            self._started.set()
            self._go.wait()
            if self.plan is None:  # cancelled: nothing runs on the host
                return
            from omni_host.collect.run import collect_over

            self._bundle = collect_over(self.plan, transport, self._probe_timeout_s)
        except BaseException as exc:  # handed to the caller, who reports it as ever
            self._error = exc
        finally:
            self._started.set()
            transport.close()

    def wait_started(self, timeout_s: float = 1.0) -> None:
        """Wait until the host's interpreter has started, the connection failed, or
        ``timeout_s`` passed: the caller's CPU-bound work (validating the policy, imports)
        would otherwise slow the handshake down (55 instead of 30 ms on loopback), and a slow
        host must not hold back what planning has to report (an invalid policy)."""
        self._started.wait(timeout_s)

    def go(self, plan: HostPlan, probe_timeout_s: float | None) -> None:
        """Run the plan's collection over the session (opened, or still opening)."""
        if (plan.name, plan.ssh, plan.become, plan.python) != (
                self.name, self.conn.ssh, self.conn.become, self.conn.python):
            raise ValueError(f"{plan.name}: the plan does not match the session opened ahead")
        self.plan = plan
        self._probe_timeout_s = probe_timeout_s
        self._go.set()

    def cancel(self) -> None:
        """Close the session with nothing run (unless ``go`` came first)."""
        self._go.set()

    def bundle(self) -> Bundle:
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._bundle is None:
            raise RuntimeError(f"{self.name}: the session opened ahead was cancelled")
        return self._bundle
