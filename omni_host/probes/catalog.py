"""Every probe: an id, the command the collector runs, and the pure parser of its output.

The commands are constants: nothing from an inventory is spliced into them. The Python
helpers (pynvml, psutil, py-cpuinfo) stand in for the tool they mirror when it fails, so a
healthy host pays for no extra interpreter. ``sh -c`` is used
only where a glob or a pipeline is needed, with fixed text. ``{python}`` is the interpreter that
runs the collector on the host, so psutil, pynvml and py-cpuinfo are found where it finds them.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_host.errors import ParseError
from omni_host.plan.knobs import KNOBS, audit_reads
from omni_host.plan.policy import BenchSpec, Policy
from omni_host.probes.parsers import excerpt as _excerpt
from omni_host.remote.serverload import LOAD_S
from omni_host.resources import resources_text

if TYPE_CHECKING:
    from omni_host.model import CommandResult, ProbeResult


class _Parser:
    """The parser ``name`` of ``probes.parsers.<module>``, imported at its first call: the
    collector's program is sent before any parser is imported, so a bench's probes start that
    much sooner (issue 44: the parsers were 70 ms of imports on the lent H100 before the
    collection could start)."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def resolve(self) -> Callable[[str], Any]:
        found: Callable[[str], Any] = getattr(
            importlib.import_module(f"omni_host.probes.parsers.{self.module}"), self.name)
        return found

    def __call__(self, text: str) -> Any:
        return self.resolve()(text)

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


# Helpers run with the host's python3; exit 3 means the module is not importable there.
_IMPORT = ("import json,sys\ntry:\n import {mod}\n"
           "except ImportError as e:\n sys.stderr.write('%s\\n' % e); sys.exit(3)\n")

PSUTIL_CODE = _IMPORT.format(mod="psutil") + (
    "v=psutil.virtual_memory(); s=psutil.swap_memory()\n"
    "print(json.dumps({'mem_total': v.total, 'mem_available': v.available,"
    " 'swap_total': s.total, 'swap_free': s.free}))\n"
)

PYNVML_CODE = _IMPORT.format(mod="pynvml") + """
def q(f, *a):
    try:
        return f(*a)
    except pynvml.NVMLError:
        return None
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as e:
    sys.stderr.write('NVML: %s\\n' % e); sys.exit(4)
def s(v):
    return v.decode() if isinstance(v, bytes) else v
gpus = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pci = q(pynvml.nvmlDeviceGetPciInfo, h)
    pm = q(pynvml.nvmlDeviceGetPersistenceMode, h)
    gpus.append({'index': i, 'name': s(pynvml.nvmlDeviceGetName(h)),
        'uuid': s(q(pynvml.nvmlDeviceGetUUID, h)),
        'pci_bus_id': s(pci.busId) if pci else None,
        'memory_total_bytes': pynvml.nvmlDeviceGetMemoryInfo(h).total,
        'persistence_mode': None if pm is None else pm == 1,
        'pcie_gen_current': q(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
        'pcie_gen_max': q(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
        'pcie_width_current': q(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
        'pcie_width_max': q(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h)})
print(json.dumps({'driver_version': s(pynvml.nvmlSystemGetDriverVersion()),
    'cuda_driver_version': q(pynvml.nvmlSystemGetCudaDriverVersion), 'gpus': gpus}))
"""

PYCPUINFO_CODE = _IMPORT.format(mod="cpuinfo") + "print(json.dumps(cpuinfo.get_cpu_info()))\n"

SYSFS_NODES = ("grep -H . /sys/devices/system/node/node*/cpulist; "
               "grep -H MemTotal /sys/devices/system/node/node*/meminfo; "
               "grep -H . /sys/devices/system/node/node*/distance")

CUDA_PATH = 'PATH="$PATH:/usr/local/cuda/bin"; '
NVCC = CUDA_PATH + "exec nvcc --version"
GPU_QUERY_FIELDS = ("index,name,compute_cap,pcie.link.gen.current,pcie.link.gen.max,"
                    "pcie.link.width.current,pcie.link.width.max,persistence_mode,"
                    "ecc.errors.uncorrected.volatile.total")
