"""The host's knobs that cost an inference box tokens/s, read without changing anything (issue
48). Which files it reads comes as data: one JSON argument, name -> path, built from the knobs'
declarations (``omni_host/plan/knobs.py``: ``audit_reads``). A path with a wildcard (one file
per CPU) is read on every match and its values counted; the CPUs' topology (package and core
of each logical CPU, for SMT) is read here, as it pairs two files a CPU.

Standard library only, Python 3.6; run inside the collector (``__omni_inline__``: no process
to start) or as ``python3 -c``. Prints one JSON document; a file that is not there is null.
"""

import glob
import json
import os
import sys

MAX_CPUS = 4096  # a sane machine has fewer: a forged sysfs does not make us read more
MAX_READS = 64  # files named in the table
CAP = 4096  # bytes of any one file


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(CAP).decode("utf-8", "replace").strip()
    except (IOError, OSError):
        return None


def _cpus():
    found = []
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*")[:MAX_CPUS]:
        name = os.path.basename(path)[3:]
        if name.isdigit():
            found.append(int(name))
    return sorted(found)


def _counted(paths):
    counts = {}
    for path in paths[:MAX_CPUS]:
        value = _read(path)
        if value is not None:
            counts[value] = counts.get(value, 0) + 1
    return counts


def cores(cpus):
    """Each logical CPU's core ("package:core"), for SMT and the physical cores."""
    base = "/sys/devices/system/cpu/cpu%d/topology/"
    found = {}
    for c in cpus:
        package, core = _read(base % c + "physical_package_id"), _read(base % c + "core_id")
        if package is not None and core is not None:
            found[str(c)] = "%s:%s" % (package, core)
    return found


def read_all(table):
    """Each named file's value (a wildcard path: its values counted over the matches)."""
    out = {}
    for name, path in list(table.items())[:MAX_READS]:
        if not isinstance(path, str) or not path.startswith(("/sys/", "/proc/")):
            out[name] = None  # the table names only the kernel's own files
        elif any(c in path for c in "*?["):
            out[name] = _counted(sorted(glob.glob(path)))
        else:
            out[name] = _read(path)
    return out


def main(args):
    try:
        table = json.loads(args[0]) if args else {}
    except ValueError:
        table = None
    if not isinstance(table, dict):
        sys.stdout.write(json.dumps({"helper": 2, "error": "the table of reads is not JSON"}))
        return
    doc = {"helper": 2, "files": read_all(table), "cores": cores(_cpus())}
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__omni_inline__":
    main(ARGS)  # type: ignore[name-defined]  # noqa: F821 (ARGS is given by the collector)
elif __name__ == "__main__":
    main(sys.argv[1:])
