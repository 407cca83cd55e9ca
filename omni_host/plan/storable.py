"""Stored by allowlist: the one function every expected-state value passes before it is stored
or printed (report.json, a bundle's manifest, ``--format json``, the HTML).

A denylist of secret-looking names was one spelling behind: ``omni_bench.env`` values
(``HF_TOKEN``, ``MY_PASSWORD``, a password inside ``LLAMA_ARG_MODEL_URL``) and the same given
by ``-e`` were stored verbatim, while the same names in a running server's environment were
redacted. Here a value is kept only where its key is known safe:

* numbers, booleans and nulls, anywhere;
* the text of an option the role's argument spec declares (``omni_*``, its nested options),
  unless the spec marks it ``no_log``; the credentials of any URL in it stripped;
* inside an environment mapping (``omni_bench.env``), only the variables that change
  llama.cpp's speed (``GGML_*``, ``LLAMA_*``, ``CUDA_*``, ``OMP_*``..., ``GLIBC_TUNABLES``:
  the host helper's own rule, ``remote/procfacts.py``), never a name that says secret.

Every other text (an undeclared variable, any other environment variable) is replaced by a
keyed digest, ``<digest 1a2b...>``: HMAC-SHA256 under a key private to this user, so two runs
can still say "changed since the baseline", and no one can test guesses against a report
mailed elsewhere (the key does not travel with it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from functools import lru_cache
from typing import Any

from omni_host.remote.procfacts import env_kept as env_safe
from omni_host.remote.procfacts import redacted_url
from omni_host.resources import user_dir

DIGEST_PREFIX = "<digest "


def is_digest(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(DIGEST_PREFIX) and value.endswith(">")


def storable(values: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """``values`` (variables of an expected state) as they may be stored: see the module."""
    return {name: _value(value, spec.get(name)) for name, value in values.items()}


def _value(value: Any, option: dict[str, Any] | None, env: bool = False) -> Any:
    """``value`` under the spec's ``option`` (None: undeclared); ``env``: a mapping of
    environment variables, whose every entry is judged by its name."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        if env:
            return {k: _value(v, None) if not isinstance(v, str)
                    else redacted_url(v) if env_safe(str(k)) else digest(v)
                    for k, v in value.items()}
        nested = (option or {}).get("options")
        if isinstance(nested, dict):  # a dict option with declared keys
            return {k: _value(v, nested.get(k) if isinstance(nested.get(k), dict) else None,
                              env=k == "env") for k, v in value.items()}
        return {k: _value(v, option, env=k == "env") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        element = option if (option or {}).get("elements") in (None, "str", "int", "float", "raw") \
            else {"options": (option or {}).get("options")}
        return [_value(v, element) for v in value]
    text = str(value)
    if option is None or option.get("no_log"):
        return digest(text)
    return redacted_url(text)


def storable_env(env: dict[str, Any]) -> dict[str, Any]:
    """An environment mapping (``omni_bench.env``) as it may be stored: see the module."""
    return dict(_value(env, None, env=True))


def storable_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A probe's argv as it may be stored (the bundle's manifest keeps what each probe ran):
    the bench helper's ``--env-json`` (omni_bench.env, given to llama-bench on the host) through
    ``storable_env``; the rest as it is (omni-host's own options and the policy's paths)."""
    import json

    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--env-json":
            try:
                env = json.loads(out[i + 1])
            except ValueError:
                env = None
            out[i + 1] = json.dumps(storable_env(env)) if isinstance(env, dict) else digest(out[i + 1])
    return tuple(out)


def digest(text: str) -> str:
    """A keyed digest of ``text``: the same text gives the same digest for this user, and
    nothing of the text can be recovered or guessed without the user's key."""
    mac = hmac.new(_key(), text.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return f"{DIGEST_PREFIX}{mac.hexdigest()[:16]}>"


@lru_cache(maxsize=1)
def _key() -> bytes:
    """This user's digest key (``$XDG_DATA_HOME/omni-host/digest.key``, 0600, made once);
    where it cannot be kept, one for this process only (digests then differ between runs:
    every such value reads as changed, never as the same)."""
    path = user_dir("data") / "omni-host" / "digest.key"
    try:
        key = path.read_bytes()
        if len(key) >= 32 and path.stat().st_uid == os.geteuid():
            return key
    except OSError:
        pass
    key = os.urandom(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
    except FileExistsError:  # another run made it first: its key is the one
        try:
            kept = path.read_bytes()
            return kept if len(kept) >= 32 else key
        except OSError:
            return key
    except OSError:
        pass
    return key