# dmesg is often root-only: say so (exit 126) rather than report no Xid.
# The uptime first: dmesg's stamps are seconds since boot, so an Xid's age is uptime - stamp.
# One line per L3 cache domain (a CCD on AMD Zen, a socket on most Intel parts).
L3_DOMAINS = "cat /sys/devices/system/cpu/cpu*/cache/index3/shared_cpu_list | sort -u"
XID = ('log=$(dmesg 2>&1) || { echo "$log" | tail -1 >&2; exit 126; }; '
       'read up _ < /proc/uptime; echo "uptime $up"; '
       'printf "%s\\n" "$log" | grep -E "NVRM: Xid" | tail -50; exit 0')
# Per-file loops: each file's output follows a "== <path>" line; paths arrive as "$@".
CUOBJDUMP = CUDA_PATH + ('command -v cuobjdump >/dev/null || exit 127; '
                         'for f in "$@"; do echo "== $f"; cuobjdump --list-elf "$f" 2>&1; done; exit 0')
READELF = ('command -v readelf >/dev/null || exit 127; '
           'for f in "$@"; do echo "== $f"; readelf -d --dyn-syms -W "$f" 2>&1; done; exit 0')
DF = 'for p in "$@"; do echo "== $p"; df -P -k "$p" 2>&1; done; exit 0'
# One dpkg-query for every package (a process per package cost ~3 ms of host CPU each); the
# header line tells this form from the per-package loop of older bundles.
DPKG = ('command -v dpkg-query >/dev/null || exit 127; echo "== dpkg-query -W"; '
        'dpkg-query -W -f \'${Package} ${binary:Package} ${db:Status-Status}\\n\' -- "$@" 2>/dev/null; '
        'exit 0')



@dataclass(frozen=True)
class Probe:
    id: str
    argv: tuple[str, ...]
    parse: Callable[[str], Any]
    timeout_s: float = 10.0
    fallback_for: str | None = None
    redact: str | None = None
    label: str | None = None  # how evidence names a scripted probe
    # The collector may do it in-process: a stdlib-only Python helper, or ``cat FILE`` read
    # directly (no process to start on the host).
    inline: bool = False
    requires: tuple[str, str] | None = None  # (path, why): not worth running without that path
    requires_entries: int = 0  # instead: the directory, where it exists, holds this many
    last: bool = False  # runs alone, after every other probe (a benchmark)
    # with ``last``: starts with the others, and waits for them on its stdin ("go") before its
    # measurement (its own reads before it overlap theirs)
    prepare: bool = False
    # Given to an inline helper beside its argv (never in it: argv is recorded in the bundle
    # and shown in evidence): the API key the servers are asked with.
    secret: str | None = field(default=None, repr=False, compare=False)

    @property
    def command(self) -> str:
        """The command as a person would type it, for evidence lines."""
        if self.label:
            return self.label
        if self.argv[:2] == ("sh", "-c"):
            return self.argv[2] + (f" ({shlex.join(self.argv[4:])})" if len(self.argv) > 4 else "")
        if self.argv[0] == "{python}":
            return f"python3 -c <{self.id} helper>"
        return shlex.join(self.argv)

    def plan_entry(self, timeout_s: float | None = None) -> dict[str, Any]:
        # --probe-timeout bounds the state probes; a benchmark keeps its own budget
        limit = self.timeout_s if self.last else (timeout_s or self.timeout_s)
        entry: dict[str, Any] = {"id": self.id, "argv": list(self.argv), "timeout_s": limit}
        if self.fallback_for:
            entry["fallback_for"] = self.fallback_for
        if self.redact:
            entry["redact"] = self.redact
        if self.inline:
            entry["inline"] = True
        if self.requires:
            entry["requires"] = {"path": self.requires[0], "why": self.requires[1]}
            if self.requires_entries:
                entry["requires"]["entries"] = self.requires_entries
        if self.last:
            entry["last"] = True
        if self.prepare:
            entry["prepare"] = True
        if self.secret:
            entry["secret"] = self.secret
        return entry


_DOCKER_API = resources_text("remote/docker_api.py")


