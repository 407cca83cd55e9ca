"""The transport interface and the one place where a command line is quoted."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# What one host may send back: the collector's document is a few MB (each probe's output is
# capped at 8 MiB on the host); past these, the host is not answering as the collector does,
# and reading on would cost the controller its memory (a python3 that prints 1 GB).
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_STDERR_BYTES = 1024 * 1024


def over_cap(out_bytes: int, err_bytes: int, out_cap: int = MAX_ANSWER_BYTES) -> str | None:
    """The one reason for an answer past its cap, or None while it is within both."""
    for what, size, cap in (("output", out_bytes, out_cap),
                            ("error output", err_bytes, MAX_STDERR_BYTES)):
        if size > cap:
            return (f"the host's {what} passed {cap // (1024 * 1024)} MiB: not the collector's "
                    "answer (is ansible_python_interpreter a python3?); stopped reading")
    return None


@dataclass(frozen=True)
class RawRun:
    """What came back from one command on a host."""

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float


class Transport(Protocol):
    """Runs one command on one host. A non-zero exit is data; a lost connection raises
    ``TransportError``."""

    name: str

    def run(self, argv: tuple[str, ...], *, stdin: str, timeout_s: float, sudo: bool) -> RawRun:
        ...

    def close(self) -> None:
        ...


def collector_argv(python: str) -> tuple[str, ...]:
    """How the host's interpreter runs the collector, its program on stdin: isolated (``-I``:
    no ``PYTHON*`` variable, no user site, and not the login directory first on the module
    path, where a stray ``json.py`` would stand in for the standard library's) and without
    ``site`` (``-S``: no ``.pth`` hook of the host's packages runs; on the lent H100 a numba
    hook cost 0.06 CPU-s per audit). The collector needs only the standard library; the
    helpers it starts (pynvml, psutil, py-cpuinfo) are interpreters of their own, with the
    host's ``site`` as ever."""
    return (python, "-I", "-S", "-")


def command_line(argv: tuple[str, ...], *, sudo: bool) -> str:
    """The shell line for ``argv``: every word quoted, ``sudo -n`` (never prompt) when asked,
    and ``LC_ALL=C`` so that tools print the format the parsers know."""
    words = ("sudo", "-n", "--", *argv) if sudo else argv
    return "LC_ALL=C " + shlex.join(words)


@dataclass(frozen=True)
class SshOptions:
    """How to connect; validated once, shared by every host of a run."""

    known_hosts: Path
    ssh_config: Path | None
    accept_new: bool = False
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.connect_timeout_s <= 0:
            raise ValueError("connect timeout must be positive")
