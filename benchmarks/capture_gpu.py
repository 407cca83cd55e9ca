"""Collect a bundle on the machine this runs on, with only the standard library plus what the
collector uses (no paramiko): used on the lent GPU machines to make test fixtures.

    python3 benchmarks/capture_gpu.py NAME OUT.tar.gz
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omni_host.bundle import write_archive  # noqa: E402
from omni_host.collect import collect  # noqa: E402
from omni_host.transport.local import LocalTransport  # noqa: E402


def main() -> None:
    name, out = sys.argv[1], Path(sys.argv[2])
    start = time.monotonic()
    bundle = collect(name, LocalTransport())
    print(f"collected {name} in {time.monotonic() - start:.3f}s")
    for probe_id, res in bundle.results.items():
        print(f"{probe_id:20} {res.status:8} exit={res.exit_code} {res.duration_s:.3f}s "
              f"{res.reason} {res.stderr.strip()[:120]}")
    write_archive([bundle], out)


if __name__ == "__main__":
    main()