def helper_code(name: str, shared: tuple[str, ...] = ("procfacts",)) -> str:
    """A helper's program as the host runs it: the shared modules it uses, then the helper."""
    return "\n\n".join(resources_text(f"remote/{part}.py") for part in (*shared, name))
# The GPUs through one NVML session, in nvidia-smi's forms (remote/nvml.py): where it answers,
# the four nvidia-smi runs below are not needed (each starts NVML again: 0.07 CPU-s for -q -x
# on an H100). A subprocess, not inline: a driver library that crashes takes only this reader,
# and nvidia-smi then runs in its place.
_NVML_HELPER = helper_code("nvml", ("nvml_session",))
NVML_LABEL = "NVML (libnvidia-ml): what nvidia-smi -q -x, --query-gpu and topo read"
NVML_READS = ("gpu.nvidia-smi", "gpu.query", "gpu.topo", "gpu.p2p")  # its sections' probes
# NVML answers nothing without the kernel driver: then the fallback costs a Python start for
# nothing (nvidia-smi itself still runs: its "couldn't communicate" message is evidence).
NVIDIA_DRIVER = ("/proc/driver/nvidia/version", "no NVIDIA kernel driver loaded")
# A topology needs two GPUs: on a one-GPU host the two topo runs cost 0.12 s of the host's CPU
# for nothing (measured on the lent H100).
TWO_GPUS = ("/proc/driver/nvidia/gpus", "fewer than two GPUs: no GPU topology to read")

PROBES: tuple[Probe, ...] = (
    Probe("numa.numactl", ("numactl", "--hardware"), _Parser("numa", "parse_numactl_hardware")),
    Probe("numa.sysfs", ("sh", "-c", SYSFS_NODES), _Parser("numa", "parse_sysfs_nodes"),
          fallback_for="numa.numactl"),
    Probe("gpu.nvml", ("{python}", "-I", "-S", "-c", _NVML_HELPER), _Parser("nvidia", "parse_nvml"),
          timeout_s=30, requires=NVIDIA_DRIVER, label=NVML_LABEL),
    Probe("gpu.nvidia-smi", ("nvidia-smi", "-q", "-x"), _Parser("nvidia", "parse_nvidia_smi_xml"),
          timeout_s=30, fallback_for="gpu.nvml"),
    Probe("gpu.topo", ("nvidia-smi", "topo", "-m"), _Parser("nvidia", "parse_topo_matrix"),
          timeout_s=30, requires=TWO_GPUS, requires_entries=2, fallback_for="gpu.nvml"),
    Probe("gpu.p2p", ("nvidia-smi", "topo", "-p2p", "r"), _Parser("nvidia", "parse_topo_matrix"),
          timeout_s=30, requires=TWO_GPUS, requires_entries=2, fallback_for="gpu.nvml"),
    Probe("gpu.pynvml", ("{python}", "-c", PYNVML_CODE), _Parser("nvidia", "parse_pynvml"), timeout_s=30,
          fallback_for="gpu.nvidia-smi", requires=NVIDIA_DRIVER),
    Probe("cpu.cpuinfo", ("cat", "/proc/cpuinfo"), _Parser("cpu", "parse_cpuinfo"), inline=True),
    Probe("cpu.pycpuinfo", ("{python}", "-c", PYCPUINFO_CODE), _Parser("cpu", "parse_pycpuinfo"),
          timeout_s=20, fallback_for="cpu.cpuinfo"),
    Probe("mem.swaps", ("cat", "/proc/swaps"), _Parser("memory", "parse_proc_swaps"), inline=True),
    Probe("mem.meminfo", ("cat", "/proc/meminfo"), _Parser("memory", "parse_meminfo"), inline=True),
    Probe("mem.psutil", ("{python}", "-c", PSUTIL_CODE), _Parser("memory", "parse_psutil"),
          fallback_for="mem.meminfo"),
    Probe("fs.fstab", ("cat", "/etc/fstab"), _Parser("memory", "parse_fstab"), inline=True),
    Probe("mem.dimms", ("dmidecode", "-t", "4", "-t", "17"), _Parser("memory", "parse_dmidecode_memory"),
          timeout_s=20),
    Probe("cpu.l3", ("sh", "-c", L3_DOMAINS), _Parser("memory", "parse_l3_domains"),
          label="sort -u /sys/devices/system/cpu/cpu*/cache/index3/shared_cpu_list"),
    Probe("docker.containers", ("{python}", "-c", _DOCKER_API, "containers"),
          _Parser("docker", "parse_docker_inspect"), timeout_s=20, redact="docker-inspect", inline=True,
          label="docker inspect $(docker ps -q) (Docker API on its socket)"),
    Probe("system.kernel", ("uname", "-r"), _Parser("system", "parse_uname_r")),
    Probe("gpu.query", ("nvidia-smi", f"--query-gpu={GPU_QUERY_FIELDS}", "--format=csv,noheader"),
          _Parser("build", "parse_gpu_query"), timeout_s=30, fallback_for="gpu.nvml",
          label="nvidia-smi --query-gpu=compute_cap,pcie.link.*,persistence_mode,ecc.*"),
    Probe("gpu.xid", ("sh", "-c", XID), _Parser("host", "parse_xid"), label="dmesg | grep 'NVRM: Xid'"),
    Probe("cuda.nvcc", ("sh", "-c", NVCC), _Parser("build", "parse_nvcc_version"), label="nvcc --version"),
    Probe("docker.networks", ("{python}", "-c", _DOCKER_API, "networks"),
          _Parser("docker", "parse_docker_networks"), timeout_s=20, inline=True,
          label="docker network ls (Docker API on its socket)"),
    Probe("host.knobs", ("{python}", "-c", helper_code("knobs", ()), json.dumps(audit_reads())),
          _Parser("knobs", "parse_knobs"),
          inline=True, label="kernel and CPU knobs (THP, NUMA balancing, cpufreq, SMT, ASPM: "
                             "sysfs and /proc)"),
    Probe("serve.servers", ("{python}", "-c", helper_code("serve")), _Parser("serve", "parse_servers"),
          timeout_s=20, inline=True,
          label="llama-server processes (/proc), their /metrics and /props on the loopback"),
)

