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

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class PoolResult(Generic[R]):
    results: list[R]
    interrupted: bool
    signal: str | None = None  # "KeyboardInterrupt" (Ctrl-C) or "Terminated" (SIGTERM)


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

    ``late(item, elapsed)`` stands in for an item past ``deadline_s``; ``cancelled(item)`` for
    items not finished when Ctrl-C arrives (the pool then returns with ``interrupted``)."""
    if forks < 1:
        raise ValueError("forks must be >= 1")
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(items)):
        todo.put(i)
    results: dict[int, R] = {}
    started: dict[int, float] = {}
    abandoned: set[int] = set()
    lock = threading.Condition()
    stop = threading.Event()

    def finish(i: int, result: R) -> None:
        with lock:
            if i in results:  # already recorded as late
                return
            results[i] = result
            lock.notify_all()
        if on_done is not None:
            on_done(items[i], result)

    def worker() -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            with lock:
                started[i] = time.monotonic()
            if on_start is not None:
                on_start(items[i])
            result = fn(items[i])
            finish(i, result)
            with lock:
                if i in abandoned:  # a replacement worker took over this slot
                    return

    for _ in range(min(forks, len(items))):
        threading.Thread(target=worker, daemon=True).start()
    try:
        while True:
            with lock:
                if len(results) == len(items):
                    break
                lock.wait(timeout=0.05)
                overdue = [i for i, t in started.items() if i not in results and
                           deadline_s is not None and time.monotonic() - t > deadline_s]
            for i in overdue:
                with lock:
                    abandoned.add(i)
                finish(i, late(items[i], time.monotonic() - started[i]))
                threading.Thread(target=worker, daemon=True).start()
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM raised as its subclass by the CLI
        stop.set()
        for i in range(len(items)):
            with lock:
                pending = i not in results
            if pending:
                finish(i, cancelled(items[i]))
        return PoolResult([results[i] for i in range(len(items))], True,
                          type(exc).__name__)
    return PoolResult([results[i] for i in range(len(items))], False)
