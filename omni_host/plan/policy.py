"""The expected state of a host: its ``omni_*`` variables, validated once.

The schema is Ansible's: ``ansible_collections/omni/host/roles/omni/meta/argument_specs.yml``, the same spec
the playbooks validate with, applied here by Ansible's own ``ArgumentSpecValidator`` (types
coerced as Ansible coerces them: ``"false"`` is false, ``"1024"`` is 1024). The role's
``defaults/main.yml`` (the lessons' universal rules) lies beneath every host's variables, as
role defaults do in a play. The few rules a spec cannot state live here: absolute paths,
dotted versions, ranges, Debian package names, the five masked hwcaps.

The reference box of the lessons registry ships in ``inventory/group_vars/inference.yml``; it
is also the built-in policy when no inventory is given.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from omni_host.errors import InventoryError
from omni_host.plan.host_patterns import host_cost
from omni_host.resources import collection_path, data_path, read_yaml

ZEN5_HWCAPS = ("AVX512F", "AVX512VL", "AVX512BW", "AVX512CD", "AVX512DQ")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
ROLE = "roles/omni"
RENAMED = {"omni_base_packages": "omni_build_packages", "omni_numa_nodes": "omni_numa_nps"}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def masked_hwcaps(tunables: str | None) -> set[str]:
    """The hwcaps a GLIBC_TUNABLES value masks: ``glibc.cpu.hwcaps=-A,-B`` among ``:``-separated
    tunables."""
    masked: set[str] = set()
    for tunable in (tunables or "").split(":"):
        name, _, value = tunable.partition("=")
        if name.strip() == "glibc.cpu.hwcaps":
            masked |= {v.strip()[1:].upper() for v in value.split(",") if v.strip().startswith("-")}
    return masked


@dataclass(frozen=True)
class ExpectedGpu:
    model: str  # matched case-insensitively as a substring of the product name
    vram_gib: float


@dataclass(frozen=True)
class ExpectedModel:
    path: str
    loader: str  # "gguf" (streams, mmap) or "full" (loads every weight into RAM first)


@dataclass(frozen=True)
class DiskHeadroom:
    path: str
    min_free_gib: float


@dataclass(frozen=True)
class BenchSpec:
    """How ``omni-host bench`` runs the host's llama-bench (omni_bench)."""

    llama_bench: str
    model: str
    args: tuple[str, ...] = ()
    repetitions: int = 5
    tolerance_pct: float = 5.0
    budget_s: float = 900.0
    max_busy_pct: float = 10.0
    max_spread_pct: float = 10.0  # a baseline's repetitions spread at most this much
    max_other_cpus: float = 0.5  # other processes' CPU load during a baseline, at most (CPUs)
    env: tuple[tuple[str, str], ...] = ()  # llama-bench's environment as served (GLIBC_TUNABLES)
    # tolerance_pct given by test kind ({pp: 10, tg: 5}): a kind not named takes tolerance_pct
    tolerance_by_kind: tuple[tuple[str, float], ...] = ()

    def tolerance_for(self, kind: str) -> float:
        """The operator's tolerance (percent) for a test of this kind (pp, tg, pg)."""
        return dict(self.tolerance_by_kind).get(kind, self.tolerance_pct)


# llama-bench options omni-host sets itself (the model, JSON output, the repetitions), in
# every spelling llama-bench accepts, and those that fetch another model than omni_bench.model
# (a Hugging Face repository or a URL).
BENCH_OWN_ARGS = frozenset({"-m", "--model", "-o", "--output", "-oe", "--output-err",
                            "--output_err", "-r", "--repetitions", "-hf", "-hfr", "--hf-repo",
                            "--hf_repo", "-hff", "--hf-file", "--hf_file", "-mu", "--model-url",
                            "--model_url"})
TEST_KINDS = ("pp", "tg", "pg")  # llama-bench's prompt, generation and combined tests
MIN_VRAM_GIB, MAX_VRAM_GIB = 0.25, 4096.0  # a GPU's memory, as omni_gpus states it
MAX_BENCH_ARGS, MAX_BENCH_ARG_CHARS = 256, 4096  # 300,000 arguments ran 220 s into E2BIG