# Probes whose arguments come from the policy (paths, package names). They are appended to
# the plan only when the policy names something for them; the values travel as argv, after
# a fixed script, so no inventory value is ever parsed by a shell.
_MODELS_HELPER = helper_code("gguf_models", ("gguf",))
DYNAMIC: tuple[Probe, ...] = (
    Probe("llamacpp.cuobjdump", ("sh", "-c", CUOBJDUMP, "cuobjdump"), _Parser("build", "parse_cuobjdump"),
          timeout_s=60, label="cuobjdump --list-elf <omni_llamacpp_binaries>"),
    Probe("llamacpp.readelf", ("sh", "-c", READELF, "readelf"), _Parser("build", "parse_readelf"),
          timeout_s=30, label="readelf -d --dyn-syms <omni_llamacpp_binaries>"),
    Probe("model.files", ("{python}", "-c", _MODELS_HELPER), _Parser("host", "parse_models"), timeout_s=120,
          label="python3 gguf_models helper <omni_models> (headers only)"),
    Probe("disk.df", ("sh", "-c", DF, "df"), _Parser("host", "parse_df"),
          label="df -P -k <omni_disk_free paths>"),
    Probe("packages.dpkg", ("sh", "-c", DPKG, "dpkg"), _Parser("host", "parse_dpkg"),
          label="dpkg-query -W <omni_build_packages>"),
)

# The benchmark: only `omni-host bench` adds it to a plan, and it runs last, alone (see the
# helper's docstring). Its deadline is the policy's budget plus a minute for the gate, the
# hashes and the samples around the run. The helper's source is read only then: an audit's
# start-up never pays for it.
# -S: the helper is standard library only; a GPU box's site-packages (.pth hooks) cost its
# start-up 70 ms on the lent H100, every bench.
BENCH = Probe("bench.llama", ("{python}", "-S", "-c"), _Parser("bench_run", "parse_bench_run"),
              label="llama-bench -o json <omni_bench> (bench helper: idle gate, context)",
              last=True, prepare=True)

# Where a plan keeps its proof's rounds in the plan's own bundle (the proof runs in a second
# round trip: what to run is known only once the plan is judged; the report is judged once).
BENCH_PROOF = dataclasses.replace(BENCH, id="bench.proof",
                                  label="llama-bench -o json per candidate, in rounds (the proof)")

