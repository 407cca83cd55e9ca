"""A big fleet's audit over several processes.

One Python process is bound to one core: every host costs the controller about 9 ms of CPU
(the SSH handshake's cryptography, parsing, checks), so above a couple of dozen hosts in
flight the controller, not the network, sets the pace. Here the hosts are dealt round-robin
to worker processes, each running the same bounded thread pool (``audit_many``) over its share
with the same per-host deadlines; results, and the start of each host for the progress
display, come back over each worker's own pipe, in input order at the end. Nothing is shared
between workers: a worker killed in the middle of a write (the OOM killer's SIGKILL) cannot
hold a lock that another worker needs (one shared ``multiprocessing.Queue`` did: its write
lock died with the killed worker, and the other's results never came).

Ctrl-C or SIGTERM reach the parent as ``KeyboardInterrupt`` (the CLI's doing): it terminates
the workers and marks every unfinished host interrupted, as the thread pool does. The workers
ignore SIGINT (a terminal's Ctrl-C reaches the whole process group: the parent decides). A
worker that dies (its pipe ends) leaves its unfinished hosts reported as such, never missing;
one that stops answering (stopped, deadlocked) is killed after a host's deadline of silence
and its start-up slack, its hosts reported the same way.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from omni_host import interrupts
from omni_host.collect.pool import PoolResult
from omni_host.collect.run import host_deadline_s
from omni_host.collect.transport.base import SshOptions
from omni_host.evaluate.audit import audit_many, unreachable
from omni_host.evaluate.prior import Prior
from omni_host.plan.hosts import HostPlan
from omni_host.reports import HostReport

HOSTS_PER_PROCESS = 16  # hosts in flight per controller process (9 ms of CPU each, measured)
# A worker reports each host's end within the host's deadline (the pool cuts a late host off);
# silence beyond that, plus its start-up on a loaded machine, means the worker is stuck.
START_SLACK_S = 10.0


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def processes_for(hosts: int, forks: int, available: int) -> int:
    """One process per HOSTS_PER_PROCESS hosts in flight, at most one per CPU."""
    return max(1, min(available, math.ceil(min(hosts, forks) / HOSTS_PER_PROCESS)))


def _worker(k: int, share: list[tuple[int, HostPlan]], ssh: SshOptions, forks: int,
            probe_timeout_s: float | None, host_timeout_s: float | None, out: Any,
            priors: dict[str, Prior]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    index = {id(plan): i for i, plan in share}
    lock = threading.Lock()  # the pool's threads report over one pipe, one message at a time

    def send(message: tuple[str, int, HostReport | None]) -> None:
        with lock:
            out.send(message)

    audit_many([plan for _, plan in share], ssh, forks=forks, probe_timeout_s=probe_timeout_s,
               host_timeout_s=host_timeout_s, priors=priors,
               on_start=lambda plan: send(("start", index[id(plan)], None)),
               on_done=lambda plan, report: send(("done", index[id(plan)], report)))
    send(("end", k, None))  # after every result of this worker
    out.close()


class _Spread:
    """The parent's side of one ``audit_spread``: the workers, their pipes, what each said
    last and when, the results in the hosts' order."""

    def __init__(self, plans: list[HostPlan], shares: list[list[tuple[int, HostPlan]]],
                 limit_s: float, on_start: Callable[[HostPlan], None] | None,
                 on_done: Callable[[HostPlan, HostReport], None] | None) -> None:
        self.plans, self.shares, self.limit_s = plans, shares, limit_s
        self.on_start, self.on_done = on_start, on_done
        self.workers: list[Any] = []
        self.pipes: list[tuple[Any, Any]] = []
        self.reading: dict[Any, int] = {}
        self.heard: dict[int, float] = {}
        self.results: dict[int, HostReport] = {}

    def start(self, context: Any, ssh: SshOptions, per_worker: int,
              probe_timeout_s: float | None, host_timeout_s: float | None,
              priors: Mapping[str, Prior]) -> None:
        self.pipes = [context.Pipe(duplex=False) for _ in self.shares]  # (parent's, worker's)
        self.workers = [context.Process(
            target=_worker, name=f"omni-host audit {k + 1}/{len(self.shares)}",
            args=(k, share, ssh, per_worker, probe_timeout_s, host_timeout_s, self.pipes[k][1],
                  {p.name: priors[p.name] for _, p in share if p.name in priors}),
            daemon=True) for k, share in enumerate(self.shares)]
        for worker in self.workers:
            worker.start()
        for _, writer in self.pipes:
            writer.close()  # the worker holds the only writing end: its death ends the pipe
        self.reading = {reader: k for k, (reader, _) in enumerate(self.pipes)}
        self.heard = dict.fromkeys(range(len(self.workers)), time.monotonic())

    def record(self, i: int, report: HostReport) -> None:
        if i not in self.results:
            self.results[i] = report
            if self.on_done is not None:
                self.on_done(self.plans[i], report)

    def lost(self, k: int, why: str) -> None:
        """Worker ``k`` is gone: its hosts without a result get one that says why."""
        for i, plan in self.shares[k]:
            self.record(i, unreachable(plan, f"the controller process auditing this host {why}"))

    def kill_silent(self) -> None:
        """A stopped or deadlocked worker: never waited for past the limit."""
        now = time.monotonic()
        for reader, k in list(self.reading.items()):
            if now - self.heard[k] > self.limit_s:
                del self.reading[reader]
                self.workers[k].kill()
                self.lost(k, f"stopped answering (nothing for {self.limit_s:g}s): killed")

    def read(self, reader: Any) -> None:
        """One message of a worker: a host started, a host's report, or its end."""
        k = self.reading[reader]
        self.heard[k] = time.monotonic()
        try:
            kind, i, report = reader.recv()
        except (EOFError, OSError):  # the worker is gone without its "end"
            del self.reading[reader]
            self.workers[k].join(timeout=5)
            self.lost(k, f"died (exit {self.workers[k].exitcode})")
            return
        if kind == "start" and self.on_start is not None:
            self.on_start(self.plans[i])
        elif kind == "done":
            self.record(i, report)
        elif kind == "end":
            del self.reading[reader]
            self.lost(k, "ended without its result")  # none, unless a bug: never silent

    def next_wait_s(self) -> float:
        now = time.monotonic()
        return max(0.0, min((self.heard[k] + self.limit_s - now for k in self.reading.values()),
                            default=0.0))

    def close(self) -> None:
        for worker in self.workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
        for reader, _ in self.pipes:
            reader.close()

    def ordered(self) -> list[HostReport]:
        return [self.results[i] for i in range(len(self.plans))]


