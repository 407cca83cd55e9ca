"""A bounded worker pool for hosts, with a per-item deadline and a clean Ctrl-C.

Workers are daemon threads, so a host stuck in a system call can neither hold up the others
past its deadline nor keep the process alive after an interrupt: the main thread stops
waiting for it, records a result that says why, and moves on. Each host's own timeouts
(connect, probe, channel) still bound the abandoned thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from omni_host import interrupts

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class PoolResult(Generic[R]):
    results: list[R]
    interrupted: bool
    terminated: bool = False  # the interruption was SIGTERM, not Ctrl-C


class _Pool(Generic[T, R]):
    """The state of one ``run_pool``: the items to do, their start times and results."""

    def __init__(self, items: list[T], fn: Callable[[T], R],
                 on_start: Callable[[T], None] | None,
                 on_done: Callable[[T, R], None] | None) -> None:
        self.items, self.fn, self.on_start, self.on_done = items, fn, on_start, on_done
        self.todo: queue.Queue[int] = queue.Queue()
        for i in range(len(items)):
            self.todo.put(i)
        self.results: dict[int, R] = {}
        self.started: dict[int, float] = {}
        self.abandoned: set[int] = set()
        self.lock = threading.Condition()
        self.stop = threading.Event()

    def finish(self, i: int, result: R) -> None:
        """The first result of an item is its result (a late stand-in, or the real one). It is
        told (``on_done``) before it counts as done: the pool returned while the last host's
        report was still being told, and a spread worker then said "end" before that report
        ("the controller process auditing this host ended without its result")."""
        with self.lock:
            if i in self.results:
                return
            try:
                if self.on_done is not None:
                    self.on_done(self.items[i], result)
            finally:
                self.results[i] = result
                self.lock.notify_all()

    def worker(self) -> None:
        """Take items until none is left; a worker whose item went late is replaced, and
        ends after that item."""
        while not self.stop.is_set():
            try:
                i = self.todo.get_nowait()
            except queue.Empty:
                return
            with self.lock:
                self.started[i] = time.monotonic()
            if self.on_start is not None:
                self.on_start(self.items[i])
            self.finish(i, self.fn(self.items[i]))
            with self.lock:
                if i in self.abandoned:
                    return

    def spawn(self) -> None:
        threading.Thread(target=self.worker, daemon=True).start()

    def overdue(self, deadline_s: float | None) -> list[int]:
        """Wait a moment for results; the started items past their deadline."""
        with self.lock:
            self.lock.wait(timeout=0.05)
            if deadline_s is None:
                return []
            now = time.monotonic()
            return [i for i, t in self.started.items()
                    if i not in self.results and now - t > deadline_s]

    def done(self) -> bool:
        with self.lock:
            return len(self.results) == len(self.items)

    def ordered(self) -> list[R]:
        return [self.results[i] for i in range(len(self.items))]


def run_pool(
    items: list[T],
    fn: Callable[[T], R],
    *,
    forks: int,
    deadline_s: float | None,
    late: Callable[[T, float], R],
    cancelled: Callable[[T], R],
    on_start: Callable[[T], None] | None = None,
    on_done: Callable[[T, R], None] | None = None,
) -> PoolResult[R]:
    """``fn`` over ``items`` with at most ``forks`` at once; results in input order.

    ``late(item, elapsed)`` stands in for an item past ``deadline_s`` (its slot goes to a new
    worker); ``cancelled(item)`` for items not finished when Ctrl-C arrives (the pool then
    returns with ``interrupted``)."""
    if forks < 1:
        raise ValueError("forks must be >= 1")
    pool = _Pool(items, fn, on_start, on_done)
    try:
        for _ in range(min(forks, len(items))):
            pool.spawn()
        while not pool.done():
            interrupts.check()  # a signal whose exception a finalizer swallowed
            for i in pool.overdue(deadline_s):
                with pool.lock:
                    pool.abandoned.add(i)
                pool.finish(i, late(items[i], time.monotonic() - pool.started[i]))
                pool.spawn()
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM raised as its subclass by the CLI
        interrupts.handled()
        pool.stop.set()
        for i in range(len(items)):
            pool.finish(i, cancelled(items[i]))  # a no-op where a result is in
        return PoolResult(pool.ordered(), True, interrupts.terminated(exc))
    return PoolResult(pool.ordered(), False)
