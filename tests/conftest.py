"""Shared test fixtures: real captures, a real OpenSSH server on loopback, and a CLI runner.

Nothing here is mocked. The sshd is Debian's openssh-server (``tests/setup.sh`` installs it);
when it is missing the SSH tests fail with that message rather than skipping.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Bytecode caches for this run even where the environment sets PYTHONDONTWRITEBYTECODE (this
# VM does): pytest then keeps its assertion rewrites, and every CLI or collector process the
# tests start imports omni_host from .pyc instead of compiling it again (about 1 s a run).
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = REPO / "ansible_collections" / "omni" / "host" / "playbooks"  # the thin playbooks
FIXTURES = REPO / "tests" / "fixtures"
PUBLIC_CAPTURES = FIXTURES / "public"  # captures from public sources: see fixtures/PROVENANCE.md
GPU_BUNDLES = FIXTURES / "bundles"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def public_capture(rel: str) -> str:
    """A real capture from a public source, kept in the repo (``tests/fixtures/public/``)."""
    return (PUBLIC_CAPTURES / rel).read_text(encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 10.0, banner: bytes = b"") -> None:
    """Until something accepts on the port, and (``banner``) says it: Docker's port proxy
    accepts before the container's server listens, then closes (paramiko read "Error reading
    SSH protocol banner" in a fresh clone's first run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                if not banner:
                    return
                sock.settimeout(2)
                if sock.recv(64).startswith(banner):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}" +
                       (f" that says {banner!r}" if banner else ""))


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


@dataclass
class Sshd:
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    host_pub: str
    workdir: Path
    proc: subprocess.Popen | None  # None: a server this fixture did not start (a container)

    def inventory(self, path: Path, hosts: dict[str, dict], *, group_vars: dict | None = None,
                  fmt: str = "yaml") -> Path:
        """Write an inventory directory whose hosts default to this sshd, in Ansible's YAML
        (hosts.yml, group_vars/lab.yml) or INI format (hosts.ini with [lab:vars])."""
        import yaml

        path.mkdir(parents=True, exist_ok=True)
        full = {}
        for name, hv in hosts.items():
            full[name] = {"ansible_host": "127.0.0.1", "ansible_port": self.port,
                          "ansible_user": self.user,
                          "ansible_ssh_private_key_file": str(self.client_key), **hv}
        # No build packages expected unless a test says so: verdicts must not depend on what
        # this machine happens to have installed.
        if fmt == "ini":
            def value(v: object) -> str:
                return v if isinstance(v, str) else json.dumps(v)

            lines = ["[all:vars]", "omni_build_packages=[]", "", "[lab]"]
            lines += [" ".join([name, *(f"{k}={value(v)}" for k, v in hv.items())])
                      for name, hv in full.items()]
            if group_vars is not None:
                lines += ["", "[lab:vars]", *(f"{k}={value(v)}" for k, v in group_vars.items())]
            (path / "hosts.ini").write_text("\n".join(lines) + "\n")
            return path
        (path / "hosts.yml").write_text(yaml.safe_dump({"all": {
            "vars": {"omni_build_packages": []}, "children": {"lab": {"hosts": full}}}}))
        if group_vars is not None:
            (path / "group_vars").mkdir(exist_ok=True)
            (path / "group_vars" / "lab.yml").write_text(yaml.safe_dump(group_vars))
        return path


