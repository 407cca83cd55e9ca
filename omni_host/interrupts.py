"""Ctrl-C and SIGTERM that cannot be lost.

Python runs a signal's handler in the main thread between two bytecodes of whatever runs
there, and the exception it raises is lost where that is a finalizer (a ``__del__`` or weakref
callback the garbage collector runs: "Exception ignored in ..."): under load, 44 SIGINTs in the
first second of a five-host audit were lost so, and the audit ran to its host deadline. The
handlers here record the signal before they raise; the loops that wait (the host pool, the
worker processes) ``check`` between their waits, so that a swallowed one is raised again.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

_SEEN: list[type[KeyboardInterrupt]] = []  # the signals raised and not yet handled


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``systemctl stop`` and timeouts send), handled as Ctrl-C is: the hosts
    that finished are stored, the report is marked interrupted."""


def terminated(exc: BaseException) -> bool:
    """Whether an interruption was SIGTERM (else Ctrl-C)."""
    return isinstance(exc, Terminated)


def _handler(kind: type[KeyboardInterrupt]) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        _SEEN.append(kind)
        raise kind

    return handle


def install() -> None:
    """SIGINT raises KeyboardInterrupt and SIGTERM ``Terminated``, each recorded first. A signal
    the process was started ignoring (``nohup``, a background job) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler(KeyboardInterrupt))
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _handler(Terminated))


def check() -> None:
    """Raise again a signal's exception that was raised and swallowed."""
    if _SEEN:
        raise _SEEN[-1]()


def handled() -> None:
    """The caller has handled the interruption (it caught the exception): nothing is pending."""
    _SEEN.clear()
