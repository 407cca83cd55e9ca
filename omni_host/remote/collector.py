"""The on-host collector: one script, run by ``python3 -I -S -`` on the audited host.

This file is sent as-is over the transport's stdin (local subprocess, SSH channel, or an
Ansible ``script`` task) followed by one line that calls ``main`` with the probe plan, so every
engine runs the exact same code. It uses the standard library only and stays compatible with
Python 3.6 (Ubuntu 18.04's python3), because the audited host is a fresh box with nothing
installed.

A plan is a list of ``{"id", "argv", "timeout_s", "fallback_for"}``. Probes run in parallel
without a shell (``argv`` lists go straight to exec, so nothing is ever re-quoted); a probe with
``fallback_for`` runs right after the probe it stands in for, and only when that one did not
succeed, which keeps the fallback inside the same round trip. ``{python}`` as ``argv[0]`` is this interpreter.

The result is one JSON document on stdout, framed by a marker line so that a login banner or
shell noise printed before it cannot corrupt it.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

MARKER = "--- omni-host bundle v1 ---"
MAX_OUTPUT_BYTES = 8 * 1024 * 1024


def _env():
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    path = env.get("PATH", "")
    # sudo and non-login SSH shells often drop the sbin directories.
    for extra in ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin", "/bin"):
        if extra not in path.split(":"):
            path = path + ":" + extra if path else extra
    env["PATH"] = path
    return env


def _decode(data):
    return data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


# After the probe's own process has exited, how long its output pipes may stay open: past
# this, whatever still holds them is a background process the probe left behind.
EXIT_GRACE_S = 0.5
LIVE = set()  # type: set[subprocess.Popen[bytes]]  # the probes running now: killed if the controller goes away
LIVE_LOCK = threading.Lock()


def _pipe_holders(pipes):
    """PIDs of processes (other than us) holding one of these pipes open: a daemonized
    child escapes the probe's process group, but not the pipe it inherited."""
    inodes = set()
    for pipe in pipes:
        try:
            inodes.add(os.fstat(pipe.fileno()).st_ino)
        except (OSError, ValueError):
            pass
    holders = set()
    for pid in os.listdir("/proc") if inodes else ():
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if target.startswith("pipe:[") and int(target[6:-1]) in inodes:
                    holders.add(int(pid))
                    break
        except (OSError, ValueError):
            continue
    return holders


def _read_all(proc, deadline):
    """Read stdout and stderr until both close, the deadline passes, or the probe's process
    has exited and EXIT_GRACE_S more pass with the pipes still open. Returns (out, err,
    why) with why None, "timeout" or "held" (a left-behind process held the output)."""
    import select

    chunks = {proc.stdout: [], proc.stderr: []}
    sizes = {proc.stdout: 0, proc.stderr: 0}
    open_pipes = [proc.stdout, proc.stderr]
    exited_at = None
    why = None
    while open_pipes:
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        limit = deadline if exited_at is None else min(deadline, exited_at + EXIT_GRACE_S)
        if now >= limit:
            why = "timeout" if exited_at is None or now >= deadline else "held"
            break
        ready, _, _ = select.select(open_pipes, [], [], min(0.2, limit - now))
        for pipe in ready:
            data = os.read(pipe.fileno(), 65536)
            if not data:
                open_pipes.remove(pipe)
            elif sizes[pipe] < MAX_OUTPUT_BYTES:
                chunks[pipe].append(data)
                sizes[pipe] += len(data)
    return b"".join(chunks[proc.stdout]), b"".join(chunks[proc.stderr]), why


def _contain(proc, why, deadline):
    """Let the probe's own process finish (its pipes may close before it exits: its exit
    status is data), then kill whatever is left of its process group and anything else still
    holding its output, and close the pipes: nothing the probe started outlives it. Returns
    ``why``, now "timeout" if the process outlived the deadline after closing its output."""
    if why is None:
        try:
            proc.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            why = "timeout"
    _kill_group(proc)
    if why is not None:
        for pid in _pipe_holders([proc.stdout, proc.stderr]):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for pipe in (proc.stdout, proc.stderr):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return why