def start_sshd(workdir: Path, *, extra: str = "") -> Sshd:
    if not Path(SSHD).exists():
        pytest.fail("OpenSSH server is not installed (run tests/setup.sh: apt-get install openssh-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = workdir / "host_ed25519"
    client_key = workdir / "client_ed25519"
    host_pub = keygen(host_key)
    client_pub = keygen(client_key)
    # sshd reads authorized_keys as the logging-in user: keep it outside pytest's 0700 tmp dirs.
    import tempfile

    keys_dir = Path(tempfile.mkdtemp(prefix="omni-host-sshd-keys-"))
    keys_dir.chmod(0o755)
    authorized = keys_dir / "authorized_keys"
    authorized.write_text(client_pub + "\n")
    authorized.chmod(0o644)
    port = free_port()
    user = getpass.getuser()
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized}\nPidFile {workdir / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nAllowTcpForwarding yes\n"
        "LogLevel VERBOSE\nMaxSessions 50\nMaxStartups 100\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n" + extra
    )
    log = open(workdir / "sshd.log", "w")  # noqa: SIM115 (kept open for the server's life)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    try:
        wait_port(port)
    except RuntimeError:
        proc.kill()
        pytest.fail(f"sshd did not start: {(workdir / 'sshd.log').read_text()[-2000:]}")
    known = workdir / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {' '.join(host_pub.split()[:2])}\n")
    return Sshd(port, user, client_key, known, host_pub, workdir, proc)


# The session's servers that are children of this process: a test that kills one (the bench
# helper's kill_orphans run in-process reaps every child of its process: CI's sshd, then 22
# tests after it, failed far from the cause) is named at its own teardown.
SESSION_CHILDREN: dict[str, subprocess.Popen] = {}


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    SESSION_CHILDREN["the session's sshd"] = server.proc
    yield server
    SESSION_CHILDREN.pop("the session's sshd", None)
    server.proc.terminate()
    server.proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def session_children_survive():
    """After each test, every server the session started still runs."""
    yield
    dead = [f"{name} (pid {proc.pid}) is gone"
            for name, proc in SESSION_CHILDREN.items() if proc.poll() is not None]
    if dead:
        SESSION_CHILDREN.clear()  # named once, by the test that ended them
        pytest.fail("this test ended " + "; ".join(dead)
                    + ": run what reaps its children (the bench helper) in a process of its own"
                    " (run_helper)")


def run_helper(function: str, *args: object, timeout: float = 300) -> dict:
    """``omni_host.remote.bench.<function>(*args)`` in a Python of its own, as the bench runs it
    on a host, its JSON answer returned: the helper kills every child of its process when a
    run ends, which in this process would be the session's servers."""
    code = ("import json, sys\nfrom omni_host.remote import bench\n"
            "print(json.dumps(getattr(bench, sys.argv[1])(*json.loads(sys.argv[2]))))")
    done = subprocess.run([sys.executable, "-c", code, function, json.dumps(list(args))],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"bench.{function} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


# Tests that talk to real servers or tools of this machine (sshd, dockerd, Chromium,
# ansible-runner, systemd-analyze, root): the "system" tier. The rest is the fast tier,
# `pytest -m "not system"`, the inner loop. A test using these fixtures is system by itself.
SYSTEM_FIXTURES = frozenset({"sshd", "docker_image", "llama"})  # llama: a real llama-bench


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SYSTEM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache directory for the session: the inventory cache is keyed by content, so
    sharing it between tests is safe, and spares each CLI run ansible-core's import."""
    return tmp_path_factory.mktemp("cache")


def isolate_home(monkeypatch: pytest.MonkeyPatch, home: Path, cache: Path) -> Path:
    """An empty HOME and XDG data, config and state directories under ``home``, and none of
    the variables that would point omni-host or Ansible elsewhere: no report store, waivers or
    config of the developer's account leaks in."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for var, sub in (("XDG_DATA_HOME", ".local/share"), ("XDG_CONFIG_HOME", ".config"),
                     ("XDG_STATE_HOME", ".local/state")):
        monkeypatch.setenv(var, str(home / sub))
    for var in ("OMNI_HOST_WAIVERS", "OMNI_HOST_REPORT_DIR", "ANSIBLE_INVENTORY", "ANSIBLE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                  shared_cache: Path) -> Path:
    """Every test (and every CLI it runs) is isolated (``isolate_home``). Fixtures shared by
    a module or the session are set up before this one: they isolate themselves. (Tests of
    the cache itself point XDG_CACHE_HOME at their own directory.)"""
    return isolate_home(monkeypatch, tmp_path_factory.mktemp("home"), shared_cache)


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    seconds: float


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> CliResult:
    """Run the CLI's ``main`` in this process, as the console script does, with stdout and
    stderr captured and ``env`` set for the call: the fast tier's way (no interpreter start,
    no re-import). What only a process can show (signals, the entry point, imports, Ansible's
    config read at import) goes through ``run_cli_process``. A call that outlives ``timeout``
    ends the test run with every thread's stack (faulthandler), not a silent hang."""
    import contextlib
    import faulthandler
    import io
    import logging
    import signal

    from omni_host.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    saved_env = dict(os.environ)
    saved_term = signal.getsignal(signal.SIGTERM)
    logger = logging.getLogger("omni_host")
    saved_log = (list(logger.handlers), logger.propagate)
    os.environ.update(env or {})
    faulthandler.dump_traceback_later(timeout, exit=True)
    start = time.monotonic()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: usage errors and --help
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
                if isinstance(exc.code, str):
                    stderr.write(exc.code + "\n")
    finally:
        faulthandler.cancel_dump_traceback_later()
        os.environ.clear()
        os.environ.update(saved_env)
        signal.signal(signal.SIGTERM, saved_term)
        logger.handlers[:], logger.propagate = saved_log
    return CliResult(code, stdout.getvalue(), stderr.getvalue(), time.monotonic() - start)


