"""The NVML reader's calls on this host, each one's CPU time summed (for benchmarks/nvml_gpu.sh):
which of nvidia-smi's fields cost the driver most."""

import time
from pathlib import Path

src = "\n\n".join(Path(f"omni_host/remote/{n}.py").read_text() for n in ("nvml_session", "nvml"))
src = src.replace('if __name__ == "__main__":\n    main()', "")
g = {"__name__": "nvml"}
exec(compile(src, "nvml", "exec"), g)
t0 = time.process_time()
s = g["Session"]()
print("init", round(time.process_time() - t0, 4))
per = {}
orig = s.ok


def ok(name, *args):
    t = time.process_time()
    r = orig(name, *args)
    per.setdefault(name, []).append(time.process_time() - t)
    return r


s.ok = ok
t0 = time.process_time()
reads = [g["shared_reads"](s, h) for h in s.handles]
print("shared_reads", round(time.process_time() - t0, 4))
for name in ("smi_log", "matrices"):
    t0 = time.process_time()
    g[name](s, reads)
    print(name, round(time.process_time() - t0, 4))
for name, ts in sorted(per.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:45s} {len(ts):3d} calls {sum(ts):.4f} s")
