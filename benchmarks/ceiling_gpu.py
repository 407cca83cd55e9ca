"""The hybrid ceiling validated where it can be measured (issue 37).

On the lent machine (``benchmarks/ceiling_gpu.sh`` calls it): one bundle per configuration,
each the audit's probes plus ``omni-host bench``'s bench probe (llama-bench behind the idle
gate), written to OUTDIR/NAME.bundle.tar.gz:

    python3 benchmarks/ceiling_gpu.py collect OUTDIR CONFIG.json

Anywhere, from those bundles: the table of every generation test, predicted against achieved,
as ``omni-host bench`` judges it; a run without an all-CPU test of its own is also predicted at
the CPU rate the first run's all-CPU test reached (same machine, same binary):

    python3 benchmarks/ceiling_gpu.py table OUTDIR NAME...

CONFIG.json: [{"name": ..., "omni_bench": {...}}, ...].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omni_host.collect.bundle import read_bundles, write_archive  # noqa: E402
from omni_host.measure.ceiling import CPU, run_ceilings, test_ceiling  # noqa: E402
from omni_host.probes.parsers.bench_run import BenchRun, parse_bench_run


def collect(out: Path, config_file: Path) -> None:
    from omni_host.collect.run import collect_over
    from omni_host.collect.transport.local import LocalTransport
    from omni_host.plan.hosts import plan_host
    from omni_host.probes.catalog import bench_probe

    out.mkdir(parents=True, exist_ok=True)
    for config in json.loads(config_file.read_text()):
        variables = {"ansible_connection": "local", "omni_bench": config["omni_bench"]}
        plan = plan_host(config["name"], variables, origin="ceiling_gpu")
        assert plan.policy.bench is not None
        bundle = collect_over(plan, LocalTransport(), None, extra=(bench_probe(plan.policy.bench),))
        write_archive([bundle], out / f"{config['name']}.bundle.tar.gz")
        print(f"{config['name']}: collected", flush=True)


def _run(out: Path, name: str) -> BenchRun:
    (bundle,) = read_bundles(out / f"{name}.bundle.tar.gz")
    return parse_bench_run(bundle.results["bench.llama"].stdout)


def _row(name: str, test: str, achieved: float, c: dict[str, Any]) -> str:
    if "ceiling_ts" not in c:
        effective = c.get("cpu_effective_gbs", "")
        return f"| {name} | {test} | {achieved:.1f} | - | - | {c['why_not']} | | {effective} |"
    devices = ", ".join(f"{d} {v['gb_per_token']:.3f} GB @ {v['gbs']:g} GB/s"
                        for d, v in c["devices"].items() if v["gb_per_token"] >= 0.001)
    return (f"| {name} | {test} | {achieved:.1f} | {c['ceiling_ts']:g} ({c['basis']}) | "
            f"{c['fraction']:.0%} | {c['limit']} | {devices} | {c.get('cpu_effective_gbs', '')} |")


def table(out: Path, names: list[str]) -> None:
    print("| run | test | achieved t/s | ceiling or prediction t/s | achieved/predicted | "
          "limits it | read per token | CPU share GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    reference = None
    for name in names:
        run = _run(out, name)
        assert run.result is not None, name
        done = run_ceilings(run, {})
        for t in run.result.tests:
            if t.kind != "tg":
                continue
            c = done[t.name]
            own = "this test measures" in c.get("why_not", "")
            if own and reference is None:
                reference = (f"{name}'s {t.name}", c["cpu_effective_gbs"] * 1e9)
            elif "ceiling_ts" not in c and reference is not None:
                # another run's all-CPU test, or a run with none: the first run's CPU rate
                c = {**test_ceiling(run, t, {}, reference),
                     **({"cpu_effective_gbs": c["cpu_effective_gbs"]} if own else {})}
            print(_row(name, t.name, t.estimate.center_ts, c))
    if reference:
        print(f"\nCPU rate measured: {reference[1] / 1e9:.1f} GB/s ({reference[0]}; {CPU})")


if __name__ == "__main__":
    if sys.argv[1] == "collect":
        collect(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        table(Path(sys.argv[2]), sys.argv[3:])
