"""The knobs, each declared once (issue 64): a host setting the audit reads (``audit_reads``: the
table the host helper ``remote/knobs.py`` is handed, it names no knob) and ``omni-host bench
--knob NAME=VALUE`` writes for one arm and restores whatever happens; an option of the host's
own llama-bench command that needs no host change; or a resource limit set on llama-bench as a
container sets it. A row holds how it is read, set and restored, its values, its check and
why it costs tokens/s; adding a knob is one row (and its test). Pure: names and values in, the
arms of an A/B (what each writes, the args each runs) out; a name or value not known is a
UsageError naming the choices."""

from __future__ import annotations

from dataclasses import dataclass

from omni_host.errors import UsageError


@dataclass(frozen=True)
class Rlimit:
    """A resource limit as the host helper sets and reads it back."""

    resource: str  # the name setrlimit takes: RLIMIT_MEMLOCK
    row: str  # its row in /proc/PID/limits: "Max locked memory"


@dataclass(frozen=True)
class Knob:
    name: str
    what: str  # how a person calls it
    # the file the audit reads and the A/B writes, then restores to what it read (a glob for
    # per-CPU files: every match written, its values counted)
    path: str | None = None
    option: tuple[str, ...] = ()  # llama-bench's spellings of the option the arm sets
    values: tuple[str, ...] = ()  # the values it takes (empty: a positive integer)
    check: str | None = None  # the audit check whose knob it is (its lessons in the catalog)
    # A resource limit the helper sets on its llama-bench for the arm (``memlock``: what a
    # container's ``ulimit -l`` is), with the args both arms run it under; values are sizes.
    limit: Rlimit | None = None
    adds: tuple[str, ...] = ()
    why: str = ""  # what it costs an inference host, for a knob no check judges yet


KNOBS = {k.name: k for k in (
    Knob("thp", "transparent huge pages", "/sys/kernel/mm/transparent_hugepage/enabled",
         values=("always", "madvise", "never"), check="kernel.thp"),
    Knob("thp-defrag", "THP defragmentation", "/sys/kernel/mm/transparent_hugepage/defrag",
         values=("always", "defer", "defer+madvise", "madvise", "never"), check="kernel.thp"),
    Knob("numa-balancing", "automatic NUMA balancing", "/proc/sys/kernel/numa_balancing",
         values=("0", "1"), check="kernel.numa-balancing"),
    Knob("governor", "the CPU governor",
         "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",
         values=("performance", "powersave", "schedutil", "ondemand"), check="cpu.frequency"),
    Knob("threads", "llama-bench threads", option=("-t", "--threads"), check="cpu.threads"),
    Knob("numa", "llama-bench --numa", option=("--numa",),
         values=("distribute", "isolate", "numactl")),
    Knob("ubatch", "the physical batch size", option=("-ub", "--ubatch-size")),
    # A container's locked-memory limit (Docker's --ulimit memlock; its default is 8 MiB, and
    # a server's --mlock then fails with a warning only): set on llama-bench as the container
    # sets it on its processes, both arms loading the model as --mlock does (-lm mlock).
    Knob("memlock", "the locked-memory limit (ulimit -l, a container's --ulimit memlock)",
         limit=Rlimit("RLIMIT_MEMLOCK", "Max locked memory"), adds=("-lm", "mlock"),
         check="serve.memory"),
    Knob("zone-reclaim", "NUMA zone reclaim", "/proc/sys/vm/zone_reclaim_mode",
         values=("0", "1"),
         why="on, a node short of memory reclaims its own page cache before it allocates on "
             "another node: the mapped model's pages are evicted and read again"),
)}
# What the audit reads beside the knobs' own files: name -> the kernel's file (a glob: one a
# CPU, its values counted).
READS = {
    "epp": "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/energy_performance_preference",
    "freq-driver": "/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver",
    "boost": "/sys/devices/system/cpu/cpufreq/boost",
    "no-turbo": "/sys/devices/system/cpu/intel_pstate/no_turbo",
    "smt-control": "/sys/devices/system/cpu/smt/control",
    "smt-active": "/sys/devices/system/cpu/smt/active",
    "aspm": "/sys/module/pcie_aspm/parameters/policy",
    "cmdline": "/proc/cmdline",
}


def audit_reads() -> dict[str, str]:
    """The table the host helper reads: every knob's file, then the other reads."""
    return {k.name: k.path for k in KNOBS.values() if k.path is not None} | READS
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class Arm:
    name: str  # "now" (the host as it is) or the knob's value
    writes: tuple[tuple[str, str], ...]
    args: tuple[str, ...]
    limits: tuple[tuple[str, int], ...] = ()  # (rlimit, bytes; -1 unlimited) for its llama-bench
    # variables its llama-bench runs with beside the bench's own (None: unset for it)
    env: tuple[tuple[str, str | None], ...] = ()
    cpus: str | None = None  # the CPUs its llama-bench may run on (a kernel's list), if set


def limit_bytes(value: str) -> int | None:
    """A limit as ulimit and Docker write it: ``unlimited`` (-1), or bytes with an optional
    K, M or G (``8M``); None where it is neither."""
    text = value.strip().upper()
    if text == "UNLIMITED":
        return -1
    number, unit = (text[:-1], text[-1]) if text and text[-1] in "KMG" else (text, "")
    return int(number) * _UNITS[unit] if number.isdigit() and int(number) < 1 << 40 else None


def parse_knob(text: str) -> tuple[Knob, str]:
    """``NAME=VALUE`` as a known knob and one of its values."""
    name, eq, value = text.partition("=")
    knob = KNOBS.get(name.strip())
    if knob is None or not eq or not value.strip():
        raise UsageError(f"--knob {text!r}: give NAME=VALUE, NAME one of "
                         f"{', '.join(sorted(KNOBS))}")
    value = value.strip()
    if knob.values and value not in knob.values:
        raise UsageError(f"--knob {knob.name}: {value!r} is not one of {', '.join(knob.values)}")
    if knob.limit is not None:
        if limit_bytes(value) is None:
            raise UsageError(f"--knob {knob.name}: {value!r} is not a size (8M, 64K, unlimited)")
        return knob, value
    if not knob.values and not (value.isdigit() and 0 < int(value) < 100_000):
        raise UsageError(f"--knob {knob.name}: {value!r} is not a positive integer")
    return knob, value


def without_options(args: tuple[str, ...], option: tuple[str, ...] | frozenset[str]) -> list[str]:
    """``args`` with every spelling of ``option`` and its value taken out."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.partition("=")[0]
        if name in option:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def current(knob: Knob, args: tuple[str, ...]) -> str | None:
    """An option knob's value in the host's own llama-bench args (its last spelling), None
    where they leave it to llama-bench's default."""
    found = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in knob.option:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def arms(knob: Knob, value: str, args: tuple[str, ...]) -> tuple[Arm, Arm]:
    """The two arms of an A/B: the host as it is, and the knob at ``value``."""
    if knob.limit is not None:
        both = (*without_options(args, ("-lm", "--load-mode")), *knob.adds)
        limit = limit_bytes(value)
        assert limit is not None  # parse_knob took only sizes
        return Arm("now", (), both), Arm(value, (), both, ((knob.name, limit),))
    now = Arm("now", (), args)
    if knob.path is not None:
        return now, Arm(value, ((knob.path, value),), args)
    return now, Arm(value, (), (*without_options(args, knob.option), knob.option[0], value))
