"""Running containers (``containers``) or networks (``networks``) straight from the Docker
Engine API on its unix socket: the same JSON as ``docker inspect``, without starting the Go
CLI four times (it cost a host 0.15 CPU-seconds per audit).

Run as ``python3 -c <this file> containers|networks``. Exit 127: Docker is not installed;
126: the socket is not ours to read; 1: the daemon does not answer.
"""

import json
import os
import shutil
import socket
import sys

LIMIT = 64 << 20  # a Docker answer larger than this is not an inspect of a sane host


def get(path, url):
    """One HTTP/1.0 GET over the unix socket, read to its close. Plain sockets: http.client
    pulls in the email and ssl packages, 27 ms of a host's CPU per audit for two requests."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(15)
    try:
        sock.connect(path)
        sock.sendall(("GET %s HTTP/1.0\r\nHost: docker\r\n\r\n" % url).encode("ascii"))
        chunks, size = [], 0
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > LIMIT:
                raise ValueError("Docker API %s: answer over %d MiB" % (url, LIMIT >> 20))
            chunks.append(chunk)
    finally:
        sock.close()
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if not sep or len(status) < 2 or not status[0].startswith("HTTP/"):
        raise ValueError("Docker API %s: not an HTTP answer: %r" % (url, head[:80]))
    headers = dict(line.lower().split(":", 1) for line in lines[1:] if ":" in line)
    if headers.get("transfer-encoding", "").strip() == "chunked":
        body = dechunk(body)
    if status[1] != "200":
        raise OSError("Docker API %s: HTTP %s %s" % (url, status[1], body[:200]))
    return json.loads(body.decode("utf-8"))


def dechunk(body):
    out, rest = [], body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2:]
    return b"".join(out)


def socket_path():
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        sys.stderr.write("DOCKER_HOST %s is not a unix socket\n" % host)
        sys.exit(1)
    return host[len("unix://"):]


def main(kind):
    path = socket_path()
    if not os.path.exists(path):
        if shutil.which("docker") is None and shutil.which("dockerd") is None:
            sys.stderr.write("docker: not found\n")
            sys.exit(127)
        sys.stderr.write("Cannot connect to the Docker daemon at unix://%s\n" % path)
        sys.exit(1)
    try:
        if kind == "networks":
            out = get(path, "/networks")
        else:
            out = [get(path, "/containers/%s/json" % c["Id"]) for c in get(path, "/containers/json")]
    except PermissionError:
        sys.stderr.write("permission denied on the Docker socket %s\n" % path)
        sys.exit(126)
    except (OSError, ValueError) as exc:
        sys.stderr.write("Cannot connect to the Docker daemon at unix://%s: %s\n" % (path, exc))
        sys.exit(1)
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "containers")
elif __name__ == "__omni_inline__":  # run inside the collector (collector.run_inline)
    main(ARGS[0] if ARGS else "containers")  # type: ignore[name-defined]  # noqa: F821 (ARGS is given by the collector)
