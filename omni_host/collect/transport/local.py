"""The local transport: the collector runs in a subprocess of this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from omni_host.collect.transport.base import RawRun
from omni_host.errors import TransportError


class LocalTransport:
    """Runs commands on this machine. ``python3`` is this interpreter, so a virtual
    environment's psutil, pynvml and py-cpuinfo count as installed."""

    name = "local"

    def run(self, argv: tuple[str, ...], *, stdin: str, timeout_s: float, sudo: bool) -> RawRun:
        words = list(argv)
        if words and words[0] == "python3":  # the default: this very interpreter
            words[0] = sys.executable
        if sudo and os.geteuid() != 0:
            words = ["sudo", "-n", "--", *words]
        env = dict(os.environ, LC_ALL="C")
        start = time.monotonic()
        try:
            proc = subprocess.run(words, input=stdin.encode(), capture_output=True,
                                  timeout=timeout_s, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"local: collector did not finish in {timeout_s:g}s") from exc
        except OSError as exc:
            raise TransportError(f"local: cannot start {words[0]}: {exc}") from exc
        return RawRun(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                      proc.stderr.decode("utf-8", "replace"), time.monotonic() - start)

    def close(self) -> None:
        return None
