"""The host's knobs that cost an inference box tokens/s, read without changing anything (issue
48): transparent huge pages and the huge page pool, automatic NUMA balancing, the CPU's
frequency policy (governor, energy preference, boost), SMT and the physical cores under the
logical CPUs, PCIe power management and the kernel command line.

Standard library only, Python 3.6; run inside the collector (``__omni_inline__``: no process
to start) or as ``python3 -c``. Prints one JSON document; a file that is not there is null.
"""

import glob
import json
import os
import sys

MAX_CPUS = 4096  # a sane machine has fewer: a forged sysfs does not make us read more
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


def _counted(values):
    counts = {}
    for value in values:
        if value is not None:
            counts[value] = counts.get(value, 0) + 1
    return counts


def cpu_policy(cpus):
    """Each logical CPU's governor and energy preference, counted; the boost switch; the
    driver that scales the frequency; each CPU's core (package, core id) for SMT."""
    base = "/sys/devices/system/cpu/cpu%d/"
    governors = _counted(_read(base % c + "cpufreq/scaling_governor") for c in cpus)
    epp = _counted(_read(base % c + "cpufreq/energy_performance_preference") for c in cpus)
    cores = {}
    for c in cpus:
        package = _read(base % c + "topology/physical_package_id")
        core = _read(base % c + "topology/core_id")
        if package is not None and core is not None:
            cores[str(c)] = "%s:%s" % (package, core)
    return {
        "governors": governors, "epp": epp,
        "driver": _read(base % (cpus[0] if cpus else 0) + "cpufreq/scaling_driver"),
        "boost": _read("/sys/devices/system/cpu/cpufreq/boost"),
        "no_turbo": _read("/sys/devices/system/cpu/intel_pstate/no_turbo"),
        "cores": cores,
    }


def main():
    cpus = _cpus()
    doc = {
        "helper": 1,
        "thp": {"enabled": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
                "defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag")},
        "numa_balancing": _read("/proc/sys/kernel/numa_balancing"),
        "cpu": cpu_policy(cpus),
        "smt": {"control": _read("/sys/devices/system/cpu/smt/control"),
                "active": _read("/sys/devices/system/cpu/smt/active")},
        "aspm": _read("/sys/module/pcie_aspm/parameters/policy"),
        "cmdline": _read("/proc/cmdline"),
    }
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ in ("__main__", "__omni_inline__"):
    main()
