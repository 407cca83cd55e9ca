"""The inference servers running on the audited host, and what each says of itself.

Run by the collector (inline, like the Docker API reader) as ``python3 -c <this file>
[--probe]``. It finds every llama-server (llama.cpp and ik_llama.cpp build one of that name)
among the host's processes, bare or in a container, and prints one JSON document:
``{"helper": 1, "servers": [...]}``, each server with

* how it runs: its argv (a value after an option that looks like a secret is replaced), the
  environment variables that change its speed (never one that looks like a secret), its CPU
  affinity and its cgroup's CPU quota, its binary's path and sha256, its start time, its
  resident memory and threads, the model file it names (size and fingerprint);
* where it answers: the port its argv gives, on the loopback; for a server in a container's
  own network, the host port Docker publishes it on;
* what it says, at no GPU cost: ``GET /metrics`` (Prometheus text: started with --metrics) and
  ``GET /props``, each bounded in time and bytes;
* where a server runs, the GPU memory its process holds (in all and on each GPU) and the
  other processes on its GPUs (one ``nvidia-smi --query-compute-apps`` for all);
* with ``--probe``, for an idle server only (no request processing by its own metrics): one
  fixed, short, deterministic completion and the ``timings`` it answers with.

A server that does not answer, answers garbage or answers too much is that server's error line;
the rest of the document stands. Standard library only, Python 3.6: the shared process facts
(``remote/procfacts.py``) come before this source on the host.
"""

import json
import os
import re
import socket
import stat
import sys
import time

if "cpu_quota" not in globals():  # imported as a module; on the host procfacts.py comes first
    from omni_host.remote.procfacts import (  # noqa: F401
        _read,
        bench_env,
        cached_sha256,
        cpu_quota,
        model_identity,
        option_value,
        readable_by,
        redacted_argv,
    )

MAX_SERVERS = 16
ANSWER_CAP = 1 << 20  # /metrics and /props of a sane server are a few KB
CONNECT_S = 1.0
READ_S = 3.0
PROBE_S = 30.0
PROBE = {"prompt": "Count from one to ten in words:", "n_predict": 24, "temperature": 0,
         "seed": 1, "top_k": 1, "cache_prompt": False, "ignore_eos": True, "stream": False}
DEFAULT_PORT = 8080
GIVEN_KEY = None  # omni_serve.api_key, where the collector gives one (SECRET)
MAX_FDS = 65536  # of /proc/PID/fd: a server holds far fewer
DEADLINE = WITHIN_S = None  # --within S: every answer of this run within S seconds (a watch's)
KEY_USERS = []  # type: list  # omni_serve.user: the accounts whose servers may get GIVEN_KEY ([]: the default)
MAX_SOCKET_LINES = 4096  # of /proc/PID/net/tcp: a server's listening socket is among them


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as fh:
            raw = fh.read(65536)
    except (IOError, OSError):
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _is_server(argv):
    return os.path.basename(argv[0]) == "llama-server"


def _environ(pid):
    try:
        with open("/proc/%s/environ" % pid, "rb") as fh:
            raw = fh.read(1 << 20)
    except (IOError, OSError):
        return None
    env = {}
    for item in raw.split(b"\0"):
        name, eq, value = item.decode("utf-8", "replace").partition("=")
        if eq:
            env[name] = value
    return env


def _kib(field):
    """``1234 kB`` of /proc/PID/status as a number (None where absent or garbled)."""
    words = (field or "").split()
    return int(words[0]) if words and words[0].isdigit() else None


def _huge_pages(pid):
    """What the process got of huge pages (/proc/PID/smaps_rollup, Linux 4.14+): its
    anonymous memory and the part of it in transparent huge pages, and file pages mapped
    with PMDs (a model's page cache in 2 MiB pages), in KiB; {} where not readable."""
    fields = {}
    for line in (_read("/proc/%s/smaps_rollup" % pid) or "").splitlines():
        name, _, rest = line.partition(":")
        if name in ("Anonymous", "AnonHugePages", "FilePmdMapped", "Rss"):
            fields[name] = _kib(rest)
    return fields


NUMA_MAPS_LINES = 100000  # a server maps far fewer regions; a bound on what is read