PROBES_BY_ID = {p.id: p for p in (*PROBES, *DYNAMIC)}  # an audit's; a run's checks read BENCH


def load_parsers() -> None:
    """Import every probe's parser now: what evaluates a bundle does so on import, while the
    host's probes (started before it) run."""
    for probe in (*PROBES_BY_ID.values(), BENCH):
        if isinstance(probe.parse, _Parser):
            probe.parse.resolve()


# the knobs whose file a bench reads into its context (a change of one is named, and --why
# sets it back): each knob the A/B writes, by name
KNOB_FILES = {k.name: k.path for k in KNOBS.values() if k.path is not None}


def bench_probe(spec: BenchSpec, *, force: bool = False, wait_s: float = 0.0) -> Probe:
    """The bench probe for a policy's omni_bench: its values travel as argv; ``wait_s``: how
    long the helper waits for another bench to release the host's bench lock (--wait)."""
    argv = ("--llama-bench", spec.llama_bench, "--model", spec.model,
            "--repetitions", str(spec.repetitions), "--budget-s", f"{spec.budget_s:g}",
            "--max-busy-pct", f"{spec.max_busy_pct:g}", "--env-json", json.dumps(dict(spec.env)),
            "--knob-files-json", json.dumps(KNOB_FILES),
            *(("--force",) if force else ()), "--wait-go",
            *(("--wait-lock", f"{wait_s:g}") if wait_s > 0 else ()),
            "--", *spec.args)
    code = helper_code("bench", ("procfacts", "gguf", "nvml_session", "serverload"))
    return dataclasses.replace(BENCH, argv=(*BENCH.argv, code, *argv),
                               timeout_s=spec.budget_s + 60 + wait_s)


def knob_probe(spec: BenchSpec, arms: tuple[Any, ...], pairs: int, *,
               force: bool = False, wait_s: float = 0.0,
               loads: dict[str, list[str]] | None = None,
               rounds_budget_s: float | None = None, keep: tuple[str, ...] = ()) -> Probe:
    """The bench probe of an A/B (``bench --knob``): each arm's writes and args travel as one
    JSON argument; the budget is every run's. ``loads`` (``plan --prove``): arm -> the
    llama-server flags its placement is loaded with once, before the rounds (each load's
    time, remote/serverload.py's LOAD_S, joins the budget). ``rounds_budget_s``: the rounds'
    time, each after the first started only where it fits (the arms ``keep`` does not name
    leave the rounds first, the costliest first: remote/bench.py's _within_budget)."""
    limited = {name for a in arms for name, _ in a.limits}
    ab = {"pairs": pairs, "arms": [{"name": a.name, "writes": [list(w) for w in a.writes],
                                    "args": list(a.args), "limits": dict(a.limits),
                                    "env": dict(a.env), "cpus": a.cpus}
                                   for a in arms],
          **({"loads": loads} if loads else {}),
          **({"budget_s": rounds_budget_s, "keep": list(keep)} if rounds_budget_s else {}),
          "rlimits": {name: [rl.resource, rl.row] for name in sorted(limited)
                      if (rl := KNOBS[name].limit) is not None}}
    probe = bench_probe(spec, force=force, wait_s=wait_s)
    at = probe.argv.index("--")
    return dataclasses.replace(probe, argv=(*probe.argv[:at], "--ab-json", json.dumps(ab),
                                            *probe.argv[at:]),
                               timeout_s=min(spec.budget_s * len(arms) * pairs,
                                             spec.budget_s * len(arms) + (rounds_budget_s or
                                                                          math.inf))
                               + 60 + wait_s + LOAD_S * len(loads or ()))


def plan_probe(spec: BenchSpec, fit: list[str], estimate: list[list[str]]) -> Probe:
    """The bench probe of ``omni-host plan``: the helper reads the bench's context and the
    plan's facts (llama-fit-params' --fit answer for ``fit``, its memory estimate for each
    args list of ``estimate``) and runs no llama-bench."""
    probe = bench_probe(spec, force=True)
    at = probe.argv.index("--")
    plan = {"fit": fit, "estimate": estimate}
    return dataclasses.replace(probe, argv=(*probe.argv[:at], "--plan-json", json.dumps(plan),
                                            *probe.argv[at:]),
                               timeout_s=120 * (1 + len(estimate)) + 60)


