"""A credential reaches only its server (issue 61). With omni_serve.api_key set, the audit sent
``Authorization: Bearer <key>`` to a server another user started without asking for a key, and
to a listener on 127.0.0.2 that a decoy process named: any local user of an inference box could
harvest it. Now a key is sent only after a server asked for one (401/403), only to the process
that owns the listening socket, and the operator's key only to a server run by an account
omni_serve.user allows. Real processes of a real second user, each logging every
Authorization header it receives; the serve helper reads them as it reads a host."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port, wait_port
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_host.remote import serve as helper

OTHER = "omni-keyless"  # a second account of this machine, made by the test
METRICS = Path(__file__).parent / "fixtures" / "captures" / "serve" / \
    "llama-server-metrics_vm-2cpu_after-3-requests.txt"
# A stand-in llama-server: logs each request's Authorization header; with --api-key (its own,
# as llama-server reads it) or --secret-file (a key only the operator knows) it answers 401
# to any other; with --ask and neither, 401 always (a harvester).
STAND_IN = """
import http.server, sys
a = sys.argv
opt = lambda name: a[a.index(name) + 1] if name in a else None
log = open(opt('--log'), 'a', buffering=1)
key = opt('--api-key') or (open(opt('--secret-file')).read().strip() if opt('--secret-file') else None)
ask = key is not None or '--ask' in a
text = open(opt('--metrics-file'), 'rb').read()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        auth = self.headers.get('Authorization')
        log.write('%s %s\\n' % (self.path, auth))
        ok = not ask or (key is not None and auth == 'Bearer ' + key)
        body = (text if self.path == '/metrics' else b'{}') if ok else b'{"error":"Invalid API Key"}'
        self.send_response(200 if ok else 401)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer((opt('--host') or '127.0.0.1', int(opt('--port'))), Handler).serve_forever()
"""
SLEEP = "import time; time.sleep(300)"


@pytest.fixture(scope="module")
def other_user() -> str:
    """A real second account (no login, no home)."""
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", OTHER],
                       check=True)
    return OTHER


@pytest.fixture
def where() -> Iterator[Path]:
    """A folder the second account can read (pytest's own sit under a 0700 folder)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="omni-credentials-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _process(argv: list[str], user: str | None = None) -> Iterator[int]:
    """A real process named ``argv[0]`` (llama-server), run by ``user`` (None: this one), with
    the machine's own Python (another account cannot run this venv's, under /root)."""
    proc = subprocess.Popen(argv, executable="/usr/bin/python3", user=user,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"PATH": "/usr/bin:/bin"}, cwd="/")
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _stand_in(tmp: Path, name: str, port: int, *args: str) -> tuple[list[str], Path]:
    log = tmp / f"{name}.log"
    log.touch()
    log.chmod(0o666)
    metrics = tmp / "metrics.txt"
    metrics.write_bytes(METRICS.read_bytes())
    metrics.chmod(0o644)
    return ["llama-server", "-c", STAND_IN, "--port", str(port), "--log", str(log),
            "--metrics-file", str(metrics), *args], log


def _helper(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, key: str,
            *args: str) -> dict[int, dict]:
    """The serve helper as the collector runs it, given the operator's key; {pid: entry}."""
    monkeypatch.setattr(helper, "GIVEN_KEY", key)
    capsys.readouterr()
    helper.main(list(args))
    return {s["pid"]: s for s in json.loads(capsys.readouterr().out)["servers"]}