def _model_pages(pid, model):
    """Where the model file's pages mapped by the process live (/proc/PID/numa_maps: its
    file= lines, the path as the process sees it): the pages mapped, per NUMA node, and the
    page size in KiB; {} where not readable. Read line by line and bounded (the kernel writes
    each mapping's line as it is read)."""
    found = {"mapped": 0, "nodes": {}, "page_kib": None}
    try:
        with open("/proc/%s/numa_maps" % pid) as fh:
            for count, line in enumerate(fh):
                if count >= NUMA_MAPS_LINES:
                    break
                words = line.split()
                if "file=" + model not in words:
                    continue
                for word in words:
                    name, _, value = word.partition("=")
                    if not value.isdigit():
                        continue
                    if name == "mapped":
                        found["mapped"] += int(value)
                    elif name == "kernelpagesize_kB":
                        found["page_kib"] = int(value)
                    elif name[:1] == "N" and name[1:].isdigit():
                        found["nodes"][name[1:]] = found["nodes"].get(name[1:], 0) + int(value)
    except (IOError, OSError):
        return {}
    return found


def _status(pid):
    fields = {}
    for line in (_read("/proc/%s/status" % pid) or "").splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def _started_at(pid):
    """The process's start as seconds since the epoch (boot time + its start in ticks)."""
    stat = _read("/proc/%s/stat" % pid) or ""
    fields = stat.rpartition(")")[2].split()
    boot = next((float(line.split()[1]) for line in (_read("/proc/stat") or "").splitlines()
                 if line.startswith("btime ")), None)
    if len(fields) < 20 or boot is None:
        return None
    return round(boot + int(fields[19]) / float(os.sysconf("SC_CLK_TCK")), 2)


def _container_id(pid):
    """The Docker container a process runs in, from its cgroup path (…docker-<id>.scope or
    …/docker/<id>), else None."""
    match = re.search(r"docker[-/]([0-9a-f]{64})", _read("/proc/%s/cgroup" % pid) or "")
    return match.group(1) if match else None


def _own_network(pid):
    try:
        return os.readlink("/proc/%s/ns/net" % pid) == os.readlink("/proc/self/ns/net")
    except OSError:
        return None


def _published(container, port):
    """(address, host port) Docker publishes a container's ``port`` on, from its API."""
    path = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")[len("unix://"):]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(READ_S)
    try:
        sock.connect(path)
        status, body = _http(sock, "GET", "/containers/%s/json" % container, "docker")
    finally:
        sock.close()
    if status != 200:
        raise OSError("Docker API: HTTP %s for container %s" % (status, container[:12]))
    ports = (json.loads(body.decode("utf-8")).get("NetworkSettings") or {}).get("Ports") or {}
    for binding in ports.get("%s/tcp" % port) or []:
        address = binding.get("HostIp") or "127.0.0.1"
        return ("127.0.0.1" if address in ("0.0.0.0", "::", "") else address,
                int(binding["HostPort"]))
    return None


def _http(sock, method, path, host, body=None, total_s=READ_S, key=None):
    """One HTTP/1.0 exchange on a connected socket, read to its close within ANSWER_CAP
    bytes and ``total_s`` seconds in all (a server that trickles a byte at a time is cut
    off too); (status, body). Plain sockets: http.client's imports cost the host CPU."""
    deadline = time.monotonic() + total_s
    head = "%s %s HTTP/1.0\r\nHost: %s\r\n" % (method, path, host)
    if key:  # one line of text (the policy and _keys refuse others): no header injected
        head += "Authorization: Bearer %s\r\n" % key
    data = b""
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
    sock.sendall((head + "\r\n").encode("ascii") + data)
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no whole answer within %gs" % total_s) from None
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 16)
        except socket.timeout:
            raise socket.timeout("no whole answer within %gs" % total_s) from None
        if not chunk:
            break
        size += len(chunk)
        if size > ANSWER_CAP:
            raise ValueError("answer over %d KiB" % (ANSWER_CAP >> 10))
        chunks.append(chunk)
    head_bytes, sep, rest = b"".join(chunks).partition(b"\r\n\r\n")
    status = head_bytes.split(b"\r\n", 1)[0].split(b" ")
    if not sep or len(status) < 2 or not status[0].startswith(b"HTTP/") or \
            not status[1].isdigit():
        raise ValueError("not an HTTP answer: %r" % head_bytes[:60])
    return int(status[1]), rest