def audit_spread(plans: list[HostPlan], ssh: SshOptions, *, forks: int, processes: int,
                 probe_timeout_s: float | None = None, host_timeout_s: float | None = None,
                 on_start: Callable[[HostPlan], None] | None = None,
                 on_done: Callable[[HostPlan, HostReport], None] | None = None,
                 priors: Mapping[str, Prior] | None = None) -> PoolResult[HostReport]:
    """``audit_many`` over ``processes`` worker processes, ``forks`` hosts in flight in all;
    each worker gets the past of its own hosts only."""
    import multiprocessing  # only here: a one-process audit does not pay its import
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")  # no fork of a threaded process
    shares = [s for s in (list(enumerate(plans))[k::processes] for k in range(processes)) if s]
    limit = host_deadline_s(ssh, probe_timeout_s, host_timeout_s) + START_SLACK_S
    spread = _Spread(plans, shares, limit, on_start, on_done)
    spread.start(context, ssh, max(1, forks // len(shares)), probe_timeout_s, host_timeout_s,
                 priors or {})
    try:
        while spread.reading:
            interrupts.check()  # a signal whose exception a finalizer swallowed
            spread.kill_silent()
            for reader in wait(list(spread.reading), timeout=min(spread.next_wait_s(), 0.2)):
                spread.read(reader)
    except KeyboardInterrupt as exc:
        interrupts.handled()
        for worker in spread.workers:
            worker.terminate()
        for i, plan in enumerate(plans):
            spread.record(i, unreachable(plan, "interrupted before this host finished"))
        return PoolResult(spread.ordered(), True, interrupts.terminated(exc))
    finally:
        spread.close()
    return PoolResult(spread.ordered(), False)
