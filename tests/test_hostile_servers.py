"""No process on the host can blind the served Sentinel (issue 43): the serve helper judges
each process on its own. Real processes named llama-server beside a real listening one (it
answers /metrics with a real llama-server capture): an absurd --port, a model that is a FIFO,
more decoys than the helper reads. The helper runs as it does on a host, as a process."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from conftest import free_port, wait_port

from omni_host.evaluate.checks import catalog
from omni_host.measure.serve import judge_served
from omni_host.model import Status
from omni_host.probes.parsers.serve import parse_servers
from omni_host.remote import serve as helper

REPO = Path(__file__).resolve().parent.parent
METRICS = Path(__file__).parent / "fixtures" / "captures" / "serve" / \
    "llama-server-metrics_vm-2cpu_after-3-requests.txt"
SERVER_CODE = """
import http.server, sys
text = open(sys.argv[sys.argv.index('--metrics-file') + 1]).read().encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = text if self.path == '/metrics' else b'{}'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
port = int(sys.argv[sys.argv.index('--port') + 1])
http.server.HTTPServer(('127.0.0.1', port), Handler).serve_forever()
"""
SLEEP = "import time; time.sleep(300)"


@contextlib.contextmanager
def _processes(*argvs: list[str]) -> Iterator[list[int]]:
    """Real processes, each with its argv[0] as given (``llama-server``)."""
    procs = [subprocess.Popen(argv, executable=sys.executable, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
             for argv in argvs]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _run_helper() -> tuple[str, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "omni_host" / "remote" / "serve.py")],
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout, time.monotonic() - started


def test_decoys_cost_only_their_own_entries_and_the_real_server_is_read_first(
        tmp_path: Path) -> None:
    port = free_port()
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    decoys = [["llama-server", "-c", SLEEP, "--port", "9" * 30],  # OverflowError before
              ["llama-server", "-c", SLEEP, "-m", str(fifo), "--port", str(free_port())]]
    decoys += [["llama-server", "-c", SLEEP, "--port", str(free_port())]] * helper.MAX_SERVERS
    real = ["llama-server", "-c", SERVER_CODE, "--port", str(port), "--metrics-file", str(METRICS)]
    with _processes(*decoys, real) as pids:
        wait_port(port)
        text, took = _run_helper()
    servers = parse_servers(text)
    by_pid = {s.pid: s for s in servers}
    real_pid = pids[-1]
    order = [s.pid for s in servers]
    # read whole, before every decoy (a server of the machine's own may listen too: first)
    assert by_pid[real_pid].counters is not None
    assert all(order.index(real_pid) < order.index(p) for p in pids[:-1] if p in by_pid)
    assert servers.unread >= len(decoys) + 1 - helper.MAX_SERVERS
    absurd = by_pid[pids[0]]
    assert "is not a TCP port" in absurd.metrics_error
    assert took < 30  # the FIFO did not hold the helper until a deadline
    # the unlisted are read by pid: the FIFO's process among them, its model no file
    assert by_pid[pids[1]].model_bytes is None and by_pid[pids[1]].model_path == str(fifo)
    result = judge_served(catalog()["serve.tokens-per-s"], servers, None)
    assert result.status is Status.WARN
    assert f"{servers.unread} more llama-server process(es) left unread" in result.summary


def test_a_fifo_or_a_device_is_never_opened_as_a_model(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert helper.model_identity(str(fifo))["error"] == "not a regular file"
    assert helper.model_identity("/dev/zero")["error"] == "not a regular file"
    assert time.monotonic() - started < 1


def test_a_model_the_process_user_could_not_read_is_not_read_for_it(tmp_path: Path) -> None:
    model = tmp_path / "private.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    model.chmod(0o600)
    owner = os.stat(model).st_uid
    assert helper.model_identity(str(model), (owner, set()))["size_bytes"] == 68
    other = helper.model_identity(str(model), (owner + 4242, {owner + 4242}))
    assert other["size_bytes"] is None and "not readable" in other["error"]
    model.chmod(0o644)
    assert helper.model_identity(str(model), (owner + 4242, set()))["size_bytes"] == 68


def test_counters_that_make_an_infinite_rate_are_not_a_rate() -> None:
    """A /metrics whose counters divide to infinity (1e308 tokens in 1e-300 s) passed and
    wrote Infinity into report.json (not JSON): now it is no rate, and nothing is infinite."""
    import json

    from omni_host.model import InferenceServer, ServedCounters

    server = InferenceServer("llama-server", 4242, ("llama-server", "--port", "8080"),
                             counters=ServedCounters(predicted_tokens=1e308,
                                                     predicted_seconds=1e-300))
    result = judge_served(catalog()["serve.tokens-per-s"], (server,), None)
    assert result.status is Status.SKIP, result.summary
    json.dumps(result.details, allow_nan=False)  # raises on Infinity or NaN


def test_the_metrics_hint_is_given_only_to_a_server_started_without_it() -> None:
    """A server started with --metrics whose /metrics answered 401 was told to start with
    --metrics: a hint that does not work when followed (issue 43)."""
    from omni_host.model import InferenceServer

    meta = catalog()["serve.tokens-per-s"]
    with_it = InferenceServer("llama-server", 7, ("llama-server", "--metrics", "--api-key",
                                                  "(secret)"), metrics_error="/metrics: HTTP 401")
    without = InferenceServer("llama-server", 8, ("llama-server",),
                              metrics_error="/metrics: HTTP 501 This server does not support metrics")
    said = judge_served(meta, (with_it, without), None).summary
    assert "HTTP 401; " in said and said.endswith("(start it with --metrics)")
    assert said.count("start it with --metrics") == 1


TRICKLE = """
import socket, sys, time
port = int(sys.argv[sys.argv.index('--port') + 1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', port)); s.listen(8)
while True:
    c, _ = s.accept()
    c.recv(4096)
    try:
        for b in b'HTTP/1.0 200 OK\\r\\n\\r\\n' + b'x' * 100:
            c.send(bytes([b])); time.sleep(0.4)
    except OSError:
        pass
    c.close()
"""


def test_a_sample_ends_within_its_interval_whatever_the_servers_trickle() -> None:
    """One slow-loris server stretched an 8 s watch window to 31 s (issue 61): each of its
    answers had 3 s, and three servers trickled. A watch's sample gives all its servers'
    answers one deadline (--within); a server cut by it is named."""
    ports = [free_port() for _ in range(3)]
    with _processes(*(["llama-server", "-c", TRICKLE, "--port", str(p)] for p in ports)) as pids:
        for port in ports:
            wait_port(port)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(REPO / "omni_host" / "remote" / "serve.py"),
                               "--within", "2"], capture_output=True, text=True, timeout=60,
                              check=True)
        took = time.monotonic() - started
    servers = {s.pid: s for s in parse_servers(proc.stdout)}
    assert took < 4, took  # 2 s for the answers, the interpreter and /proc around them
    for pid in pids:
        why = servers[pid].metrics_error or ""
        assert "no whole answer within" in why or "ended before it was asked" in why, why