def fetch(address, method, path, body=None, read_s=READ_S, key=None):
    """(status, text) of one request to the server, or raises OSError/ValueError; within the
    sample's deadline (``--within``) where one is set."""
    if DEADLINE is not None:
        read_s = min(read_s, DEADLINE - time.monotonic())
        if read_s <= 0:
            raise socket.timeout("the sample's %gs ended before it was asked" % WITHIN_S)
    sock = socket.create_connection(address, timeout=min(CONNECT_S, read_s))
    try:
        status, data = _http(sock, method, path, "%s:%d" % address, body, read_s, key)
    finally:
        sock.close()
    return status, data.decode("utf-8", "replace")


KEY_FILE_CAP = 1 << 16


def _key_file(pid, path):
    """The keys of an --api-key-file, as the server reads it (one a line), where the server's
    own user may read it: a regular file of at most 64 KiB, never a FIFO or device."""
    root = "/proc/%s/root" % pid
    try:
        fd = os.open(root + path if path.startswith("/") else
                     os.path.join("/proc/%s/cwd" % pid, path),
                     os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError):
        return []
    try:
        st = os.fstat(fd)
        owner = _owner(pid)
        if not stat.S_ISREG(st.st_mode) or st.st_size > KEY_FILE_CAP or owner is None or \
                not readable_by(st, owner[0], owner[1]):
            return []
        text = os.read(fd, KEY_FILE_CAP).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return [line.strip() for line in text.splitlines() if line.strip()]


def _own_keys(pid, argv, env):
    """The server's own keys (--api-key, a comma-separated list; LLAMA_API_KEY;
    --api-key-file): sent to that server only, never to another."""
    own = option_value(argv, ("--api-key",), env or {}, "LLAMA_API_KEY")
    keys = [k.strip() for k in (own or "").split(",") if k.strip()]
    path = option_value(argv, ("--api-key-file",), env or {}, "LLAMA_ARG_API_KEY_FILE")
    if path:
        keys += _key_file(pid, path)
    return keys


def _key_uids(users):
    """The accounts whose servers may be sent the operator's key: the users omni_serve.user
    names (names or uids), else the user the audit connects as (sudo's caller where it
    became root); root always (it can read any key of the host already)."""
    uids = set([0])
    if not users:
        caller = os.environ.get("SUDO_UID", "") if os.geteuid() == 0 else ""
        uids.add(int(caller) if caller.isdigit() else os.getuid())
        return uids
    import pwd

    for user in users:
        try:
            uids.add(int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid)
        except (KeyError, ValueError):
            continue  # an account this host does not have owns no server here
    return uids


def _socket_inodes(pid):
    """The inodes of the sockets process ``pid`` holds (its /proc/PID/fd links), or None
    where they cannot be read (another user's process, for a collector that is not root)."""
    try:
        names = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        return None
    inodes = set()
    for name in names[:MAX_FDS]:
        try:
            link = os.readlink("/proc/%s/fd/%s" % (pid, name))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def _address(hex_address, family):
    """The textual IP of a /proc/net/tcp{,6} address (each 32-bit word in host order)."""
    words = [hex_address[i:i + 8] for i in range(0, len(hex_address), 8)]
    raw = b"".join(bytes.fromhex(w)[::-1] for w in words)
    if family == "tcp":
        return socket.inet_ntop(socket.AF_INET, raw)
    text = socket.inet_ntop(socket.AF_INET6, raw)
    return text[7:] if text.startswith("::ffff:") and "." in text else text


def _bound(pid, port):
    """(the address to ask the server at, None), where a socket of process ``pid`` itself
    listens on ``port`` (its inode among the process's own descriptors): the address that
    socket is bound to, a wildcard read as the loopback. (None, why) where no socket of that
    process does, or its descriptors cannot be read: a key is then sent to no one, since
    whoever listens there may be another user's process that only named the port."""
    inodes = _socket_inodes(pid)
    if inodes is None:
        return None, "process %s's sockets cannot be read here (another user's)" % pid
    for family in ("tcp", "tcp6"):
        for line in (_read("/proc/%s/net/%s" % (pid, family)) or "").splitlines()[1:MAX_SOCKET_LINES]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A" or fields[9] not in inodes:
                continue
            where, _, hex_port = fields[1].rpartition(":")
            try:
                if int(hex_port, 16) != port:
                    continue
                ip = _address(where, family)
            except ValueError:
                continue
            return (("127.0.0.1" if ip == "0.0.0.0" else "::1" if ip == "::" else ip), port), None
    return None, "no socket of process %s listens on port %d" % (pid, port)