SECRET_WORDS = ("key", "token", "secret", "passw", "credential", "auth")
KEEP_LABELS = ("com.docker.compose.", "org.opencontainers.image.")
KEEP_ENV = ("GLIBC_TUNABLES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "GGML_CUDA_NO_VMM")


def _secretish(word):
    word = word.lower()
    return any(s in word for s in SECRET_WORDS)


_SECRET = "(?:key|token|secret|passw|credential|auth)"
# Inside one string (a `sh -c` line, a healthcheck, a label): a secret flag's value, a
# NAME=value whose name looks secret, a bearer/basic credential, a URL's password.
_TEXT_RULES = (
    (re.compile(r"(--?[\w.-]*" + _SECRET + r"[\w.-]*)([ =]+)(\"[^\"]*\"|'[^']*'|[^\s'\"]+)",
                re.I), r"\1\2<redacted>"),
    (re.compile(r"\b([\w.]*" + _SECRET + r"[\w.]*)=(\"[^\"]*\"|'[^']*'|[^\s'\"&]+)", re.I),
     r"\1=<redacted>"),
    (re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]+", re.I), r"\1 <redacted>"),
    (re.compile(r"(\w+://[^\s:/@]+:)[^\s@/]+@"), r"\1<redacted>@"),
)


# A healthcheck that calls a tool its image lacks (F-021): group 1 or 2 is the tool. The one
# definition for the collector (which keeps only that line of a healthcheck's output) and for
# docker.healthchecks (which names the tool).
MISSING_TOOL = re.compile(
    r'(?:exec: "?([^":\s]+)"?: (?:executable file not found|stat [^:]+: no such file)'
    r"|(?:^|\s)(?:/bin/sh: )?(?:\d+: )?([\w./-]+): (?:command )?not found)", re.M)


def _health_output(text):
    """What a healthcheck printed is free text (a token, a body): only the line that says a
    tool is missing is kept."""
    if not isinstance(text, str):
        return text
    found = MISSING_TOOL.search(text)
    if found is None:
        return "<redacted>"
    tool = found.start(found.lastindex or 0)  # the match may begin with the newline before it
    start = text.rfind("\n", 0, tool) + 1
    end = text.find("\n", tool)
    return _redact_text(text[start:] if end < 0 else text[start:end])


def _redact_text(text):
    if not isinstance(text, str):
        return text
    for rule, replacement in _TEXT_RULES:
        text = rule.sub(replacement, text)
    return text


# Stored by allowlist (issue 61): of a container's command, entrypoint, arguments and
# healthcheck, a word is kept only where it is known safe: the program, an option's name, a
# number, an absolute path, a URL without its credentials and query, a shell operator. Any
# other word (a value, a token, a password, free text) is replaced; so is every word after
# an option whose name says secret, whatever it looks like. No check reads more of them.
_SAFE_WORD = re.compile(r"(?:-{1,2}[A-Za-z][\w.-]{0,63}|[+-]?[0-9][0-9.,:x-]{0,23}"
                        r"|/[\w./-]{0,255}|&&|\|\||[;|&])\Z")
_PROGRAM = re.compile(r"[\w./-]{1,255}\Z")
_NAMED = re.compile(r"(-{1,2}[A-Za-z][\w.-]{0,63})=(.*)\Z", re.S)
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,15}://)(?:[^/?#@\s]*@)?([^/?#@\s]*)([^?#@\s]*)"
                  r"(?:[?#]\S*)?\Z")
_OPERATORS = ("&&", "||", ";", "|", "&")


def _kept_word(word, program):
    if program and _PROGRAM.match(word):
        return word
    if _SAFE_WORD.match(word):
        return word
    named = _NAMED.match(word)
    if named:
        value = named.group(2)
        return named.group(1) + "=" + (value if not _secretish(named.group(1)) and
                                       _SAFE_WORD.match(value) else "<redacted>")
    url = _URL.match(word)
    if url:
        return url.group(1) + url.group(2) + url.group(3)
    return "<redacted>"


def _hides(word):
    """An option whose name says secret (``--api-key``): the word after it is never kept."""
    return isinstance(word, str) and word.startswith("-") and "=" not in word and \
        _secretish(word)


def _kept_words(words, program):
    """``words`` as they may leave the host: see above; ``program``: the first is one."""
    out, hide = [], False
    for word in words:
        if hide:
            out.append("<redacted>")
            hide = False
            continue
        out.append(_kept_word(word, program))
        hide = _hides(word)
        program = word in _OPERATORS  # a shell's next command begins after an operator
    return out