@pytest.mark.system
def test_no_key_goes_to_another_users_server_or_to_a_listener_a_decoy_named(
        where: Path, other_user: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-operator-7c1d5e9a"
    open_port, asking_port, decoy_port, own_port, mine_port = (free_port() for _ in range(5))
    open_argv, open_log = _stand_in(where, "open", open_port)  # asks for no key
    asking_argv, asking_log = _stand_in(where, "asking", asking_port, "--ask")
    listener_argv, listener_log = _stand_in(where, "listener", decoy_port, "--ask",
                                            "--host", "127.0.0.2")
    decoy = ["llama-server", "-c", SLEEP, "--host", "127.0.0.2", "--port", str(decoy_port),
             "--api-key", "sk-decoys-own-31f0"]
    secret = where / "operator.key"
    secret.write_text(key + "\n")
    own_argv, own_log = _stand_in(where, "own", own_port, "--api-key", "sk-own-key-88aa")
    mine_argv, mine_log = _stand_in(where, "mine", mine_port, "--secret-file", str(secret))
    with _process(open_argv, other_user) as open_pid, \
            _process(asking_argv, other_user) as asking_pid, \
            _process(listener_argv, other_user), _process(decoy) as decoy_pid, \
            _process(own_argv) as own_pid, _process(mine_argv) as mine_pid:
        for port in (open_port, asking_port, own_port, mine_port):
            wait_port(port)
        deadline = time.monotonic() + 10
        while subprocess.run(["sh", "-c", f"exec 3<>/dev/tcp/127.0.0.2/{decoy_port}"],
                             executable="/bin/bash", capture_output=True).returncode:
            assert time.monotonic() < deadline, "the listener on 127.0.0.2 did not come up"
            time.sleep(0.1)
        servers = _helper(capsys, monkeypatch, key)
    uid = pwd.getpwnam(other_user).pw_uid
    # another user's server that asks for no key is read without one
    assert "metrics" in servers[open_pid] and "metrics_error" not in servers[open_pid]
    # another user's server that asks is refused the operator's key, and the verdict says why
    assert servers[asking_pid]["auth"] == "withheld"
    assert f"omni_serve.api_key was withheld: process {asking_pid} runs as uid {uid}" in \
        servers[asking_pid]["metrics_error"]
    # a decoy of the operator's own account names a port someone else listens on: no key
    assert f"a key was withheld: no socket of process {decoy_pid} listens on port {decoy_port}" \
        in servers[decoy_pid]["metrics_error"]
    # the operator's own servers that ask are read: with their own key, and with the operator's
    assert "metrics" in servers[own_pid], servers[own_pid]
    assert "metrics" in servers[mine_pid], servers[mine_pid]
    for log in (open_log, asking_log, listener_log):
        text = log.read_text()
        assert text and "Bearer" not in text, (log.name, text)  # asked, never given a key
    assert "sk-own-key-88aa" in own_log.read_text() and key not in own_log.read_text()
    assert f"Bearer {key}" in mine_log.read_text()
    assert "sk-own-key-88aa" not in mine_log.read_text()


@pytest.mark.system
def test_omni_serve_user_names_who_may_receive_the_operators_key(
        where: Path, other_user: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An inventory that names the account the server runs as lets the key go to it (and to
    no one else's): the server is read."""
    key = "sk-operator-20d4"
    secret = where / "operator.key"
    secret.write_text(key)
    secret.chmod(0o644)
    port = free_port()
    argv, log = _stand_in(where, "theirs", port, "--secret-file", str(secret))
    with _process(argv, other_user) as pid:
        wait_port(port)
        withheld = _helper(capsys, monkeypatch, key)[pid]
        named = _helper(capsys, monkeypatch, key, "--key-user", other_user)[pid]
    assert withheld["auth"] == "withheld"
    # the helper runs as root here: it reads the other account's sockets, so the key may go
    assert "metrics" in named and "metrics_error" not in named, named
    lines = log.read_text().splitlines()  # withheld: asked without; named: /metrics, /props
    assert lines == ["/metrics None", "/props None", "/metrics None", f"/metrics Bearer {key}",
                     f"/props Bearer {key}"]


def test_the_audit_and_serve_watch_ask_with_one_probe_of_the_policy() -> None:
    """serve watch asked with the static probe (no key: 13 rounds of 401, then advice to set
    the key it was given); the audit, the watch and the bench build the one probe now."""
    from omni_host.plan.policy import policy_from_vars
    from omni_host.probes.catalog import probes_for, serve_probe

    policy = policy_from_vars({"omni_serve": {"api_key": "sk-one-line\n", "user": ["llm", 1001]}}, "t")
    audit = next(p for p in probes_for(policy) if p.id == "serve.servers")
    watch = serve_probe(policy, "--gpu")
    assert audit.secret == watch.secret == "sk-one-line"  # the line end a here-string adds goes
    assert watch.argv == (*audit.argv, "--gpu")
    assert audit.argv[-4:] == ("--key-user", "llm", "--key-user", "1001")
    assert "sk-one-line" not in " ".join(audit.argv)  # beside the program, never in its argv


@pytest.mark.parametrize(("serve", "why"), [
    ({"api_key": "two\nlines"}, "omni_serve.api_key: must be one line of text"),
    ({"api_key": "\n"}, "omni_serve.api_key: must be one line of text"),
    ({"user": "root; rm -rf /"}, "omni_serve.user: must be an account name or a list of them"),
    ({"user": [["nested"]]}, "omni_serve.user: must be an account name or a list of them"),
    ({"user": {"a": 1}}, "omni_serve.user: must be an account name or a list of them"),
])
def test_a_key_or_account_that_is_not_one_is_refused_where_it_enters(serve: dict, why: str) -> None:
    from omni_host.errors import InventoryError
    from omni_host.plan.policy import policy_from_vars

    with pytest.raises(InventoryError, match=why):
        policy_from_vars({"omni_serve": serve}, "t")


@pytest.mark.system
def test_a_bench_lock_folder_another_account_made_is_refused_naming_it(other_user: str,
                                                                      where: Path) -> None:
    """The lock lived in /tmp, where any local user could create and hold it: every bench was
    refused, unnamed. Now a user's lock lives in a folder only that user writes; one that
    another account made first is refused by name, before any run."""
    import os
    import shutil

    uid = pwd.getpwnam(other_user).pw_uid
    planted = Path(f"/tmp/omni-host-{uid}")
    shutil.rmtree(planted, ignore_errors=True)
    # the helper's sources where the second account may read them (a clone may sit in a 0700
    # folder): the standalone package of what runs on a host
    readable = where / "src"
    shutil.copytree(Path(helper.__file__).parent, readable / "omni_host" / "remote")
    (readable / "omni_host" / "__init__.py").write_text("")
    for path in [readable, *readable.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    code = (f"import sys; sys.path.insert(0, {str(readable)!r}); "
            "from omni_host.remote import bench; print(bench.take_lock())")
    env = {"PATH": "/usr/bin:/bin"}
    try:
        mine = subprocess.run(["/usr/bin/python3", "-S", "-c", code], user=other_user, env=env,
                              capture_output=True, text=True, timeout=30, cwd="/")
        assert mine.stdout.startswith("(") and ", None)" in mine.stdout, mine.stderr
        assert planted.stat().st_uid == uid and planted.stat().st_mode & 0o777 == 0o700
        shutil.rmtree(planted)
        planted.mkdir(mode=0o777)  # made first by root (another account), writable by all
        os.chmod(planted, 0o777)
        theirs = subprocess.run(["/usr/bin/python3", "-S", "-c", code], user=other_user, env=env,
                                capture_output=True, text=True, timeout=30, cwd="/")
        assert f"the bench lock's folder {planted} is not this user's own (uid 0, mode 777)" in \
            theirs.stdout, theirs.stdout + theirs.stderr
    finally:
        shutil.rmtree(planted, ignore_errors=True)


@settings(max_examples=300, deadline=None)
@given(bound=st.booleans(), published=st.booleans(), owner=st.sampled_from([0, 1000, 1001, None]),
       users=st.lists(st.sampled_from(["0", "1000", "1002"]), max_size=2),
       given_key=st.sampled_from([None, "sk-op"]),
       own=st.lists(st.sampled_from(["sk-a", "sk-b", "sk-op"]), max_size=2))
def test_a_key_goes_only_to_its_own_listener_and_the_operators_only_to_an_allowed_account(
        bound: bool, published: bool, owner: int | None, users: list[str],
        given_key: str | None, own: list[str]) -> None:
    """The invariant over generated cases: no key is offered where the listening socket is
    not the process's own (nor Docker's published port of its container); the operator's key
    only where the process runs as an account omni_serve.user allows (root always)."""
    argv = ["llama-server", *(("--api-key", ",".join(own)) if own else ())]
    with pytest.MonkeyPatch.context() as patch:  # what /proc would say of process 7
        patch.setattr(helper, "_bound", lambda pid, port: (("127.0.0.1", port), None) if bound
                      else (None, "no socket of process 7 listens on port 80"))
        patch.setattr(helper, "_owner", lambda pid: None if owner is None else (owner, {owner}))
        _, keys, withheld = helper.credentials(7, argv, {}, given_key, users, ("127.0.0.1", 80),
                                               published)
    reachable = bound or published
    allowed = {0, *(int(u) for u in users)} if users else None
    if not reachable:
        assert keys == [] and withheld and withheld.startswith("a key was withheld")
        return
    assert set(keys) - {given_key} == set(own) - {given_key}
    if given_key and given_key not in own:
        may = owner is not None and (owner in allowed if allowed is not None else owner in (0, os.getuid()))
        assert (given_key in keys) is may
        assert (withheld is not None) is (not may)