@dataclass(frozen=True)
class Policy:
    numa_nps: int | None = None  # NUMA nodes per socket (1 = NPS1)
    gpu_driver_min: str | None = None
    gpu_driver_recommended: str | None = None
    gpus: tuple[ExpectedGpu, ...] | None = None
    swap_size_mib: int | None = None
    swap_path: str | None = None
    swap_max_used_pct: float = 50.0
    zen5_tunables_containers: tuple[str, ...] = ()
    tunables_everywhere: bool = False
    llamacpp_binaries: tuple[str, ...] = ()
    models: tuple[ExpectedModel, ...] = ()
    disk_free: tuple[DiskHeadroom, ...] = ()
    build_packages: tuple[str, ...] = ()
    inference_containers: tuple[str, ...] | None = None
    bench: BenchSpec | None = None
    xid_window_h: float = 24.0
    serve_min_fraction: float = 0.5  # omni_serve.min_fraction
    serve_probe: bool = False  # omni_serve.probe
    # omni_serve.api_key: sent to the servers on the host's loopback only, never stored
    serve_api_key: str | None = field(default=None, repr=False)
    # omni_serve.user: the accounts whose servers may be sent that key (): the connecting user)
    serve_users: tuple[str, ...] = ()


_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")  # a POSIX account name, or a uid


def _serve_users(users: Any) -> tuple[str, ...]:
    """omni_serve.user (validated): one account or a list, as names."""
    return tuple(str(u) for u in ([users] if isinstance(users, (str, int)) else users or []))


def _key_text(key: str) -> str:
    """A key as it is sent: without the line end that ``ansible-vault encrypt_string`` keeps
    from a here-string (``<<< "$KEY"``) or a file; a key inside which a line breaks is not one."""
    return key[:-2] if key.endswith("\r\n") else key[:-1] if key.endswith("\n") else key


def _fail(origin: str, var: str, msg: str) -> InventoryError:
    return InventoryError(f"{origin}: {var}: {msg}")


@lru_cache(maxsize=1)
def spec() -> dict[str, Any]:
    """The ``omni_*`` options of the role's argument spec."""
    path = collection_path(ROLE) / "meta" / "argument_specs.yml"
    return dict(read_yaml(path)["argument_specs"]["main"]["options"])


@lru_cache(maxsize=1)
def check_readers() -> dict[str, frozenset[str]]:
    """Variable -> the checks that read it (the "Checks:" line of its description)."""
    found = {}
    for name, option in spec().items():
        lines = [str(d) for d in option.get("description", [])]
        listed = next((ln.split(":", 1)[1] for ln in lines if ln.startswith("Checks:")), "")
        found[name] = frozenset(c.strip() for c in listed.split(",") if c.strip())
    return found


@lru_cache(maxsize=1)
def defaults() -> dict[str, Any]:
    """The role defaults every host starts from (``defaults/main.yml``)."""
    path = collection_path(ROLE) / "defaults" / "main.yml"
    return dict(read_yaml(path) or {})


KNOWN_VARS = frozenset(spec())


# What ``omni-host init`` records from what it observes on any host (evaluate/observed.
# observed_vars; it records omni_zen5_tunables_containers only on Zen 5 with masked containers,
# so that one is not promised): an expectation outside it (models, binaries, disk floors) is
# the operator's to write.
INIT_RECORDS = frozenset({"omni_numa_nps", "omni_gpu_driver_min", "omni_gpus", "omni_swap_size_mib",
                          "omni_swap_path", "omni_build_packages"})


DEFAULTS_ORIGIN = f"default: ansible_collections/omni/host/{ROLE}/defaults/main.yml"
VAULTED = "<vaulted>"
VAULT_ORIGIN = "vault: "  # an origin so marked: the value came through vault


def pointer_part(key: str) -> str:
    """One key of a JSON pointer (RFC 6901): how a vaulted part's path is written in origins."""
    return key.replace("~", "~0").replace("/", "~1")


def unpointer_part(part: str) -> str:
    """``pointer_part`` read back."""
    return part.replace("~1", "/").replace("~0", "~")


