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
from collections.abc import Callable
from typing import Any

from omni_host.collect.pool import PoolResult
from omni_host.collect.run import host_deadline_s
from omni_host.collect.transport.base import SshOptions
from omni_host.evaluate.audit import audit_many
from omni_host.model import HostReport
from omni_host.plan.hosts import HostPlan

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


def _failed(plan: HostPlan, error: str) -> HostReport:
    return HostReport(plan.name, plan.address, plan.transport, False, error, 0.0)


def _worker(k: int, share: list[tuple[int, HostPlan]], ssh: SshOptions, forks: int,
            probe_timeout_s: float | None, host_timeout_s: float | None, out: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    index = {id(plan): i for i, plan in share}
    lock = threading.Lock()  # the pool's threads report over one pipe, one message at a time

    def send(message: tuple[str, int, HostReport | None]) -> None:
        with lock:
            out.send(message)

    audit_many([plan for _, plan in share], ssh, forks=forks, probe_timeout_s=probe_timeout_s,
               host_timeout_s=host_timeout_s,
               on_start=lambda plan: send(("start", index[id(plan)], None)),
               on_done=lambda plan, report: send(("done", index[id(plan)], report)))
    send(("end", k, None))  # after every result of this worker
    out.close()


def audit_spread(plans: list[HostPlan], ssh: SshOptions, *, forks: int, processes: int,
                 probe_timeout_s: float | None = None, host_timeout_s: float | None = None,
                 on_start: Callable[[HostPlan], None] | None = None,
                 on_done: Callable[[HostPlan, HostReport], None] | None = None,
                 ) -> PoolResult[HostReport]:
    """``audit_many`` over ``processes`` worker processes, ``forks`` hosts in flight in all."""
    import multiprocessing  # only here: a one-process audit does not pay its import
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")  # no fork of a threaded process
    shares = [list(enumerate(plans))[k::processes] for k in range(processes)]
    shares = [s for s in shares if s]
    per_worker = max(1, forks // len(shares))
    pipes = [context.Pipe(duplex=False) for _ in shares]  # (the parent's end, the worker's)
    workers = [context.Process(target=_worker, name=f"omni-host audit {k + 1}/{len(shares)}",
                               args=(k, share, ssh, per_worker, probe_timeout_s,
                                     host_timeout_s, pipes[k][1]),
                               daemon=True) for k, share in enumerate(shares)]
    for worker in workers:
        worker.start()
    for _, writer in pipes:
        writer.close()  # the worker holds the only writing end: its death ends the pipe here
    reading = {reader: k for k, (reader, _) in enumerate(pipes)}
    results: dict[int, HostReport] = {}

    def record(i: int, report: HostReport) -> None:
        if i not in results:
            results[i] = report
            if on_done is not None:
                on_done(plans[i], report)

    def lost(k: int, why: str) -> None:
        for i, plan in shares[k]:
            record(i, _failed(plan, f"the controller process auditing this host {why}"))

    limit = host_deadline_s(ssh, probe_timeout_s, host_timeout_s) + START_SLACK_S
    heard = dict.fromkeys(range(len(workers)), time.monotonic())
    try:
        while reading:
            now = time.monotonic()
            for reader, k in list(reading.items()):
                if now - heard[k] > limit:  # a stopped or deadlocked worker: never wait forever
                    del reading[reader]
                    workers[k].kill()
                    lost(k, f"stopped answering (nothing for {limit:g}s): killed")
            waits = [heard[k] + limit - now for k in reading.values()]
            for reader in wait(list(reading), timeout=max(0.0, min(waits, default=0.0))):
                k = reading[reader]
                heard[k] = time.monotonic()
                try:
                    kind, i, report = reader.recv()
                except (EOFError, OSError):  # the worker is gone without its "end"
                    del reading[reader]
                    workers[k].join(timeout=5)
                    lost(k, f"died (exit {workers[k].exitcode})")
                    continue
                if kind == "start" and on_start is not None:
                    on_start(plans[i])
                elif kind == "done":
                    record(i, report)
                elif kind == "end":
                    del reading[reader]
                    lost(k, "ended without its result")  # none, unless a bug: never silent
    except KeyboardInterrupt as exc:
        for worker in workers:
            worker.terminate()
        for i, plan in enumerate(plans):
            record(i, _failed(plan, "interrupted before this host finished"))
        return PoolResult([results[i] for i in range(len(plans))], True, type(exc).__name__)
    finally:
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
        for reader, _ in pipes:
            reader.close()
    return PoolResult([results[i] for i in range(len(plans))], False)
