"""A duty-cycled GPU load: matrix products for DUTY of every PERIOD seconds, for SECONDS, once
the file TRIGGER appears ("now": at once). torch is imported before the wait: only the CUDA
context starts after the trigger (a job that starts while the bench runs).

Usage: python3 benchmarks/gpu_load.py DUTY SECONDS TRIGGER|now [PERIOD]
"""

import os
import sys
import time

import torch

duty, seconds, trigger = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
period = float(sys.argv[4]) if len(sys.argv) > 4 else 0.020
while trigger != "now" and not os.path.exists(trigger):
    time.sleep(0.005)
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
end = time.time() + seconds
while time.time() < end:
    start = time.perf_counter()
    while time.perf_counter() - start < period * duty:
        a @ a
        torch.cuda.synchronize()
    time.sleep(max(0.0, period * (1 - duty)))