def credentials(pid, argv, env, given, users, address, published):
    """Once a server asked for a key (a 401 or 403): (where to ask, the keys to ask with,
    first to last, why a key was withheld or None). The one credential rule of the audit,
    serve watch and the bench:

    * a key goes only to the process it belongs to: the listening socket must be that
      process's own (``_bound``), or, for a server in a container's network, the port Docker
      publishes for that container (``published``: Docker's own answer);
    * the server's own keys first, to that server only; then the operator's key
      (omni_serve.api_key), only to a server run by an account ``_key_uids`` allows.
    Never written anywhere."""
    if published:
        where, why = address, None
    else:
        where, why = _bound(pid, address[1])
    if where is None:
        return address, [], "a key was withheld: " + why
    keys, withheld = _own_keys(pid, argv, env), None  # its own first: they are its already
    if given and given not in keys:
        owner = _owner(pid)
        allowed = _key_uids(users)
        if owner is not None and owner[0] in allowed:
            keys.append(given)
        else:
            withheld = ("omni_serve.api_key was withheld: process %s runs as uid %s, not an account "
                        "omni_serve.user allows (uids %s)" % (
                            pid, owner[0] if owner else "?", ",".join(str(u) for u in sorted(allowed))))
    keys = [k for k in keys if "\r" not in k and "\n" not in k and len(k) <= 4096]
    return where, keys, withheld


def _refused(status, tried, withheld):
    """What a 401/403 means, said as such (it read "Invalid API Key (start it with --metrics)"
    for a server started with --metrics)."""
    if tried:
        why = "the key tried was refused (omni_serve.api_key, else the server's own)"
    elif withheld:
        why = withheld
    else:
        why = "none was found (set omni_serve.api_key, vault welcome)"
    return "HTTP %d: the server asks for an API key, and %s" % (status, why)


def _ask(server, address, probe, ask_keys=lambda: ((), [], None)):
    """/metrics and /props of one server, first without a key: ``ask_keys`` (``credentials``
    for this server) is called only once the server answered 401 or 403."""
    key, tried, withheld, asked = None, False, None, False
    for path, name in (("/metrics", "metrics"), ("/props", "props")):
        try:
            status, text = fetch(address, "GET", path, key=key)
            if status in (401, 403) and not asked:
                asked = True
                where, keys, withheld = ask_keys()
                for candidate in keys:
                    tried = True
                    status, text = fetch(where, "GET", path, key=candidate)
                    if status not in (401, 403):
                        key, address = candidate, where
                        break
        except (OSError, ValueError) as exc:
            server[name + "_error"] = "%s %s: %s" % (path, _where(address), _why(exc))
            if name == "metrics" and isinstance(exc, (socket.timeout, ConnectionError)):
                return  # it does not answer: one line, no second wait
            continue
        if status == 200:
            server[name] = text
        elif status in (401, 403):
            server[name + "_error"] = "%s %s: %s" % (path, _where(address),
                                                     _refused(status, tried, withheld))
            server["auth"] = "refused" if tried else "withheld" if withheld else "needed"
        else:
            server[name + "_error"] = "%s %s: HTTP %d %s" % (path, _where(address), status,
                                                             text.strip()[:120])
    if probe:
        server["probe"] = _probe(server, address, key)


def _probe(server, address, key=None):
    metrics = server.get("metrics")
    if metrics is None:
        hint = "" if "--metrics" in server.get("argv", []) or server.get("auth") else \
            " (start it with --metrics)"
        return {"skipped": "no /metrics: cannot tell whether it is busy" + hint}
    busy = re.search(r"^llamacpp:requests_processing\s+([0-9.eE+-]+)", metrics, re.M)
    if busy is None or float(busy.group(1)) > 0:
        return {"skipped": "busy: %s request(s) processing" % (busy.group(1) if busy else "?")}
    started = time.monotonic()
    try:
        status, text = fetch(address, "POST", "/completion", PROBE, read_s=PROBE_S, key=key)
    except (OSError, ValueError) as exc:
        return {"error": "/completion %s: %s" % (_where(address), _why(exc))}
    if status != 200:
        return {"error": "/completion: HTTP %d %s" % (status, text.strip()[:120])}
    try:
        timings = json.loads(text).get("timings")
    except (ValueError, AttributeError):
        return {"error": "/completion answered no JSON"}
    return {"request": PROBE, "timings": timings, "wall_s": round(time.monotonic() - started, 3)}