def _redact_args(args, program=True):
    """A container's argv (``program``: its first word is the program): each word by the
    allowlist; a word holding a shell line (``sh -c "..."``) word by word inside it. The word
    after an option whose name says secret is never kept, whatever it holds."""
    out, hide = [], False
    for i, arg in enumerate(args or []):
        if hide or not isinstance(arg, (str, int, float)):
            out.append("<redacted>")
        elif not isinstance(arg, str):
            out.append(arg)
        elif any(c.isspace() for c in arg):
            out.append(" ".join(_kept_words(arg.split(), True)))
        else:
            out.append(_kept_word(arg, program and i == 0 or i > 0 and args[i - 1] == "-c"))
        hide = not hide and _hides(arg)
    return out


def _redact_container(doc):
    config = doc.get("Config")
    if isinstance(config, dict):
        env = []
        for item in config.get("Env") or []:
            key = item.split("=", 1)[0]
            env.append(item if key in KEEP_ENV or "=" not in item else key + "=<redacted>")
        config["Env"] = env
        for field in ("Cmd", "Entrypoint"):
            if isinstance(config.get(field), list):
                config[field] = _redact_args(config[field])
        health = config.get("Healthcheck")
        if isinstance(health, dict) and isinstance(health.get("Test"), list) and health["Test"]:
            test = health["Test"]  # ["CMD", program, ...], ["CMD-SHELL", line] or ["NONE"]
            health["Test"] = test[:1] + _redact_args(test[1:])
        labels = config.get("Labels")
        if isinstance(labels, dict):  # Compose's and the image spec's own labels: names, paths
            config["Labels"] = dict((k, v if k.startswith(KEEP_LABELS) and isinstance(v, str)
                                     and not _secretish(k) else "<redacted>")
                                    for k, v in labels.items())
    if isinstance(doc.get("Args"), list):
        doc["Args"] = _redact_args(doc["Args"], program=False)
    if isinstance(doc.get("Path"), str):
        doc["Path"] = _redact_args([doc["Path"]])[0]
    health = (doc.get("State") or {}).get("Health") if isinstance(doc.get("State"), dict) else None
    if isinstance(health, dict):
        for entry in health.get("Log") or []:
            if isinstance(entry, dict) and "Output" in entry:
                entry["Output"] = _health_output(entry["Output"])


def redact_docker_inspect(text):
    """Secrets never leave the host: environment values other than the few the checks read,
    secret-looking flags (--api-key X) and, inside shell strings, healthchecks and labels, the
    values of secret-looking names, bearer tokens and URL passwords are replaced before output;
    of what healthchecks printed, only a "tool not found" line is kept."""
    try:
        docs = json.loads(text)
    except ValueError:
        return text
    if not isinstance(docs, list):
        return text
    for doc in docs:
        if isinstance(doc, dict):
            _redact_container(doc)
    return json.dumps(docs, indent=1)


REDACTORS = {"docker-inspect": redact_docker_inspect}


class _ThreadStreams(object):
    """sys.stdout/sys.stderr that write to a per-thread buffer when one is registered, so
    inline helpers running in parallel threads keep their outputs apart."""

    def __init__(self, real):
        self.real = real
        self.buffers = {}

    def write(self, text):
        return self.buffers.get(threading.current_thread().ident, self.real).write(text)

    def flush(self):
        self.real.flush()


def _in_thread(probe, record, start, body, redirect=False):
    """Run ``body(out, err)`` (returns an exit code) in a thread bounded by the probe's
    timeout: in-process work keeps the same deadline as a subprocess. ``redirect``: what the
    thread prints (an exec'd helper) goes to its own buffers (main installs the streams)."""
    import io

    out, err, result = io.StringIO(), io.StringIO(), {}

    def target():
        ident = threading.current_thread().ident
        if redirect:
            sys.stdout.buffers[ident], sys.stderr.buffers[ident] = out, err
        try:
            result["code"] = body(out, err)
        except Exception as exc:  # a helper bug is that probe's error, not the collector's
            err.write("%s: %s\n" % (type(exc).__name__, exc))
            result["code"] = 1
        finally:
            if redirect:
                sys.stdout.buffers.pop(ident, None)
                sys.stderr.buffers.pop(ident, None)

    timeout_s = float(probe.get("timeout_s", 10))
    thread = threading.Thread(target=target)
    thread.daemon = True
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        record.update(status="timeout", reason="timed out after %gs" % timeout_s)
    record["exit_code"] = result.get("code", -9)
    record["stdout"] = out.getvalue()
    record["stderr"] = err.getvalue()
    record["duration_s"] = round(time.monotonic() - start, 4)
    return record


