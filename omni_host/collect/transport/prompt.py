"""A TCP socket without the stalls of an SSH exchange's small packets. Standard library only,
so that a measurement (the benchmark's floor) can use it without the rest of omni-host."""

from __future__ import annotations

import socket

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


class Prompt:
    """A connected TCP socket as paramiko uses it: Nagle's algorithm off (TCP_NODELAY, as
    OpenSSH's client sets it), and on Linux every received segment acknowledged at once
    (TCP_QUICKACK, re-armed after each read: the kernel clears it). Otherwise a server holding
    a small reply until its previous one is acknowledged waits out the 40 ms delayed ACK,
    several times per audit: 100 ms of a 0.3 s loopback audit here."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock

    def recv(self, size: int) -> bytes:
        data = self._sock.recv(size)
        if _QUICKACK is not None:
            self._sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return data

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def prompt_socket(sock: object) -> object:
    """``sock`` made prompt when it is a TCP socket; anything else (a jump host's tunnel is a
    channel) as it is."""
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        return Prompt(sock)
    return sock
