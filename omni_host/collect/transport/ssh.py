"""The SSH transport (paramiko): one connection per host, known_hosts verified.

Host keys are checked against the user's known_hosts (and ``UserKnownHostsFile`` from the SSH
config). An unknown key is refused unless the caller asked for ``accept_new`` (OpenSSH's
``StrictHostKeyChecking=accept-new``), in which case it is appended to the known_hosts file. A
*changed* key is always refused. ``ProxyJump`` is honoured by tunnelling through each jump host
in turn, each verified the same way; else ``ProxyCommand`` (its %h, %p, %r expanded by the
config reader) carries the connection, as OpenSSH runs it.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from omni_host.collect.transport.base import RawRun, SshOptions, command_line, over_cap
from omni_host.collect.transport.prompt import prompt_socket
from omni_host.errors import TransportError
from omni_host.plan.connection import SshEndpoint

# paramiko logs a transport thread's failure with its traceback; the reason reaches the user
# as this host's one-line error instead (no traceback ever reaches the terminal).
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False
log = logging.getLogger("omni_host")


def load_known_hosts(client: paramiko.SSHClient, path: Path) -> None:
    """Load a known_hosts file as OpenSSH does: a malformed line is skipped (with a warning
    naming the file and line), never the end of every connection."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        log.warning("%s: cannot read (%s)", path, exc.strerror)
        return
    keys = client.get_host_keys()
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        except (paramiko.hostkeys.InvalidHostKey, paramiko.SSHException, ValueError) as exc:
            log.warning("%s:%d: malformed known_hosts line skipped (%s)", path, number,
                        type(exc).__name__)
            continue
        if entry is None:  # too few fields, or a key type paramiko does not know
            log.warning("%s:%d: known_hosts line not understood, skipped", path, number)
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)


@dataclass(frozen=True)
class SshTarget:
    """Where and as whom to connect, after the inventory and ~/.ssh/config are merged."""

    label: str
    hostname: str
    port: int
    user: str | None
    key_files: tuple[str, ...] = ()
    proxy_jump: str | None = None
    known_hosts_files: tuple[str, ...] = ()
    proxy_command: str | None = None


def resolve_target(
    label: str,
    *,
    host: str | None,
    port: int | None,
    user: str | None,
    key_file: str | None,
    ssh_config: Path | None,
) -> SshTarget:
    """Merge inventory values (which win, as in Ansible) with the SSH config entry."""
    alias = host or label
    conf: dict[str, Any] = {}
    if ssh_config is not None and ssh_config.is_file():
        try:
            conf = paramiko.SSHConfig.from_path(str(ssh_config)).lookup(alias)
        except Exception as exc:  # paramiko raises bare exceptions on bad config
            raise TransportError(f"{label}: cannot read SSH config {ssh_config}: {exc}") from exc
    keys = (key_file,) if key_file else tuple(conf.get("identityfile", ()))
    known = tuple(os.path.expanduser(p) for p in conf.get("userknownhostsfile", "").split() if p)
    jump = conf.get("proxyjump")
    command = conf.get("proxycommand")
    return SshTarget(
        label=label,
        hostname=conf.get("hostname", alias),
        port=int(port or conf.get("port", 22)),
        user=user or conf.get("user"),
        key_files=tuple(os.path.expanduser(k) for k in keys),
        proxy_jump=None if jump in (None, "none") else jump,
        known_hosts_files=known,
        proxy_command=None if command in (None, "none") else command,
    )


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Accept an unknown key and append it to known_hosts (never touches existing lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        entry = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path, "a+b") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell():  # a file without a final newline: start a line of our own
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
            fh.write(entry.encode("ascii"))
        client.get_host_keys().add(hostname, key.get_name(), key)


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise TransportError(
            f"host key for {hostname} is not in known_hosts ({key.get_name()}); "
            "verify it and add it, or pass --accept-new-host-key"
        )


def prompt_transport(sock: object, **kwargs: object) -> paramiko.Transport:
    """paramiko's transport over ``sock``, made prompt (``prompt.Prompt``) when it is a TCP
    socket."""
    return paramiko.Transport(prompt_socket(sock), **kwargs)  # type: ignore[arg-type]


