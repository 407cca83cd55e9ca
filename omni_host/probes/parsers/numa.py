"""NUMA topology from ``numactl --hardware`` or, when numactl is absent, from sysfs.

Lesson S-005: ``available: 1 nodes`` is how the operator proves BIOS NPS1 on a one-socket
Threadripper; NPS4 shows four nodes and halves tokens/s. On two sockets NPS1 shows two nodes:
what matters is nodes per socket, so the distance matrix is kept (ACPI SLIT: 10 is local, a
node on the same socket is closer than 20, one on another socket is 20 or more).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from omni_host.errors import ParseError
from omni_host.probes.parsers import cpu_list, excerpt

_AVAILABLE = re.compile(r"^available:\s+(\d+)\s+nodes?", re.M)
_NODE_CPUS = re.compile(r"^node\s+(\d+)\s+cpus:(.*)$", re.M)
_NODE_SIZE = re.compile(r"^node\s+(\d+)\s+(size|free):\s+(\d+)\s+MB", re.M)
_SYS_CPULIST = re.compile(r"^/sys/devices/system/node/node(\d+)/cpulist:(.*)$", re.M)
_DISTANCE_ROW = re.compile(r"^\s*(\d+):((?:\s+\d+)+)\s*$", re.M)
_SYS_DISTANCE = re.compile(r"^/sys/devices/system/node/node(\d+)/distance:([\d ]+)$", re.M)
SAME_SOCKET_BELOW = 20  # SLIT distances: 10 local, 11-16 same socket, >= 20 another socket
AMBIGUOUS_UP_TO = 21  # a Xeon's other socket and a Cluster-on-Die sibling both read 21
MAX_NODES_PER_SOCKET = 4  # NPS4 on EPYC, SNC4 on Xeon
MAX_CPU_ID = 1 << 16
_SYS_MEMTOTAL = re.compile(r"^/sys/devices/system/node/node(\d+)/meminfo:Node\s+\d+\s+MemTotal:\s+(\d+)\s+kB",
                           re.M)


@dataclass(frozen=True)
class NumaNode:
    node_id: int
    cpus: tuple[int, ...]
    size_mib: int | None


@dataclass(frozen=True)
class NumaTopology:
    node_count: int
    nodes: tuple[NumaNode, ...]
    source: str  # "numactl" or "sysfs"
    summary_line: str
    # node id -> its distances to nodes 0..n-1, as printed; empty when not shown (or cut off)
    distances: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def memoryless_nodes(self) -> tuple[int, ...]:
        return tuple(n.node_id for n in self.nodes if n.size_mib == 0)

    @property
    def cpuless_nodes(self) -> tuple[int, ...]:
        """Nodes of memory alone (HBM in flat mode, CXL, NVDIMM): no BIOS NPS/SNC setting
        made them, so they are not counted as nodes per socket."""
        return tuple(n.node_id for n in self.nodes if not n.cpus)

    @property
    def cpu_node_count(self) -> int:
        return self.node_count - len(self.cpuless_nodes)

    def sockets_from_distances(self) -> int | None:
        """Sockets as groups of nodes closer than 20 to each other; None when the matrix is
        missing or incomplete (a partial paste), or does not split into consistent groups."""
        n = self.node_count
        if n == 1:
            return 1
        if sorted(self.distances) != list(range(n)) or \
                any(len(row) != n for row in self.distances.values()):
            return None
        groups = self._groups()
        if groups is None:
            return None
        return self._die_level_sockets() or len(groups)

    def _groups(self) -> set[frozenset[int]] | None:
        """Nodes closer than 20 to each other; None where they overlap (not a partition)."""
        n = self.node_count
        groups = {frozenset(j for j, d in enumerate(self.distances[i]) if d < SAME_SOCKET_BELOW)
                  for i in range(n)}
        members = [i for g in groups for i in g]
        return groups if sorted(members) == list(range(n)) else None

    def _joined(self, limit: int) -> list[frozenset[int]]:
        """The nodes joined, transitively, wherever two are at most ``limit`` apart."""
        owner = list(range(self.node_count))

        def root(i: int) -> int:
            while owner[i] != i:
                i = owner[i]
            return i

        for i, row in self.distances.items():
            for j, d in enumerate(row):
                if d <= limit:
                    owner[root(i)] = root(j)
        classes: dict[int, set[int]] = {}
        for i in range(self.node_count):
            classes.setdefault(root(i), set()).add(i)
        return [frozenset(c) for c in classes.values()]

    def _die_level_sockets(self) -> int | None:
        """Sockets where the matrix settles what 20-21 means: nodes that far apart form
        classes that partition the nodes cleanly (every pair of a class within 21, and the
        matrix goes past that level between classes: 31 on a two-socket Cluster-on-Die Xeon),
        so 21 is the die level and each class one socket. None where it does not."""
        classes = self._joined(AMBIGUOUS_UP_TO)
        if len(classes) < 2 or len(classes) == len(self._groups() or ()):
            return None
        clean = all(self.distances[i][j] <= AMBIGUOUS_UP_TO for c in classes for i in c for j in c)
        cpus = {node.node_id for node in self.nodes if node.cpus}
        small = all(len(c & cpus) <= MAX_NODES_PER_SOCKET for c in classes)
        return len(classes) if clean and small else None

    def distance_ambiguity(self) -> str | None:
        """Why the distance matrix alone cannot count the sockets here, or None. Groups at 21
        are another socket on a two-socket Xeon, but the other die of the same socket too;
        the matrix settles it where it goes past that level (``_die_level_sockets``) or where
        no two groups fit in one socket (more than four nodes with CPUs, and no pair of groups
        within four). More than four nodes all closer than 20 are one socket only if it has
        that many nodes, which no BIOS mode gives (an eight-socket Xeon's SLIT can read so).
        Vendor-neutral: without the CPU's identity no BIOS mode is named."""
        groups = self._groups() if self.node_count > 1 and self.sockets_from_distances() else None
        if groups is None:
            return None
        if len(groups) == 1 and self.cpu_node_count > MAX_NODES_PER_SOCKET:
            return (f"{self.cpu_node_count} nodes all closer than {SAME_SOCKET_BELOW} to each "
                    f"other: one socket has at most {MAX_NODES_PER_SOCKET} (the most any BIOS "
                    "mode gives), so these are several sockets whose distances do not say how "
                    "many")
        across = [d for i, row in self.distances.items() for j, d in enumerate(row)
                  if d >= SAME_SOCKET_BELOW]
        if len(groups) == 1 or min(across) > AMBIGUOUS_UP_TO or self._die_level_sockets():
            return None
        cpus = {node.node_id for node in self.nodes if node.cpus}
        sizes = sorted(len(g & cpus) for g in groups)
        if self.cpu_node_count > MAX_NODES_PER_SOCKET and sizes[0] + sizes[1] > MAX_NODES_PER_SOCKET:
            return None  # no two groups fit in one socket: each group is one
        return (f"groups of nodes at distance {min(across)}: another socket, or another die "
                "of the same socket; the distances cannot tell")


def parse_numactl_hardware(text: str) -> NumaTopology:
    """``numactl --hardware``. Tolerates trailing spaces, ``--cpu-compress`` ranges, memoryless
    nodes (``size: 0 MB``) and truncated pastes (the node count comes from ``available:``)."""
    match = _AVAILABLE.search(text)
    if not match:
        raise ParseError(f"no 'available: N nodes' line in numactl output: {excerpt(text, 80)!r}")
    sizes = {int(n): int(v) for n, kind, v in _NODE_SIZE.findall(text) if kind == "size"}
    nodes = tuple(
        NumaNode(int(n), cpu_list(cpus), sizes.get(int(n))) for n, cpus in _NODE_CPUS.findall(text)
    )
    _, _, table = text.partition("node distances:")
    distances = {int(n): tuple(int(d) for d in row.split())
                 for n, row in _DISTANCE_ROW.findall(table)}
    return NumaTopology(int(match.group(1)), nodes, "numactl", match.group(0).strip(),
                        distances)


def parse_sysfs_nodes(text: str) -> NumaTopology:
    """Output of ``grep -H . /sys/devices/system/node/node*/cpulist`` followed by
    ``grep -H MemTotal /sys/devices/system/node/node*/meminfo``."""
    cpus = {int(n): cpu_list(spec) for n, spec in _SYS_CPULIST.findall(text)}
    if not cpus:
        raise ParseError(f"no /sys/devices/system/node/node*/cpulist lines: {excerpt(text, 80)!r}")
    sizes = {int(n): int(kib) // 1024 for n, kib in _SYS_MEMTOTAL.findall(text)}
    # grep prints no line for an empty cpulist: a node with only a meminfo line has no CPUs
    nodes = tuple(NumaNode(n, cpus.get(n, ()), sizes.get(n)) for n in sorted(cpus.keys() | sizes))
    distances = {int(n): tuple(int(d) for d in row.split())
                 for n, row in _SYS_DISTANCE.findall(text)}
    return NumaTopology(len(nodes), nodes, "sysfs", f"{len(nodes)} node directories in sysfs",
                        distances)