def run_cli_process(*args: str, env: dict | None = None, timeout: float = 120) -> CliResult:
    """Run the real console entry point in a subprocess, as a user would. A CLI that outlives
    ``timeout`` is stopped with SIGABRT, so Python's faulthandler prints where every thread
    was: the test fails with that, not with a bare timeout."""
    import signal

    full_env = dict(os.environ, PYTHONFAULTHANDLER="1")
    full_env.update(env or {})
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "omni_host.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        pytest.fail(f"omni-host {' '.join(args)} did not finish in {timeout:g}s; its threads:\n"
                    f"{err[-6000:]}")
    return CliResult(proc.returncode, out, err, time.monotonic() - start)


HOST_BUSY = "another bench is running on this host"
LOCK_WAIT_S = 900.0  # another clone's whole bench series, then this host is called busy


def until_unlocked(bench: Callable[[], CliResult], bound_s: float = LOCK_WAIT_S) -> CliResult:
    """A bench command, run again while another bench (another clone's suite, an operator's
    run) holds this host's bench lock: the lock's refusal is the host being busy, not this
    test's verdict. Past ``bound_s`` the test fails saying the host was busy, and by whom."""
    deadline = time.monotonic() + bound_s
    while True:
        result = bench()
        if HOST_BUSY not in result.stderr:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"the host was busy for {bound_s:.0f} s: {result.stderr.strip()[-300:]}")
        time.sleep(3)


@pytest.fixture
def report_dir(tmp_path: Path) -> Path:
    return tmp_path / "reports"