def _parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    user, _, rest = spec.rpartition("@")
    host, _, port = rest.partition(":")
    return (user or None), host, (int(port) if port else None)


class SshTransport:
    """One paramiko connection to one host, opened lazily and closed by ``close``. The
    inventory's values win over the SSH config's, as in Ansible; the config is read when the
    connection opens, so an unreadable one costs that host, not the run."""

    name = "ssh"

    def __init__(self, label: str, endpoint: SshEndpoint, options: SshOptions) -> None:
        self.label = label
        self.endpoint = endpoint
        self.options = options
        self._clients: list[paramiko.SSHClient] = []
        self._target: SshTarget | None = None
        self._started: tuple[str, paramiko.Channel] | None = None  # (command line, channel)

    @property
    def target(self) -> SshTarget:
        if self._target is None:
            e = self.endpoint
            self._target = resolve_target(self.label, host=e.alias, port=e.port, user=e.user,
                                          key_file=e.key_file, ssh_config=self.options.ssh_config)
        return self._target

    def _client(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        for path in (self.options.known_hosts, *map(Path, self.target.known_hosts_files)):
            if path.is_file():
                load_known_hosts(client, path)
        policy = _AcceptNew(self.options.known_hosts) if self.options.accept_new else _RejectUnknown()
        client.set_missing_host_key_policy(policy)
        return client

    def _connect_one(self, target: SshTarget,
                     sock: paramiko.Channel | paramiko.ProxyCommand | None) -> paramiko.SSHClient:
        client = self._client()
        made: list[paramiko.Transport] = []

        def transport(sock: object, **kwargs: object) -> paramiko.Transport:
            made.append(prompt_transport(sock, **kwargs))
            made[-1].handshake_timeout = self.options.connect_timeout_s  # 15 s in paramiko
            return made[-1]

        try:
            client.connect(
                target.hostname,
                port=target.port,
                username=target.user,
                key_filename=list(target.key_files) or None,  # type: ignore[arg-type]  # a list works
                timeout=self.options.connect_timeout_s,
                banner_timeout=self.options.connect_timeout_s,
                auth_timeout=self.options.connect_timeout_s,
                sock=sock,
                allow_agent=True,
                look_for_keys=not target.key_files,
                transport_factory=transport,
            )
        except TransportError:
            client.close()
            raise
        except (OSError, paramiko.SSHException, EOFError) as exc:
            client.close()
            said = (made[-1].remote_version or "") if made else ""
            raise _refused(exc, target, said, self.options.connect_timeout_s) from exc
        self._clients.append(client)
        return client

    def _connect(self) -> paramiko.SSHClient:
        sock = None
        if self.target.proxy_jump:
            for spec in self.target.proxy_jump.split(","):
                user, host, port = _parse_jump(spec.strip())
                jump = resolve_target(host, host=None, port=port, user=user, key_file=None,
                                      ssh_config=self.options.ssh_config)
                jump_client = self._connect_one(jump, sock)
                try:
                    sock = jump_client.get_transport().open_channel(  # type: ignore[union-attr]
                        "direct-tcpip", (self.target.hostname, self.target.port), ("127.0.0.1", 0)
                    )
                except (paramiko.SSHException, OSError) as exc:
                    raise TransportError(f"jump host {host} cannot reach "
                                         f"{self.target.hostname}:{self.target.port}: {exc}") from exc
        elif self.target.proxy_command:
            try:
                sock = paramiko.ProxyCommand(self.target.proxy_command)
            except (paramiko.SSHException, OSError, ValueError) as exc:
                raise TransportError(f"ProxyCommand for {self.target.label} did not start: "
                                     f"{exc}") from exc
        return self._connect_one(self.target, sock)

    def connect(self) -> None:
        """Open the connection now (``run`` opens it when it has not been)."""
        if not self._clients:
            self._connect()

    def start(self, argv: tuple[str, ...], *, sudo: bool) -> None:
        """Start ``argv`` on the host now, its stdin to come with ``run``: the host's login
        shell and interpreter start while the caller prepares the program they will read."""
        line = command_line(argv, sudo=sudo)
        self.connect()
        try:
            chan = self._clients[-1].get_transport().open_session()  # type: ignore[union-attr]
            chan.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(f"connection lost: {exc or type(exc).__name__}") from exc
        self._started = (line, chan)

    def run(self, argv: tuple[str, ...], *, stdin: str, timeout_s: float, sudo: bool) -> RawRun:
        started, self._started = self._started, None
        if started is None or started[0] != command_line(argv, sudo=sudo):
            if started is not None:
                started[1].close()
            self.start(argv, sudo=sudo)
            started, self._started = self._started, None
        assert started is not None
        chan = started[1]
        start = time.monotonic()
        deadline = start + timeout_s
        try:
            try:
                chan.sendall(stdin.encode())
                chan.shutdown_write()
            except OSError:
                # The command ended before it read its stdin (sudo -n refusing, a missing
                # python): what it said and its exit status are still in the channel.
                if not chan.closed:
                    raise
            out, err = bytearray(), bytearray()
            while True:
                # One chunk of each per turn: data that keeps coming never holds off the
                # deadline or the caps.
                if chan.recv_ready():
                    out += chan.recv(65536)
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                too_much = over_cap(len(out), len(err))
                if too_much:
                    chan.close()
                    raise TransportError(too_much)
                pending = chan.recv_ready() or chan.recv_stderr_ready()
                # The end is the end of the stream (EOF or close) and the exit status, in
                # either order: sshd sends the status when it reaps the command, with data
                # still in the pipe behind it (OpenSSH's session.c says so).
                ended = chan.eof_received or chan.closed
                if ended and not pending and chan.exit_status_ready():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    chan.close()
                    raise TransportError(f"command did not finish in {timeout_s:g}s")
                if ended and not pending:  # the channel stays readable at EOF: no spinning
                    chan.status_event.wait(min(remaining, 1.0))
                elif not pending:
                    select.select([chan], [], [], min(remaining, 1.0))
            code = chan.recv_exit_status()
            if code == -1:  # the channel closed without an exit status: the session died
                raise TransportError("connection lost: the session ended before the collector "
                                     "finished")
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(f"connection lost: {exc or type(exc).__name__}") from exc
        return RawRun(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                      time.monotonic() - start)

    def close(self) -> None:
        for client in reversed(self._clients):
            client.close()
        self._clients.clear()


def _refused(exc: Exception, target: SshTarget, said: str, timeout_s: float) -> TransportError:
    """Why a connection to ``target`` failed, in one line (``said``: the banner the server
    sent before it failed, if any): a changed host key, a refused login, a timeout, no SSH
    server, a stalled key exchange."""
    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportError(
            f"host key for {where} has CHANGED (got {exc.key.get_name()}): refusing to "
            "connect; if the change is expected, remove the old key from known_hosts")
    if isinstance(exc, paramiko.AuthenticationException):
        return TransportError(f"authentication to {where} as {target.user} failed")
    if isinstance(exc, TimeoutError):
        return TransportError(f"connection to {where} timed out")
    if isinstance(exc, NoValidConnectionsError):
        reasons = sorted({getattr(e, 'strerror', None) or str(e) for e in exc.errors.values()})
        return TransportError(f"cannot connect to {where}: {'; '.join(reasons)}")
    if isinstance(exc, socket.gaierror):
        return TransportError(f"cannot resolve {target.hostname}: {exc.strerror}")
    if said:  # a server that greets and then stalls is not a port without SSH
        return TransportError(f"{where} sent its SSH banner ({said[:80]}) and then nothing for "
                              f"{timeout_s:g}s: the key exchange stalled (an overloaded or hung "
                              "sshd?)")
    text = str(exc)
    if "banner" in text or "No existing session" in text or isinstance(exc, EOFError):
        return TransportError(f"no SSH banner from {where} within {timeout_s:g}s (is an SSH "
                              "server listening there?)")
    return TransportError(f"cannot connect to {where}: {exc or type(exc).__name__}")