def run_inline(probe, record, start):
    """Run a pure-Python helper (``{python} -c CODE ARGS``) inside this interpreter: no new
    interpreter to start on the host. Only for helpers of the standard library: a C extension
    that crashes would take the whole collector with it, so those run as subprocesses."""
    code, args = probe["argv"][2], list(probe["argv"][3:])

    def body(out, err):
        try:
            exec(compile(code, "<%s>" % probe["id"], "exec"),
                 {"__name__": "__omni_inline__", "ARGS": args, "SECRET": probe.get("secret")})
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0

    return _in_thread(probe, record, start, body, redirect=True)


def read_inline(probe, record, start):
    """``cat FILE`` without starting cat: the file is read here, and a file that cannot be
    read gives what cat would (exit 1 and its message on stderr)."""
    path = probe["argv"][1]

    def body(out, err):
        try:
            with open(path, "rb") as handle:
                out.write(_decode(handle.read(MAX_OUTPUT_BYTES)))
        except (IOError, OSError) as exc:
            err.write("cat: %s: %s\n" % (path, exc.strerror or exc))
            return 1
        return 0

    return _in_thread(probe, record, start, body)


def _absent_requirement(probe):
    """A probe may name a path that must exist for it to be worth running (the NVML fallback
    needs the NVIDIA kernel driver), or a directory that, where it exists, must hold at least
    ``entries`` entries (the GPU topology needs two GPUs in /proc/driver/nvidia/gpus): the
    reason it was not run, or None."""
    needs = probe.get("requires")
    if not needs:
        return None
    if needs.get("entries"):
        try:
            found = len(os.listdir(needs["path"]))
        except OSError:
            return None  # not there to count (a container): run it and let it answer
        if found < needs["entries"]:
            return "%s (%d in %s)" % (needs["why"], found, needs["path"])
        return None
    if not os.path.exists(needs["path"]):
        return "%s (no %s)" % (needs["why"], needs["path"])
    return None


def _send_go(proc, go):
    """Tell a waiting probe (a benchmark that prepared while the others ran) to go on, once
    ``go`` is set: one line on its stdin, then EOF."""
    go.wait()
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    except (OSError, ValueError):  # it ended already (refused, crashed): nothing to tell
        pass


def run_probe(probe, env, go=None):
    """Run one probe; never raises. Returns the probe's result record. ``go``: an event the
    probe's process waits for on its stdin (``prepare`` probes) before its main work."""
    argv = list(probe["argv"])
    if argv and argv[0] == "{python}":
        argv[0] = sys.executable or "python3"
    timeout_s = float(probe.get("timeout_s", 10))
    record = {"id": probe["id"], "argv": argv, "status": "ran", "exit_code": None,
              "stdout": "", "stderr": "", "duration_s": 0.0, "reason": ""}
    start = time.monotonic()
    absent = _absent_requirement(probe)
    if absent is not None:
        record.update(status="skipped", reason=absent)
        return record
    if probe.get("inline"):
        inline = read_inline if argv[0] == "cat" else run_inline
        record = inline(probe, record, start)
        redactor = REDACTORS.get(probe.get("redact", ""))
        if redactor is not None:
            record["stdout"] = redactor(record["stdout"])
        return record
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL if go is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True)
    except FileNotFoundError:
        record.update(status="missing", reason="%s: command not found" % argv[0])
        return record
    except PermissionError:
        record.update(status="denied", reason="%s: permission denied" % argv[0])
        return record
    except OSError as exc:
        record.update(status="error", reason="%s: %s" % (argv[0], exc))
        return record
    with LIVE_LOCK:
        LIVE.add(proc)
    if go is not None:
        sender = threading.Thread(target=_send_go, args=(proc, go))
        sender.daemon = True
        sender.start()
    try:
        out, err, why = _read_all(proc, start + timeout_s)
        why = _contain(proc, why, start + timeout_s)
    finally:
        with LIVE_LOCK:
            LIVE.discard(proc)
    if why == "timeout":
        record.update(status="timeout", reason="timed out after %gs" % timeout_s)
    elif why == "held":
        record.update(reason="left a background process holding its output: killed")
    record["stdout"] = _decode(out)
    redactor = REDACTORS.get(probe.get("redact", ""))
    if redactor is not None:
        record["stdout"] = redactor(record["stdout"])
    record["stderr"] = _decode(err)
    record["exit_code"] = proc.returncode
    record["duration_s"] = round(time.monotonic() - start, 4)
    return record