@dataclass(frozen=True)
class ExpectedState:
    """The resolved ``omni_*`` values a host is judged under, and where each came from (a
    file and line, a role default). Bundles and reports record it, so a verdict can always be
    traced to the policy it was given under."""

    values: dict[str, Any]
    origins: dict[str, str]

    def vaulted(self) -> list[list[str]]:
        """The paths (variable, then keys or indices) of every value that came through vault:
        a whole variable (its origin says ``vault:``) or a part of one (an origin keyed by its
        JSON pointer, ``omni_bench/env/HF_TOKEN``)."""
        paths = []
        for key, origin in self.origins.items():
            name, _, rest = key.partition("/")
            if origin.startswith(VAULT_ORIGIN) and name in self.values:
                paths.append([name] + [unpointer_part(p) for p in rest.split("/")]
                             if rest else [name])
        serve = self.values.get("omni_serve")
        if isinstance(serve, dict) and serve.get("api_key") and ["omni_serve"] not in paths:
            paths.append(["omni_serve", "api_key"])  # a key is a secret, vaulted or not
        return paths

    def to_dict(self) -> dict[str, Any]:
        """The stored form: every value through the allowlist (``storable``: a value of a key
        not known safe becomes a keyed digest), and a vaulted value, wherever it sits, is
        recorded as vaulted, never in clear."""
        from omni_host.plan.storable import storable

        values = storable(self.values, spec())
        for path in self.vaulted():
            values = _replaced(values, path)
        return {"values": values, "origins": self.origins}

    @classmethod
    def from_dict(cls, doc: Any) -> ExpectedState | None:
        """A recorded state; its vaulted values are unknown (judging needs the inventory)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("values"), dict):
            return None
        origins = doc.get("origins")
        origins = origins if isinstance(origins, dict) else {}
        from omni_host.plan.storable import is_digest

        values = {k: v for k, v in doc["values"].items() if v != VAULTED and not is_digest(v)}
        return cls(values, {str(k): str(v) for k, v in origins.items()
                            if str(k).partition("/")[0] in values})

    def secrets(self) -> tuple[str, ...]:
        """The clear text of vaulted values: scrubbed from everything stored or shown."""
        found: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    walk(item)
            elif value is not None and not isinstance(value, bool) and len(str(value)) >= 3:
                found.extend({str(value), _key_text(str(value))})  # as sent, too

        for path in self.vaulted():
            walk(_at(self.values, path))
        return tuple(sorted(set(found), key=len, reverse=True))

    @property
    def empty(self) -> bool:
        """No value beyond the role defaults: nothing describes this host."""
        return all(origin == DEFAULTS_ORIGIN for origin in self.origins.values())


def expected_state(values: dict[str, Any], origins: dict[str, str]) -> ExpectedState:
    """The host's ``omni_*`` values over the role defaults, each with its origin (and the
    origin of each vaulted part of a value, by its path)."""
    resolved = resolve_vars(values)
    parts = {k: o for k, o in origins.items()
             if "/" in k and k.partition("/")[0] in values and o.startswith(VAULT_ORIGIN)}
    return ExpectedState(resolved, {k: origins.get(k, "inventory") if k in values
                                    else DEFAULTS_ORIGIN for k in resolved} | parts)


def _at(value: Any, path: list[str]) -> Any:
    """The part of ``value`` at ``path`` (keys, or indices as text), None where it is not."""
    for part in path:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _replaced(value: Any, path: list[str]) -> Any:
    """A copy of ``value`` with the part at ``path`` recorded as vaulted."""
    if not path:
        return VAULTED
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and head in value:
        return {**value, head: _replaced(value[head], rest)}
    if isinstance(value, list) and head.isdigit() and int(head) < len(value):
        return [_replaced(v, rest) if i == int(head) else v for i, v in enumerate(value)]
    return value


def resolve_vars(values: dict[str, Any]) -> dict[str, Any]:
    """The host's ``omni_*`` variables over the role defaults (what a play sees)."""
    return {**defaults(), **{k: v for k, v in values.items() if k.startswith("omni_")}}