def probes_for(policy: Policy) -> tuple[Probe, ...]:
    """The plan for one host: every static probe, plus the policy's paths and packages."""
    args = {
        "llamacpp.cuobjdump": list(policy.llamacpp_binaries),
        "llamacpp.readelf": list(policy.llamacpp_binaries),
        "model.files": (["--models", *(m.path for m in policy.models),
                         "--llama", *policy.llamacpp_binaries] if policy.models else []),
        "disk.df": [d.path for d in policy.disk_free],
        "packages.dpkg": list(policy.build_packages),
    }
    extra = tuple(dataclasses.replace(p, argv=(*p.argv, *args[p.id]))
                  for p in DYNAMIC if args[p.id])
    static = tuple(serve_probe(policy) if p.id == "serve.servers" else p for p in PROBES)
    return static + extra


def serve_probe(policy: Policy, *extra: str) -> Probe:
    """The serve helper's probe for this policy: the one credential path of the audit, serve
    watch and the bench. The operator's key (``omni_serve.api_key``) travels beside the
    program, never in its argv, with the accounts whose servers may receive it
    (``omni_serve.user``); the helper sends a key only after a server asked for one, and only
    to the process that owns the listening socket (``remote/serve.py:credentials``)."""
    base = next(p for p in PROBES if p.id == "serve.servers")
    args = (*(("--bench-binary", policy.bench.llama_bench) if policy.bench else ()),
            *(("--probe",) if policy.serve_probe else ()),
            *(a for user in policy.serve_users for a in ("--key-user", user)), *extra)
    return dataclasses.replace(base, argv=(*base.argv, *args),
                               timeout_s=base.timeout_s + 40 * policy.serve_probe,
                               secret=policy.serve_api_key)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _unavailable_reason(result: CommandResult) -> str | None:
    """Why a command yielded nothing usable, or None when it ran and exited 0."""
    if result.status == "skipped":
        return result.reason
    if result.status != "ran":
        return {"missing": "not installed", "denied": "permission denied",
                "timeout": result.reason or "timed out"}.get(result.status, result.reason)
    if result.exit_code == 0:
        return None
    detail = _first_line(result.stderr) or _first_line(result.stdout)
    if result.exit_code == 127 or "not found" in detail:
        return f"not installed ({detail})" if detail else "not installed"
    if result.exit_code == 126 or "ermission denied" in detail:
        return f"permission denied ({detail})"
    if result.exit_code == 3 and "No module named" in detail:
        return f"python module not installed ({detail})"
    return f"exit {result.exit_code}: {detail}" if detail else f"exit {result.exit_code}"


def evaluate(probe: Probe, result: CommandResult | None) -> ProbeResult:
    """A probe's outcome: observed (with a fact), unavailable (why) or unparseable (excerpt)."""
    from omni_host.model import Outcome, ProbeResult  # with the evaluation: see load_parsers

    if result is None:
        missing = ("not requested by the policy" if probe in DYNAMIC else
                   "not collected in this bundle")
        return ProbeResult(probe.id, probe.command, Outcome.UNAVAILABLE, reason=missing)
    reason = _unavailable_reason(result)
    if reason is not None:
        return ProbeResult(probe.id, probe.command, Outcome.UNAVAILABLE, reason=reason)
    try:
        fact = probe.parse(result.stdout)
    except ParseError as exc:
        return ProbeResult(probe.id, probe.command, Outcome.UNPARSEABLE, reason=str(exc),
                           excerpt=_excerpt(result.stdout))
    except Exception as exc:  # a parser bug costs this probe (its checks say error), never the host
        return ProbeResult(probe.id, probe.command, Outcome.UNPARSEABLE,
                           reason=f"parser crashed: {type(exc).__name__}: {exc}",
                           excerpt=_excerpt(result.stdout))
    return ProbeResult(probe.id, probe.command, Outcome.OBSERVED, fact=fact)
