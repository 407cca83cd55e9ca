"""The local transport: the collector runs in a subprocess of this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from omni_host.collect.transport.base import RawRun, over_cap
from omni_host.errors import TransportError


class LocalTransport:
    """Runs commands on this machine. ``python3`` is this interpreter, so a virtual
    environment's psutil, pynvml and py-cpuinfo count as installed."""

    name = "local"

    def __init__(self) -> None:
        self.fed = threading.Event()  # set once the command has its stdin (or could not)

    def run(self, argv: tuple[str, ...], *, stdin: str, timeout_s: float, sudo: bool) -> RawRun:
        words = list(argv)
        if words and words[0] == "python3":  # the default: this very interpreter
            words[0] = sys.executable
        if sudo and os.geteuid() != 0:
            words = ["sudo", "-n", "--", *words]
        env = dict(os.environ, LC_ALL="C")
        start = time.monotonic()
        try:
            proc = subprocess.Popen(words, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env)
        except OSError as exc:
            self.fed.set()
            raise TransportError(f"local: cannot start {words[0]}: {exc}") from exc
        try:
            out, err = _bounded(proc, stdin.encode(), timeout_s, self.fed)
        except TransportError as exc:
            proc.kill()
            proc.wait()
            raise TransportError(f"local: {exc}") from None
        finally:
            self.fed.set()
        return RawRun(proc.wait(), out.decode("utf-8", "replace"),
                      err.decode("utf-8", "replace"), time.monotonic() - start)

    def close(self) -> None:
        return None


def _bounded(proc: subprocess.Popen[bytes], data: bytes, timeout_s: float,
             fed: threading.Event) -> tuple[bytes, bytes]:
    """Feed ``data`` (``fed`` set once it is written) and read both pipes until they close,
    within ``timeout_s`` and the caps (TransportError past either): a runaway answer costs
    neither memory nor a hang."""
    import selectors

    deadline = time.monotonic() + timeout_s
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it ended early: what it said is read below
    fed.set()
    chunks = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    with selectors.DefaultSelector() as sel:
        for pipe in chunks:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(f"collector did not finish in {timeout_s:g}s")
            for key, _ in sel.select(min(remaining, 1.0)):
                block = os.read(key.fd, 65536)
                if not block:
                    sel.unregister(key.fileobj)
                chunks[key.fileobj] += block  # type: ignore[index]
            too_much = over_cap(len(chunks[proc.stdout]), len(chunks[proc.stderr]))
            if too_much:
                raise TransportError(too_much)
    return bytes(chunks[proc.stdout]), bytes(chunks[proc.stderr])