def _succeeded(record):
    return record is not None and record["status"] == "ran" and record["exit_code"] == 0


def _skip(results, fallbacks, fallback, succeeded):
    """A fallback not needed, and the fallbacks that would have stood in for it."""
    results[fallback["id"]] = {
        "id": fallback["id"], "argv": list(fallback["argv"]), "status": "skipped",
        "exit_code": None, "stdout": "", "stderr": "", "duration_s": 0.0,
        "reason": "not needed: %s succeeded" % succeeded}
    for further in fallbacks.get(fallback["id"], []):
        _skip(results, fallbacks, further, succeeded)


def collect(plan):
    """Run every probe of the plan: primaries in parallel, and each primary's fallbacks right
    after it (side by side), only when it did not succeed. Probes marked ``last`` (a
    benchmark) run one after another once every other probe has finished, so the state is
    read on a quiet host and nothing of ours competes with the measurement. A ``last`` probe
    that ``prepare``s starts with the others (its own reads before the measurement: the
    bench's idle gate and context) and waits on its stdin for the word to go on, sent once
    every other probe has finished."""
    env = _env()
    results = {}
    fallbacks = {}
    for probe in plan:
        if probe.get("fallback_for"):
            fallbacks.setdefault(probe["fallback_for"], []).append(probe)

    def worker(probe):
        record = run_probe(probe, env)
        results[probe["id"]] = record
        needed = []
        for fallback in fallbacks.get(probe["id"], []):
            if _succeeded(record):
                _skip(results, fallbacks, fallback, probe["id"])
            else:
                needed.append(fallback)
        # the fallbacks of one probe side by side (the NVML reader's four nvidia-smi runs):
        # the host's deadline allows one fallback's time after its primary, not their sum
        others = [threading.Thread(target=worker, args=(f,)) for f in needed[1:]]
        for thread in others:
            thread.start()
        if needed:
            worker(needed[0])
        for thread in others:
            thread.join()

    go = threading.Event()

    def prepared(probe):
        results[probe["id"]] = run_probe(probe, env, go)

    threads = [threading.Thread(target=worker, args=(p,)) for p in plan
               if not p.get("fallback_for") and not p.get("last")]
    ready = [threading.Thread(target=prepared, args=(p,)) for p in plan
             if p.get("last") and p.get("prepare")]
    for thread in ready + threads:  # a benchmark's preparation is the longest: it starts first
        thread.start()
    for thread in threads:
        thread.join()
    go.set()
    for thread in ready:
        thread.join()
    for probe in plan:
        if probe.get("last") and not probe.get("prepare"):
            results[probe["id"]] = run_probe(probe, env)
    return [results[p["id"]] for p in plan]


def _end(signum=None, frame=None):
    """The controller went away (or asked us to stop): kill every running probe's process
    group and leave, so that nothing of ours stays on the host."""
    with LIVE_LOCK:
        for proc in list(LIVE):
            _kill_group(proc)
    os._exit(1)


def leave():
    """End at once once the document is out: the caller waits for this process's end, and
    the interpreter's teardown (every object, every module) would only delay it (5 ms of a
    60 ms collection here). Nothing is left to it: the output is flushed, every probe ended."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _watch_parent(parent):
    """SSH: when the controller's session ends, sshd's process goes and we are re-parented."""
    while True:
        time.sleep(0.2)
        if os.getppid() != parent:
            _end()


def main(plan_json):
    plan = json.loads(plan_json)
    sys.stdout, sys.stderr = _ThreadStreams(sys.stdout), _ThreadStreams(sys.stderr)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _end)
    watcher = threading.Thread(target=_watch_parent, args=(os.getppid(),))
    watcher.daemon = True
    watcher.start()
    started = time.time()
    records = collect(plan)
    doc = {
        "collector": 1,
        "hostname": os.uname()[1],
        "python": "%d.%d.%d" % sys.version_info[:3],
        "euid": os.geteuid(),
        "started_at": started,
        "duration_s": round(time.time() - started, 4),
        "probes": records,
    }
    sys.stdout.write(MARKER + "\n" + json.dumps(doc) + "\n")
    sys.stdout.flush()
