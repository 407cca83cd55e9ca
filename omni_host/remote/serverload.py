"""A placement loaded as the server will load it (``omni-host plan --prove``, issue 66): one
real ``llama-server`` (beside llama-bench: the same build) with the candidate's flags and the
served context, on a loopback port of its own, until its ``/health`` answers 200 (loaded), it
exits (a placement that does not fit: out of memory) or its time is up; then each GPU's free
memory as NVML reads it while the server holds what it loaded, and the server stopped (TERM,
then KILL). Standard library only, Python 3.6: part of the bench helper on the host.

The server gets the bench's environment less every ``LLAMA_ARG_*`` variable and the API key's
(llama-server reads its options from them: the load runs the flags the plan prints, no
other), binds 127.0.0.1 only and is this helper's child: it never outlives the proof.
"""

import os
import socket
import subprocess
import threading
import time

LOAD_S = 240.0  # a 27 GiB model loads from the page cache in seconds, from a cold disk in minutes
HEALTH_EVERY_S = 0.5
STDERR_KEEP = 8 * 1024  # bytes of the server's log kept, its last lines (why it did not load)
_DROPPED = ("LLAMA_ARG_", "LLAMA_API_KEY")


def server_beside(llama_bench):
    """The llama-server of llama-bench's build (its folder), or None where there is none."""
    path = os.path.join(os.path.dirname(llama_bench), "llama-server")
    return path if os.access(path, os.X_OK) else None


def load_env(env):
    """The bench's environment as the load's server gets it: no variable llama-server reads
    its options or its key from."""
    return dict((k, v) for k, v in env.items() if not k.startswith(_DROPPED))


def _free_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


def health(port, timeout_s=2.0):
    """The status code /health answers on the loopback port, or None (no answer yet)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    except (OSError, socket.timeout):
        return None
    try:
        sock.settimeout(timeout_s)
        sock.sendall(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        head = b""
        while b"\r\n" not in head and len(head) < 4096:
            chunk = sock.recv(1024)
            if not chunk:
                break
            head += chunk
    except (OSError, socket.timeout):
        return None
    finally:
        sock.close()
    parts = head.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _tail(chunks):
    text = b"".join(chunks)[-STDERR_KEEP:].decode("utf-8", "replace")
    return [line[:400] for line in text.splitlines() if line.strip()][-12:]


def _drain(pipe, sink):
    """The server's log as it comes, only its last STDERR_KEEP bytes kept."""
    for chunk in iter(lambda: pipe.read1(65536), b""):
        sink.append(chunk)
        while len(sink) > 1 and sum(len(c) for c in sink) - len(sink[0]) > STDERR_KEEP:
            sink.pop(0)


def _still_running(proc, settle_s=0.5):
    """Whether the server still runs a moment after /health said 200: another process that
    took the port first answered in its place while ours, unable to bind, was exiting."""
    time.sleep(settle_s)
    return proc.poll() is None


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_server(server, model, args, env, memory, load_s=LOAD_S):
    """``server -m model ARGS`` on a loopback port until it is loaded, has exited, or
    ``load_s`` have passed; ``memory()``: each GPU's memory as NVML reads it (called while the
    loaded server runs). Returns {"loaded", "seconds", "exit_code", "timed_out", "free" (the
    GPUs' memory, [] without NVML), "stderr_tail"}."""
    port = _free_port()
    argv = [server, "-m", model] + list(args) + ["--host", "127.0.0.1", "--port", str(port)]
    out = {"loaded": False, "exit_code": None, "timed_out": False, "free": [],
           "argv": list(args)}
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=load_env(env))
    except OSError as exc:
        out.update(seconds=0.0, stderr_tail=["cannot start %s: %s" % (server, exc)])
        return out
    log = []
    reader = threading.Thread(target=_drain, args=(proc.stderr, log))
    reader.daemon = True
    reader.start()
    try:
        while True:
            if proc.poll() is not None:
                out["exit_code"] = proc.returncode
                break
            if health(port) == 200 and _still_running(proc):
                out["loaded"] = True
                try:
                    out["free"] = memory() or []
                except Exception:  # noqa: BLE001 - a driver that answers oddly: no figure
                    out["free"] = []
                break
            if time.monotonic() - started > load_s:
                out["timed_out"] = True
                break
            time.sleep(HEALTH_EVERY_S)
        out["seconds"] = round(time.monotonic() - started, 2)
    finally:
        _stop(proc)
        reader.join(5)
    out["stderr_tail"] = _tail(log)
    return out
