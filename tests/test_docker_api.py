"""The Docker Engine API reader that runs on the audited host (omni_host/remote/docker_api.py),
against a real unix-socket server speaking the answers a daemon can give: a chunked body, an
error status, a byte stream that is not HTTP, a daemon that refuses."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import omni_host.remote

SCRIPT = Path(omni_host.remote.__file__).parent / "docker_api.py"


def serve(path: Path, answers: dict[str, bytes]) -> threading.Thread:
    """Answer each request line's URL with its canned bytes, then close (HTTP/1.0)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)

    def loop() -> None:
        with server:
            for _ in range(len(answers)):
                conn, _ = server.accept()
                with conn:
                    request = conn.recv(4096).decode("ascii")
                    url = request.split(" ")[1]
                    conn.sendall(answers[url])

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def run(sock: Path, kind: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), kind], capture_output=True, text=True,
                          timeout=30, check=False, env={"DOCKER_HOST": f"unix://{sock}"})


def http(body: bytes, status: str = "200 OK", chunked: bool = False) -> bytes:
    if chunked:
        half = len(body) // 2
        parts = [body[:half], body[half:]]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        head = b"Transfer-Encoding: chunked\r\n"
    else:
        head = b"Content-Length: %d\r\n" % len(body)
    return b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n" + head + \
        b"\r\n" + body


def test_containers_are_listed_then_inspected_chunked_or_not(tmp_path: Path) -> None:
    sock = tmp_path / "docker.sock"
    inspect = {"Id": "abc", "Name": "/llama", "Config": {"Env": ["A=1"]}}
    serve(sock, {"/containers/json": http(b'[{"Id": "abc"}]'),
                 "/containers/abc/json": http(json.dumps(inspect).encode(), chunked=True)})
    proc = run(sock, "containers")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [inspect]


@pytest.mark.parametrize(("answer", "message"), [
    (http(b'{"message": "page not found"}', "404 Not Found"), "HTTP 404"),
    (b"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP answer"),
    (http(b"<html>proxy</html>"), "Cannot connect to the Docker daemon"),
])
def test_an_answer_that_is_not_the_api_is_one_line_exit_1(tmp_path: Path, answer: bytes,
                                                           message: str) -> None:
    sock = tmp_path / "docker.sock"
    serve(sock, {"/networks": answer})
    proc = run(sock, "networks")
    assert proc.returncode == 1
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == "" and "Traceback" not in proc.stderr


def test_a_socket_nobody_listens_on_is_a_daemon_that_does_not_answer(tmp_path: Path) -> None:
    sock = tmp_path / "docker.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))
    dead.close()  # the file stays, nobody accepts: what a stopped dockerd leaves
    proc = run(sock, "containers")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"Cannot connect to the Docker daemon at unix://{sock}")