@pytest.fixture(scope="session")
def two_audits(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """A store with two live audits of this machine: the second one adds a failure (swap
    policy: 4 GiB more than the machine has). Shared by the session: a test that changes it
    works on a copy."""
    from helpers import active_swap_mib

    root = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        isolate_home(mp, root / "home", shared_cache)
        inv = root / "inv"
        inv.mkdir()
        (inv / "group_vars").mkdir()
        (inv / "hosts.yml").write_text("all:\n  hosts:\n    thisbox:\n      ansible_connection: local\n")
        policy = "omni_numa_nps: 1\nomni_build_packages: []\nomni_swap_size_mib: "
        (inv / "group_vars" / "all.yml").write_text(policy + "0\n")
        reports = root / "reports"
        assert run_cli("audit", "-i", str(inv), "--report-dir", str(reports)).code == 0
        # more than this machine has, whatever it has (a user's machine has swap)
        (inv / "group_vars" / "all.yml").write_text(policy + f"{active_swap_mib() + 4096}\n")
        assert run_cli("audit", "-i", str(inv), "--report-dir", str(reports)).code == 1
    return reports


def _docker_ok() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


TEST_IMAGE = "omni-test/busybox:1"
SERVER_IMAGE = "omni-test/llama-server:1"  # tests/test_serve.py's served-in-a-container case


SESSIONS_LOCK = Path(f"/tmp/omni-host-test-sessions-{os.getuid()}.lock")  # one per user
_ALONE: list[bool] = []  # whether this session started with no other one of this suite alive


def sweep_test_containers() -> list[str]:
    """Remove the containers of an earlier run of this suite that was killed before its
    teardown (they run our own image; `restart: unless-stopped`, set by the fix tests, brings
    them back with the daemon). Left there, a local audit sees a GPU container on an open
    network and every test expecting this machine's verdicts fails. Only when no other session
    of the suite is alive (its containers are its own). Returns their names."""
    if not (_ALONE and _ALONE[0]) or not shutil.which("docker") or not _docker_ok():
        return []
    out = [line for image in (TEST_IMAGE, SERVER_IMAGE) for line in subprocess.run(
        ["docker", "ps", "-a", "--filter", f"ancestor={image}", "--format", "{{.ID}} {{.Names}}"],
        capture_output=True, text=True, check=False).stdout.split("\n")]
    rows = [line.split(" ", 1) for line in out if " " in line]
    if rows:
        subprocess.run(["docker", "rm", "-f", *(r[0] for r in rows)], capture_output=True,
                       check=False)
    return [r[1] for r in rows]


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_test_containers() -> Iterator[None]:
    """Every session holds a shared lock on SESSIONS_LOCK; one that gets it exclusively first
    is alone, and sweeps what a killed one left."""
    import fcntl

    fd = os.open(SESSIONS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _ALONE.append(True)
    except BlockingIOError:
        _ALONE.append(False)
    swept = sweep_test_containers()
    if swept:
        print(f"\nremoved {len(swept)} container(s) an interrupted test run left: "
              + ", ".join(swept))
    fcntl.flock(fd, fcntl.LOCK_SH)
    yield
    os.close(fd)


@pytest.fixture(scope="session")
def docker_image() -> str:
    """A running Docker engine (Debian docker.io, started here if needed) and a tiny image made
    with `docker import` from the static busybox: there is no registry to pull from."""
    if not shutil.which("docker") or not shutil.which("dockerd"):
        pytest.fail("docker.io is not installed (run tests/setup.sh)")
    if not _docker_ok():
        log = open("/tmp/omni-host-test-dockerd.log", "a")  # noqa: SIM115 (daemon's log)
        subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 30
        while not _docker_ok():
            if time.monotonic() > deadline:
                pytest.fail("dockerd did not start: see /tmp/omni-host-test-dockerd.log")
            time.sleep(0.5)
        sweep_test_containers()  # the daemon restarts what an interrupted run left
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        pytest.fail("busybox-static is not installed (run tests/setup.sh)")
    image = TEST_IMAGE
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                      check=False).returncode != 0:
        import tarfile
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            rootfs = Path(tmp) / "rootfs.tar"
            with tarfile.open(rootfs, "w") as tar:
                tar.add(busybox, arcname="bin/busybox")
                for applet in ("sh", "sleep"):
                    link = tarfile.TarInfo(f"bin/{applet}")
                    link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                    tar.addfile(link)
            subprocess.run(["docker", "import", str(rootfs), image], check=True,
                           capture_output=True)
    return image


LLAMA_CACHE = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
               / "omni-host" / "llama-cpp-python-0.3.36")


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The CPU-only llama-bench and a 127 MiB random-weight llama with the real vocab."""
    binary = LLAMA_CACHE / "bin" / "llama-bench"
    assert binary.exists(), f"no {binary}: run bash tests/llama_bench.sh (tests/setup.sh does)"
    model = tmp_path_factory.mktemp("model") / "small.gguf"
    # In a process of its own: numpy's 265 MB of random weights would otherwise stay in this
    # one, and every process it starts inherits that as its peak RSS (a bound another test
    # measures).
    subprocess.run([sys.executable, str(Path(__file__).parent / "random_llama.py"),
                    str(LLAMA_CACHE / "vocab.gguf"), str(model)], check=True,
                   capture_output=True)
    return binary, model