def _where(address):
    return "%s:%d" % address


def _why(exc):
    if isinstance(exc, socket.timeout):
        return str(exc) if str(exc) and str(exc) != "timed out" else "no answer in time"
    return str(getattr(exc, "strerror", None) or exc)[:200]


def _affinity(pid):
    try:
        return len(os.sched_getaffinity(int(pid)))
    except (AttributeError, OSError):
        return None


def _owner(pid):
    """(uid, gids) the process runs as, from its status; None when unreadable."""
    status = _status(pid)
    try:
        uid = int(status["Uid"].split()[1])  # effective
        gids = set(int(g) for g in status.get("Groups", "").split())
        gids.add(int(status["Gid"].split()[1]))
    except (KeyError, IndexError, ValueError):
        return None
    return uid, gids


def _listening(pid, seen={}):  # noqa: B006 - one read a network namespace, this run
    """The TCP ports listening in the process's own network namespace (its /proc/PID/net)."""
    try:
        namespace = os.readlink("/proc/%s/ns/net" % pid)
    except OSError:
        namespace = None
    if namespace in seen:
        return seen[namespace]
    ports = seen[namespace] = set()
    for name in ("tcp", "tcp6"):
        text = _read("/proc/%s/net/%s" % (pid, name)) or ""
        for line in text.splitlines()[1:MAX_SOCKET_LINES]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                try:
                    ports.add(int(fields[1].rpartition(":")[2], 16))
                except ValueError:
                    continue
    return ports


def _port(argv, env):
    """The port a server's argv (or LLAMA_ARG_PORT) gives; raises ValueError when it is none."""
    text = option_value(argv, ("--port",), env or {}, "LLAMA_ARG_PORT") or str(DEFAULT_PORT)
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise ValueError("port %r is not a TCP port" % text[:40])
    return int(text)


def describe(pid, argv, probe):
    """One server's document; whatever is wrong with this process is its own entry's error."""
    try:
        return _describe(pid, argv, probe)
    except Exception as exc:  # noqa: BLE001 - one process never costs the others their entry
        return {"kind": "llama-server", "pid": int(pid), "argv": redacted_argv(argv),
                "metrics_error": "process %s could not be read: %s: %s"
                % (pid, type(exc).__name__, str(exc)[:160])}


def _describe(pid, argv, probe):
    try:
        exe = os.readlink("/proc/%s/exe" % pid)
    except OSError:
        exe = None
    env = _environ(pid)
    status = _status(pid)
    host = option_value(argv, ("--host",), env or {}, "LLAMA_ARG_HOST") or "127.0.0.1"
    model = option_value(argv, ("-m", "--model"), env or {}, "LLAMA_ARG_MODEL")
    model = model[:4096] if model else model
    server = {
        "kind": "llama-server", "pid": int(pid), "argv": redacted_argv(argv), "exe": exe,
        "env": bench_env(env) if env is not None else None,
        "cpus_allowed": _affinity(pid), "cpus_allowed_list": status.get("Cpus_allowed_list"),
        "cpu_quota": cpu_quota(pid), "started_at": _started_at(pid),
        "rss_kib": int(status["VmRSS"].split()[0]) if "VmRSS" in status else None,
        "threads": int(status["Threads"]) if status.get("Threads", "").isdigit() else None,
        # its pages on swap, and what it holds locked (--mlock that took: VmLck)
        "swap_kib": _kib(status.get("VmSwap")), "locked_kib": _kib(status.get("VmLck")),
        "huge_pages_kib": _huge_pages(pid),
        "container": _container_id(pid),
    }
    server["sha256"] = cached_sha256(["/proc/%s/exe" % pid]).get("/proc/%s/exe" % pid)
    if model:
        root = "/proc/%s/root" % pid  # the model as the server sees it (a container's mounts)
        server["model"] = model_identity(root + model if model.startswith("/") else
                                         os.path.join("/proc/%s/cwd" % pid, model), _owner(pid))
        server["model"]["path"] = model
        server["model_pages"] = _model_pages(pid, model)
    try:
        port = _port(argv, env)
    except ValueError as exc:
        server["metrics_error"] = str(exc)
        return server
    address = ("127.0.0.1" if host in ("0.0.0.0", "::", "localhost", "") else host, port)
    published = _own_network(pid) is False
    if published:
        if server["container"] is None:
            server["metrics_error"] = "runs in a network namespace of its own, outside Docker"
            return server
        try:
            address = _published(server["container"], port)
        except (OSError, ValueError) as exc:
            server["metrics_error"] = "container %s: %s" % (server["container"][:12], _why(exc))
            return server
        if address is None:
            server["metrics_error"] = ("container %s publishes no host port for its port %d"
                                       % (server["container"][:12], port))
            return server
    server["address"] = _where(address)
    _ask(server, address, probe, lambda: credentials(pid, argv, env, GIVEN_KEY, KEY_USERS, address,
                                                     published))
    return server