@lru_cache(maxsize=1)
def _spec_digest() -> str:
    path = collection_path(ROLE) / "meta" / "argument_specs.yml"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _memo_key(values: dict[str, Any]) -> str | None:
    """The key of these values under this spec, where JSON keeps them as they are (a memo
    entry must give back exactly what the validator would)."""
    try:
        text = json.dumps(values, sort_keys=True)
    except (TypeError, ValueError):
        return None
    if json.loads(text) != values:
        return None
    return hashlib.sha256(f"{_spec_digest()}\n{text}".encode()).hexdigest()[:32]


def _validated(values: dict[str, Any], origin: str,
               memo: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values as Ansible's ArgumentSpecValidator coerces them, or the error. ``memo``
    (kept by the inventory cache) remembers values that validated: a repeated audit of an
    unchanged inventory does not import ansible-core's validator (70 ms) again."""
    unknown = sorted(k for k in values if k not in KNOWN_VARS)
    if unknown:
        hints = [f" ({k} is now {RENAMED[k]})" for k in unknown if k in RENAMED]
        raise InventoryError(f"{origin}: unknown variable(s) {', '.join(unknown)}"
                             f"{''.join(hints)} (see docs/inventory.md)")
    key = _memo_key(values) if memo is not None else None
    if memo is not None and key in memo:
        return dict(memo[key])
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    result = ArgumentSpecValidator(spec()).validate(values)
    if result.error_messages:
        raise InventoryError(f"{origin}: {result.error_messages[0]}")
    validated = {k: v for k, v in result.validated_parameters.items() if v is not None}
    if memo is not None and key is not None and _memo_key(validated) is not None:
        memo[key] = validated
    return validated


def _minimum(origin: str, values: dict[str, Any], var: str, low: float) -> None:
    value = values.get(var)
    if value is not None and value < low:
        raise _fail(origin, var, f"must be >= {low:g}, got {value!r}")


def _absolute(origin: str, var: str, path: str | None) -> None:
    if path is not None and not path.startswith("/"):
        raise _fail(origin, var, f"must be an absolute path, got {path!r}")
    if path is not None and any(ord(c) < 32 or ord(c) == 127 for c in path):
        # a newline in one path split the probe's per-path output and errored the whole check
        raise _fail(origin, var, f"a path holds a control character: {path!r}")


def _rules(origin: str, v: dict[str, Any]) -> None:
    """What the spec cannot say."""
    _minimum(origin, v, "omni_numa_nps", 1)
    _minimum(origin, v, "omni_swap_size_mib", 0)
    _minimum(origin, v, "omni_xid_window_h", 0)
    pct = v.get("omni_swap_max_used_pct")
    if pct is not None and not 0 < pct <= 100:
        raise _fail(origin, "omni_swap_max_used_pct", f"must be in (0, 100], got {pct!r}")
    for var in ("omni_gpu_driver_min", "omni_gpu_driver_recommended"):
        if var in v and not _VERSION.match(v[var]):
            raise _fail(origin, var, f"must be a dotted version like 580.126.09, got {v[var]!r}")
    for var in ("omni_swap_path", "omni_compose_file"):
        _absolute(origin, var, v.get(var))
    for i, path in enumerate(v.get("omni_llamacpp_binaries") or ()):
        _absolute(origin, f"omni_llamacpp_binaries[{i}]", path)
    for var in ("omni_models", "omni_disk_free"):
        for i, item in enumerate(v.get(var) or ()):
            _absolute(origin, f"{var}[{i}].path", item["path"])
    for i, gpu in enumerate(v.get("omni_gpus") or ()):
        # a GPU's memory is a real size: NaN, inf or 1e-300 would pass a "> 0" and crash
        # every split computed from it
        if not (math.isfinite(gpu["vram_gib"]) and MIN_VRAM_GIB <= gpu["vram_gib"] <= MAX_VRAM_GIB):
            raise _fail(origin, f"omni_gpus[{i}].vram_gib", f"must be a GPU's memory in GiB, "
                        f"{MIN_VRAM_GIB:g} to {MAX_VRAM_GIB:g}, got {gpu['vram_gib']!r}")
    for i, disk in enumerate(v.get("omni_disk_free") or ()):
        if not (math.isfinite(disk["min_free_gib"]) and disk["min_free_gib"] > 0):
            raise _fail(origin, f"omni_disk_free[{i}].min_free_gib",
                        f"must be > 0, got {disk['min_free_gib']!r}")
    bad = [p for p in v.get("omni_build_packages") or () if not _PACKAGE.match(p)]
    if bad:
        raise _fail(origin, "omni_build_packages", f"not a Debian package name: {bad[0]!r}")
    for var in ("omni_zen5_tunables_containers", "omni_inference_containers"):
        if any(not c for c in v.get(var) or ()):
            raise _fail(origin, var, "container names must not be empty")
    _bench_rules(origin, v.get("omni_bench"))
    key = (v.get("omni_serve") or {}).get("api_key")
    sent = _key_text(key) if isinstance(key, str) else ""
    if key is not None and (not sent or "\n" in sent or "\r" in sent):
        raise _fail(origin, "omni_serve.api_key", "must be one line of text (vault welcome)")
    users = (v.get("omni_serve") or {}).get("user")
    listed = [users] if isinstance(users, (str, int)) else users if isinstance(users, list) else None
    if users is not None and (listed is None or not all(
            isinstance(u, (str, int)) and _ACCOUNT.fullmatch(str(u)) for u in listed)):
        raise _fail(origin, "omni_serve.user", "must be an account name or a list of them")
    fraction = (v.get("omni_serve") or {}).get("min_fraction", 0.5)
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise _fail(origin, "omni_serve.min_fraction", f"must be a number in (0, 1], got {fraction!r}")
    tunables = v.get("omni_glibc_tunables")
    if tunables is not None:
        missing = [cap for cap in ZEN5_HWCAPS if cap not in masked_hwcaps(tunables)]
        if missing:
            raise _fail(origin, "omni_glibc_tunables", f"must mask all five AVX-512 hwcaps "
                        f"(F-010: two were not enough); {','.join(missing)} missing")


def _bench_rules(origin: str, bench: dict[str, Any] | None) -> None:
    if bench is None:
        return
    for key in ("llama_bench", "model"):
        _absolute(origin, f"omni_bench.{key}", bench[key])
    args = bench.get("args") or ()
    if len(args) > MAX_BENCH_ARGS or any(len(str(a)) > MAX_BENCH_ARG_CHARS for a in args):
        raise _fail(origin, "omni_bench.args", f"at most {MAX_BENCH_ARGS} arguments of "
                    f"{MAX_BENCH_ARG_CHARS} characters each (got {len(args)})")
    for i, arg in enumerate(args[:-1]):
        if arg in ("-ot", "--override-tensor"):
            for item in str(args[i + 1]).replace(";", ",").split(","):
                costly = host_cost(item.rpartition("=")[0])
                if costly:
                    raise _fail(origin, "omni_bench.args", f"-ot pattern {item[:80]!r} {costly}: "
                                "the host's llama.cpp would hang on it; write it with fewer")
    own = sorted(a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in BENCH_OWN_ARGS)
    if own:
        raise _fail(origin, "omni_bench.args", f"{own[0]} is set by omni-host (-m from model, "
                    "-o json, -r from repetitions; no other model is fetched)")
    tolerance = _number_text(bench.get("tolerance_pct"))
    if isinstance(tolerance, dict):
        for kind, value in tolerance.items():
            if kind not in TEST_KINDS:
                raise _fail(origin, "omni_bench.tolerance_pct", f"{kind!r} is not a test kind "
                            f"({', '.join(TEST_KINDS)}: prompt, generation, both)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not (math.isfinite(value) and 0 <= value <= 100):
                raise _fail(origin, f"omni_bench.tolerance_pct.{kind}",
                            f"must be a number from 0 to 100, got {value!r}")
    elif tolerance is not None and (isinstance(tolerance, bool) or
                                    not isinstance(tolerance, (int, float))):
        raise _fail(origin, "omni_bench.tolerance_pct", "must be a number (percent) or a "
                    f"mapping by test kind ({{pp: 10, tg: 5}}), got {tolerance!r}")
    for key, low in (("repetitions", 2), ("budget_s", 1), ("tolerance_pct", 0),
                     ("max_busy_pct", 0), ("max_spread_pct", 0), ("max_other_cpus", 0)):
        if key == "tolerance_pct" and isinstance(tolerance, dict):
            continue
        if key == "tolerance_pct" and key in bench:
            bench = {**bench, key: float(tolerance)}
        if key in bench and not (math.isfinite(bench[key]) and bench[key] >= low):
            raise _fail(origin, f"omni_bench.{key}", f"must be a number >= {low}, "
                        f"got {bench[key]!r}")
    for name in bench.get("env") or {}:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise _fail(origin, "omni_bench.env", f"{name!r} is not an environment variable name")


def _number_text(value: Any) -> Any:
    """A number written as text (an INI inventory's values are) as the number; else as is."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _bench_spec(bench: dict[str, Any] | None) -> BenchSpec | None:
    if bench is None:
        return None
    tolerance = _number_text(bench.get("tolerance_pct", 5))
    by_kind = tuple(sorted((str(k), float(v)) for k, v in tolerance.items())) \
        if isinstance(tolerance, dict) else ()
    return BenchSpec(bench["llama_bench"], bench["model"], tuple(bench.get("args") or ()),
                     int(bench.get("repetitions", 5)),
                     5.0 if isinstance(tolerance, dict) else float(tolerance),
                     float(bench.get("budget_s", 900)), float(bench.get("max_busy_pct", 10)),
                     float(bench.get("max_spread_pct", 10)), float(bench.get("max_other_cpus", 0.5)),
                     tuple(sorted((str(k), str(v)) for k, v in (bench.get("env") or {}).items())),
                     by_kind)


def policy_from_vars(values: dict[str, Any], origin: str,
                     memo: dict[str, Any] | None = None) -> Policy:
    """Validate one host's ``omni_*`` variables (over the role defaults); an unknown
    ``omni_`` name is an error (a typo would otherwise silently turn a check off)."""
    v = _validated(resolve_vars(values), origin, memo)
    _rules(origin, v)
    return Policy(
        numa_nps=v.get("omni_numa_nps"),
        gpu_driver_min=v.get("omni_gpu_driver_min"),
        gpu_driver_recommended=v.get("omni_gpu_driver_recommended"),
        gpus=tuple(ExpectedGpu(g["model"], float(g["vram_gib"])) for g in v["omni_gpus"])
        if "omni_gpus" in v else None,
        swap_size_mib=v.get("omni_swap_size_mib"),
        swap_path=v.get("omni_swap_path"),
        swap_max_used_pct=float(v.get("omni_swap_max_used_pct", 50)),
        zen5_tunables_containers=tuple(v.get("omni_zen5_tunables_containers") or ()),
        tunables_everywhere=bool(v.get("omni_tunables_everywhere", False)),
        llamacpp_binaries=tuple(v.get("omni_llamacpp_binaries") or ()),
        models=tuple(ExpectedModel(m["path"], m["loader"]) for m in v.get("omni_models") or ()),
        disk_free=tuple(DiskHeadroom(d["path"], float(d["min_free_gib"]))
                        for d in v.get("omni_disk_free") or ()),
        build_packages=tuple(v.get("omni_build_packages") or ()),
        inference_containers=tuple(v["omni_inference_containers"])
        if "omni_inference_containers" in v else None,
        bench=_bench_spec(v.get("omni_bench")),
        xid_window_h=float(v.get("omni_xid_window_h", 24)),
        serve_min_fraction=float((v.get("omni_serve") or {}).get("min_fraction", 0.5)),
        serve_probe=bool((v.get("omni_serve") or {}).get("probe", False)),
        serve_api_key=_key_text(str((v.get("omni_serve") or {}).get("api_key") or "")) or None,
        serve_users=_serve_users((v.get("omni_serve") or {}).get("user")),
    )


@lru_cache(maxsize=1)
def reference_vars() -> dict[str, Any]:
    """The reference host's variables (the lessons' 9995WX box), the built-in default."""
    path = data_path("inventory") / "group_vars" / "inference.yml"
    return dict(read_yaml(path))
