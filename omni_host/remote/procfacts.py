"""Facts about processes and files on the audited host that more than one helper reports:
a process's cgroup CPU quota, a file's sha256 (cached by stat), a model file's identity, the
environment variables that change llama.cpp's speed (never one that looks like a secret), a
process's argv with its secrets replaced and the value it was given for an option. The
controller uses the last two as they are (one rule on both sides).

Not run on its own: the catalog puts this source before a helper's (``remote/bench.py``,
``remote/serve.py``), so the helper finds these names defined. Standard library only,
Python 3.6.
"""

import hashlib
import json
import os
import stat

FINGERPRINT_BYTES = 1 << 20
# The environment that changes what llama.cpp does (F-010's GLIBC_TUNABLES among them); a name
# that looks like a secret is never recorded.
ENV_PREFIXES = ("GGML_", "LLAMA_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "CUDA_")
ENV_NAMES = ("GLIBC_TUNABLES", "LD_PRELOAD", "LD_LIBRARY_PATH")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASS", "AUTH", "CREDENTIAL")
# A URL's credentials are redacted in any value (-mu/--model-url, --server-base,
# LLAMA_ARG_MODEL_URL...).
_URL_END = "/?# \t\r\n\"'<>,;"
ARG_CAP = 512  # characters of one argument kept
SECRET_VALUE = "(secret)"


def _mounts():
    """cgroup mount points: {"v2": path} and {"v1:cpu": path} from /proc/self/mountinfo."""
    found = {}
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                if not rest:
                    continue
                if rest[0] == "cgroup2":
                    found.setdefault("v2", fields[4])
                elif rest[0] == "cgroup" and "cpu" in rest[-1].split(","):
                    found.setdefault("v1", fields[4])
    except (IOError, OSError):
        pass
    return found


def _read(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except (IOError, OSError):
        return None


def _quota_at(mount, rel, v2):
    """CPUs the cgroup at ``mount``/``rel`` may use (quota/period), None when unlimited."""
    base = os.path.join(mount, rel.lstrip("/"))
    if v2:
        text = _read(os.path.join(base, "cpu.max"))
        if not text or text.split()[0] == "max":
            return None
        quota, period = text.split()[:2]
    else:
        quota = _read(os.path.join(base, "cpu.cfs_quota_us"))
        period = _read(os.path.join(base, "cpu.cfs_period_us"))
        if quota is None or period is None or int(quota) < 0:
            return None
    return int(quota) / float(period)


def cpu_quota(pid="self"):
    """The tightest CPU quota on the cgroup of process ``pid`` (this one by default) and its
    ancestors (what a container's --cpus or systemd's CPUQuota= set): {"cpus", "cgroup"}, or
    None when unlimited. Read from this process's cgroup namespace and mounts."""
    mounts = _mounts()
    text = _read("/proc/%s/cgroup" % pid) or ""
    best = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        v2 = parts[0] == "0" and parts[1] == ""
        if v2 and "v2" not in mounts or not v2 and ("cpu" not in parts[1].split(",")
                                                    or "v1" not in mounts):
            continue
        mount = mounts["v2" if v2 else "v1"]
        rel = parts[2]
        while True:
            try:
                cpus = _quota_at(mount, rel, v2)
            except ValueError:
                cpus = None
            if cpus is not None and (best is None or cpus < best["cpus"]):
                best = {"cpus": round(cpus, 3), "cgroup": rel}
            if rel in ("/", ""):
                break
            rel = os.path.dirname(rel.rstrip("/")) or "/"
    return best


def _sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except (IOError, OSError) as exc:
        return "unreadable: %s" % (exc.strerror or exc)
    return digest.hexdigest()


def _hash_cache_path():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "omni-host", "bench-sha256.json")


def _stat_key(path):
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def cached_sha256(paths, cache_path=None):
    """path -> sha256 of each file, read again only where its device, inode, size, mtime or
    ctime moved since this user's last bench (a CUDA llama-bench is hundreds of MB: hashing
    it every run was most of the bench's fixed cost). ctime cannot be set back by a user, so
    a rewritten file is always read again. The cache is the user's own (0600)."""
    cache_path = cache_path or _hash_cache_path()
    try:
        with open(cache_path) as fh:
            cache = json.load(fh)
        if not isinstance(cache, dict):
            cache = {}
    except (IOError, OSError, ValueError):
        cache = {}
    out, changed = {}, False
    for path in paths:
        try:
            key = _stat_key(path)
        except OSError as exc:
            out[path] = "unreadable: %s" % (exc.strerror or exc)
            continue
        entry = cache.get(path)
        if isinstance(entry, dict) and entry.get("stat") == key and entry.get("sha256"):
            out[path] = entry["sha256"]
            continue
        out[path] = _sha256(path)
        if not out[path].startswith("unreadable"):
            cache[path] = {"stat": key, "sha256": out[path]}
            changed = True
    if changed:
        try:
            folder = os.path.dirname(cache_path)
            if not os.path.isdir(folder):
                os.makedirs(folder, 0o700)
            keep = dict(list(cache.items())[-64:])
            tmp = "%s.%d.tmp" % (cache_path, os.getpid())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(keep, fh)
            os.rename(tmp, cache_path)
        except (IOError, OSError):
            pass  # a cache that cannot be written costs time, never a result
    return out




def model_identity(path, owner=None):
    """The model's size and a fingerprint: sha256 of its size, first and last MiB (its GGUF
    header, metadata and tensor table, and the end of its weights) - not its path, and not
    hours of hashing a 400 GB file. Only a regular file is read (a FIFO, device or socket
    that a process names is never opened to block or to be read); with ``owner`` (the uid and
    gids of the process that names it), only a file that owner may read itself."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError) as exc:
        return {"path": path, "size_bytes": None, "error": str(exc.strerror or exc)}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return {"path": path, "size_bytes": None, "error": "not a regular file"}
        if owner is not None and not readable_by(st, owner[0], owner[1]):
            return {"path": path, "size_bytes": None,
                    "error": "not readable by the process's own user"}
        size = st.st_size
        digest = hashlib.sha256(str(size).encode())
        with os.fdopen(fd, "rb") as fh:
            fd = None
            digest.update(fh.read(FINGERPRINT_BYTES))
            fh.seek(max(0, size - FINGERPRINT_BYTES))
            digest.update(fh.read(FINGERPRINT_BYTES))
    except (IOError, OSError) as exc:
        return {"path": path, "size_bytes": None, "error": str(exc.strerror or exc)}
    finally:
        if fd is not None:
            os.close(fd)
    return {"path": path, "size_bytes": size, "fingerprint": digest.hexdigest()[:16]}


def readable_by(st, uid, gids):
    """Whether a user (``uid``, its ``gids``) may read a file of this stat by its mode bits."""
    if uid == 0 or st.st_uid == uid:
        return uid == 0 or bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def bench_env(env):
    # type: (dict[str, str]) -> dict[str, str]
    """The variables that change llama.cpp's speed; a name that carries a secret is left out,
    and the credentials of a URL in a value are replaced."""
    return dict((k[:80], redacted_url(v[:200])) for k, v in sorted(env.items()) if env_kept(k))


def env_kept(name):
    # type: (str) -> bool
    """A variable whose value may leave the host and be stored: one that changes llama.cpp's
    speed, neither a free-text option's (NOT_KEPT_ENV) nor one whose name says secret. The
    one rule for a server's environment, the bench's and omni_bench.env (plan/storable.py)."""
    return (name.startswith(ENV_PREFIXES) or name in ENV_NAMES) and name not in NOT_KEPT_ENV \
        and not any(word in name.upper() for word in SECRET_WORDS)


def redacted_url(text):
    # type: (str) -> str
    """``text`` with the credentials of every URL in it replaced: the user information
    (``user:password@``, a token as the user) and the query (signed URLs carry their
    signature there). One pass, linear in the text."""
    out, i, size = [], 0, len(text)
    while True:
        j = text.find("://", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        start = end = j + 3
        while end < size and text[end] not in _URL_END:
            end += 1
        authority = text[start:end]
        at = authority.rfind("@")
        out.append(text[i:start])
        out.append(SECRET_VALUE + authority[at:] if at >= 0 else authority)
        k = end
        while k < size and text[k] not in _URL_END[1:]:  # the path, to a query or an end
            k += 1
        out.append(text[end:k])
        i = k
        if k < size and text[k] == "?":
            i = k + 1
            while i < size and text[i] not in "# \t\r\n\"'<>":
                i += 1
            out.append("?" + SECRET_VALUE)


# Stored by allowlist (issue 61): of a llama-server's argv, a value is kept only after an option
# of llama.cpp's own table whose value is known safe (numbers, paths, devices, enumerations,
# tensor overrides: what the checks and the placement read); the value of any other option, an
# unknown one, or a word no option takes is replaced by NOT_KEPT. The table is that of
# `llama-server --help` of the llama.cpp that llama-cpp-python 0.3.36 vendors
# (tests/fixtures/captures/serve/llama-server-help_0.3.36.txt; a test derives it from there):
# free text (a prompt, a template, an alias, a JSON document, a header list) and the secrets
# (--api-key, --hf-token) are NOT_KEPT, as are the variables that set them.
NOT_KEPT = "(not kept)"
_FLAGS = (
    "--agent", "--backend-sampling", "--cache-idle-slots", "--cache-list", "--cache-prompt",
    "--check-tensors", "--completion-bash", "--cont-batching", "--context-shift",
    "--cors-credentials", "--cpu-moe", "--cpu-moe-draft", "--embd-gemma-default", "--embedding",
    "--embeddings", "--escape", "--fim-qwen-1.5b-default", "--fim-qwen-14b-spec",
    "--fim-qwen-30b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default",
    "--fim-qwen-7b-spec", "--gpt-oss-120b-default", "--gpt-oss-20b-default", "--help",
    "--ignore-eos", "--jinja", "--kv-offload", "--kv-unified", "--list-devices",
    "--log-disable", "--log-jsonl", "--log-prefix", "--log-timestamps", "--log-verbose",
    "--lora-init-without-apply", "--metrics", "--mmproj-auto", "--mmproj-offload",
    "--models-autoload", "--no-agent", "--no-cache-idle-slots", "--no-cache-prompt",
    "--no-cont-batching", "--no-context-shift", "--no-cors-credentials", "--no-escape",
    "--no-host", "--no-jinja", "--no-kv-offload", "--no-kv-unified", "--no-log-jsonl",
    "--no-log-prefix", "--no-log-timestamps", "--no-mmproj", "--no-mmproj-auto",
    "--no-mmproj-offload", "--no-models-autoload", "--no-op-offload", "--no-perf",
    "--no-prefill-assistant", "--no-reasoning-preserve", "--no-repack",
    "--no-skip-chat-parsing", "--no-slots", "--no-spec-draft-backend-sampling", "--no-ui",
    "--no-ui-mcp-proxy", "--no-warmup", "--no-webui", "--no-webui-mcp-proxy", "--offline",
    "--op-offload", "--perf", "--prefill-assistant", "--props", "--reasoning-preserve",
    "--repack", "--rerank", "--reranking", "--reuse-port", "--skip-chat-parsing", "--slots",
    "--spec-default", "--spec-draft-backend-sampling", "--spec-draft-cpu-moe", "--special",
    "--spm-infill", "--swa-full", "--ui", "--ui-mcp-proxy", "--usage", "--verbose", "--version",
    "--vision-gemma-12b-default", "--vision-gemma-4b-default", "--warmup", "--webui",
    "--webui-mcp-proxy", "-ag", "-bs", "-cb", "-cl", "-cmoe", "-cmoed", "-e", "-h", "-kvo",
    "-kvu", "-nkvo", "-no-ag", "-no-kvu", "-nocb", "-nr", "-sp", "-v"
)
_KEPT = (
    "--adaptive-decay", "--adaptive-target", "--api-key-file", "--api-prefix", "--batch-size",
    "--cache-ram", "--cache-reuse", "--cache-type-k", "--cache-type-k-draft", "--cache-type-v",
    "--cache-type-v-draft", "--chat-template-file", "--checkpoint-min-step", "--control-vector",
    "--control-vector-scaled", "--cors-methods", "--cors-origins", "--cpu-mask",
    "--cpu-mask-batch", "--cpu-mask-batch-draft", "--cpu-mask-draft", "--cpu-range",
    "--cpu-range-batch", "--cpu-range-draft", "--cpu-strict", "--cpu-strict-batch",
    "--cpu-strict-batch-draft", "--cpu-strict-draft", "--ctx-checkpoints", "--ctx-size",
    "--defrag-thold", "--device", "--device-draft", "--docker-repo", "--draft", "--draft-max",
    "--draft-min", "--draft-n", "--draft-n-min", "--draft-p-min", "--draft-p-split",
    "--dry-allowed-length", "--dry-base", "--dry-multiplier", "--dry-penalty-last-n",
    "--dynatemp-exp", "--dynatemp-range", "--embd-normalize", "--fit", "--fit-ctx",
    "--fit-target", "--flash-attn", "--frequency-penalty", "--gpu-layers", "--gpu-layers-draft",
    "--grammar-file", "--hf-file", "--hf-repo", "--hf-repo-draft", "--host",
    "--image-max-tokens", "--image-min-tokens", "--json-schema-file", "--keep",
    "--kv-unified-per-slot", "--lazy-mode", "--load-mode", "--log-colors", "--log-file",
    "--log-prompts-dir", "--log-verbosity", "--logit-bias", "--lookup-cache-dynamic",
    "--lookup-cache-static", "--lora", "--lora-scaled", "--main-gpu", "--mcp-servers-config",
    "--media-path", "--min-p", "--mirostat", "--mirostat-ent", "--mirostat-lr", "--mmproj",
    "--mmproj-device", "--mmproj-url", "--model", "--model-draft", "--model-url",
    "--models-dir", "--models-max", "--models-preset", "--mtmd-batch-max-tokens", "--n-cpu-ffn",
    "--n-cpu-moe", "--n-cpu-moe-draft", "--n-gpu-layers", "--n-gpu-layers-draft", "--n-predict",
    "--numa", "--override-kv", "--override-tensor", "--override-tensor-draft", "--parallel",
    "--path", "--poll", "--poll-batch", "--poll-batch-draft", "--poll-draft", "--pooling",
    "--port", "--predict", "--presence-penalty", "--prio", "--prio-batch", "--prio-batch-draft",
    "--prio-draft", "--reasoning", "--reasoning-budget", "--reasoning-effort",
    "--reasoning-format", "--repeat-last-n", "--repeat-penalty", "--rope-freq-base",
    "--rope-freq-scale", "--rope-scale", "--rope-scaling", "--rpc", "--sampler-seq",
    "--samplers", "--sampling-seq", "--seed", "--sleep-idle-seconds",
    "--slot-prompt-similarity", "--slot-save-path", "--spec-draft-cpu-mask",
    "--spec-draft-cpu-mask-batch", "--spec-draft-cpu-range", "--spec-draft-cpu-strict",
    "--spec-draft-cpu-strict-batch", "--spec-draft-device", "--spec-draft-hf",
    "--spec-draft-model", "--spec-draft-n-cpu-moe", "--spec-draft-n-max", "--spec-draft-n-min",
    "--spec-draft-ncmoe", "--spec-draft-ngl", "--spec-draft-override-tensor",
    "--spec-draft-p-min", "--spec-draft-p-split", "--spec-draft-poll",
    "--spec-draft-poll-batch", "--spec-draft-prio", "--spec-draft-prio-batch",
    "--spec-draft-threads", "--spec-draft-threads-batch", "--spec-draft-type-k",
    "--spec-draft-type-v", "--spec-ngram-map-k-min-hits", "--spec-ngram-map-k-size-m",
    "--spec-ngram-map-k-size-n", "--spec-ngram-map-k4v-min-hits", "--spec-ngram-map-k4v-size-m",
    "--spec-ngram-map-k4v-size-n", "--spec-ngram-min-hits", "--spec-ngram-mod-n-match",
    "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-min", "--spec-ngram-simple-min-hits",
    "--spec-ngram-simple-size-m", "--spec-ngram-simple-size-n", "--spec-ngram-size-m",
    "--spec-ngram-size-n", "--spec-synth-len", "--spec-synth-rates", "--spec-type",
    "--split-mode", "--sse-ping-interval", "--ssl-cert-file", "--ssl-key-file",
    "--swa-checkpoints", "--temp", "--temperature", "--tensor-split", "--threads",
    "--threads-batch", "--threads-batch-draft", "--threads-draft", "--threads-http",
    "--timeout", "--tools", "--tools-runtime", "--top-k", "--top-n-sigma", "--top-nsigma",
    "--top-p", "--typical", "--typical-p", "--ubatch-size", "--ui-config-file", "--verbosity",
    "--video-ffmpeg-dir", "--video-fps", "--video-timestamp-interval", "--webui-config-file",
    "--xtc-probability", "--xtc-threshold", "--yarn-attn-factor", "--yarn-beta-fast",
    "--yarn-beta-slow", "--yarn-ext-factor", "--yarn-orig-ctx", "-C", "-Cb", "-Cbd", "-Cd",
    "-Cr", "-Crb", "-Crd", "-b", "-c", "-cms", "-cram", "-ctk", "-ctkd", "-ctv", "-ctvd",
    "-ctxcp", "-dev", "-devd", "-dr", "-dt", "-fa", "-fit", "-fitc", "-fitt", "-hf", "-hfd",
    "-hff", "-hfr", "-hfrd", "-jf", "-l", "-lcd", "-lcs", "-lm", "-lv", "-lzm", "-m", "-md",
    "-mg", "-mm", "-mmdev", "-mmu", "-mu", "-n", "-ncffn", "-ncmoe", "-ncmoed", "-ngl", "-ngld",
    "-np", "-ot", "-otd", "-rea", "-s", "-sm", "-sps", "-t", "-tb", "-tbd", "-td", "-to", "-ts",
    "-ub"
)
_TWO_KEPT = ("--control-vector-layer-range",)
_NOT_KEPT = (
    "--alias", "--api-key", "--chat-template", "--chat-template-kwargs", "--cors-headers",
    "--dry-sequence-breaker", "--grammar", "--hf-token", "--json-schema", "--mcp-servers-json",
    "--reasoning-budget-message", "--reverse-prompt", "--tags", "--ui-config", "--webui-config",
    "-a", "-hft", "-j", "-r"
)
NOT_KEPT_ENV = (
    "HF_TOKEN",
    "LLAMA_API_KEY",
    "LLAMA_ARG_ALIAS",
    "LLAMA_ARG_CHAT_TEMPLATE",
    "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
    "LLAMA_ARG_CORS_HEADERS",
    "LLAMA_ARG_MCP_SERVERS_JSON",
    "LLAMA_ARG_TAGS",
    "LLAMA_ARG_THINK_BUDGET_MESSAGE",
    "LLAMA_ARG_UI_CONFIG",
)
_TAKES = dict([(n, 0) for n in _FLAGS] + [(n, 1) for n in _KEPT] + [(n, 2) for n in _TWO_KEPT]
              + [(n, -1) for n in _NOT_KEPT])
_NUMBER = "0123456789.-+"


def _kept(value):
    # type: (str) -> str
    return redacted_url(value[:ARG_CAP])


def _plain_number(value):
    # type: (str) -> bool
    return 0 < len(value) <= 24 and all(c in _NUMBER for c in value) and \
        any(c.isdigit() for c in value)


def redacted_argv(argv):
    # type: (list[str]) -> list[str]
    """A llama-server's argv as it may leave the host: the program, every option's name, and
    the values of the options llama.cpp's table says are safe (credentials of a URL in them
    replaced); any other value NOT_KEPT (a plain number is kept: numbers are safe anywhere).
    Each value is taken as llama.cpp takes it: the words after an option that takes them,
    whatever they begin with, or after an ``=``."""
    out, need, keep = list(argv[:1]), 0, False
    for arg in argv[1:256]:
        if need:
            out.append(_kept(arg) if keep else NOT_KEPT)  # a key of digits is a key
            need -= 1
            continue
        name, eq, value = arg.partition("=")
        takes = _TAKES.get(name)
        if not name.startswith("-") or takes is None and not eq:
            # a word no option of the table takes (an unknown option's value, a stray word);
            # an unknown option's name itself is kept where it looks like one
            out.append(arg[:ARG_CAP] if _option_like(arg) or _plain_number(arg) else NOT_KEPT)
            continue
        if eq:
            out.append(name + "=" + (_kept(value) if takes in (1, 2) or takes is None
                                     and _plain_number(value) else NOT_KEPT))
            continue
        out.append(name)
        need, keep = (abs(takes), takes > 0) if takes else (0, False)
    return out


def _option_like(arg):
    # type: (str) -> bool
    return 1 < len(arg) <= 64 and arg.startswith("-") and arg.lstrip("-")[:1].isalpha() and \
        all(c.isalnum() or c in "-_." for c in arg)


def option_value(argv, names, env, env_name):
    # type: (list[str] | tuple[str, ...], tuple[str, ...], dict[str, str], str) -> str | None
    """The value a process was given for an option: the last of ``names`` in its argv
    (``-t 4``, ``--threads=4``), else the variable ``env_name`` (llama.cpp's LLAMA_ARG_*),
    else None (its default)."""
    found = None
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in names:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return found if found is not None else env.get(env_name)