def _rank(entry):
    """Real servers first: one listening on the port its argv names, then the rest by pid."""
    pid, args = entry
    try:
        listening = _port(args, _environ(pid)) in _listening(pid)
    except Exception:  # noqa: BLE001 - a process that cannot be ranked goes last
        listening = False
    return (0 if listening else 1, int(pid))


def gpu_apps():
    """Every compute process on the GPUs (pid, name, MiB, GPU UUID), one nvidia-smi call; None
    without nvidia-smi or where it failed."""
    import subprocess

    try:
        proc = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,"
                               "gpu_uuid", "--format=csv,noheader,nounits"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    apps = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines()[:1024]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            apps.append({"pid": int(parts[0]), "name": parts[1][:80],
                         "mib": int(parts[2]) if parts[2].isdigit() else None,
                         "gpu": parts[3][:64]})
    return apps


def _on_gpus(server, apps):
    """The GPU memory a server's process holds, and the other processes on its GPUs (its
    co-tenants: what the bench's gate would have refused)."""
    mine = [a for a in apps if a["pid"] == server["pid"]]
    server["gpu_memory_mib"] = sum(a["mib"] or 0 for a in mine) if mine else 0
    by_gpu = {}
    for a in mine:  # where its memory lies: what llama.cpp placed on each GPU (--fit's answer)
        by_gpu[a["gpu"]] = by_gpu.get(a["gpu"], 0) + (a["mib"] or 0)
    server["gpu_memory_by_gpu"] = by_gpu
    gpus = set(a["gpu"] for a in mine)
    server["gpu_cotenants"] = ["%d %s (%s MiB)" % (a["pid"], a["name"], a["mib"])
                               for a in apps if a["gpu"] in gpus and a["pid"] != server["pid"]]


def main(argv):
    global KEY_USERS, DEADLINE, WITHIN_S
    probe = "--probe" in argv
    KEY_USERS = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--key-user"]
    if "--within" in argv[:-1]:
        WITHIN_S = float(argv[argv.index("--within") + 1])
        DEADLINE = time.monotonic() + WITHIN_S
    doc = {"helper": 1, "servers": []}
    servers = doc["servers"]
    if "--bench-binary" in argv and argv.index("--bench-binary") + 1 < len(argv):
        # the llama-server of the build that was benchmarked: what a served binary is held to
        beside = os.path.join(os.path.dirname(argv[argv.index("--bench-binary") + 1]),
                              "llama-server")
        if os.path.isfile(beside):
            doc["bench_server"] = {"path": beside, "sha256": cached_sha256([beside])[beside]}
    me = str(os.getpid())
    found = []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit() and p != me), key=int):
        args = _cmdline(pid)
        if args and _is_server(args):
            found.append((pid, args))
    for pid, args in sorted(found, key=_rank)[:MAX_SERVERS]:
        servers.append(describe(pid, args, probe))
    if len(found) > MAX_SERVERS:  # said, never a silent skip of the rest
        doc["unread"] = len(found) - MAX_SERVERS
    apps = gpu_apps() if servers else None  # one call, only where a server runs
    for server in servers if apps is not None else ():
        _on_gpus(server, apps)
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
elif __name__ == "__omni_inline__":  # run inside the collector (collector.run_inline)
    GIVEN_KEY = SECRET  # type: ignore[name-defined]  # noqa: F821 (given beside ARGS)
    main(ARGS)  # type: ignore[name-defined]  # noqa: F821 (ARGS is given by the collector)
