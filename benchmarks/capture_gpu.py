"""Collect a bundle on the machine this runs on, with only the standard library plus what the
collector uses (no paramiko): used on the lent GPU machines to make test fixtures.

    python3 benchmarks/capture_gpu.py NAME OUT.tar.gz [POLICY.json]

POLICY.json holds omni_* variables whose paths and packages add the policy's probes
(llamacpp binaries, models, disks, packages) to the plan.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omni_host.collect.bundle import write_archive  # noqa: E402
from omni_host.collect.run import collect  # noqa: E402
from omni_host.collect.transport.local import LocalTransport  # noqa: E402
from omni_host.plan.policy import policy_from_vars  # noqa: E402
from omni_host.probes.catalog import probes_for  # noqa: E402


def main() -> None:
    name, out = sys.argv[1], Path(sys.argv[2])
    start = time.monotonic()
    variables = json.loads(Path(sys.argv[3]).read_text()) if len(sys.argv) > 3 else {}
    bundle = collect(name, LocalTransport(), probes=probes_for(policy_from_vars(variables, "cli")))
    print(f"collected {name} in {time.monotonic() - start:.3f}s")
    for probe_id, res in bundle.results.items():
        print(f"{probe_id:20} {res.status:8} exit={res.exit_code} {res.duration_s:.3f}s "
              f"{res.reason} {res.stderr.strip()[:120]}")
    write_archive([bundle], out)


if __name__ == "__main__":
    main()
