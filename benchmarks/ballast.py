"""Hold GPU memory so that about BUDGET GiB stay free (issue 46: the plan's VRAM budgets), through
plain allocations of CUDA's driver API (ctypes; no framework): the way another process's memory
looks to llama.cpp and to NVML. Prints one line once held, then sleeps until killed.

    python3 benchmarks/ballast.py BUDGET_GIB [DEVICE]
"""

from __future__ import annotations

import ctypes
import sys
import time


def main() -> None:
    budget, device = float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(dev), device) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    held = []
    want = free.value - int(budget * (1 << 30))
    while want > 0:  # in 1 GiB pieces: one allocation as large as most of the card can fail
        size = min(want, 1 << 30)
        ptr = ctypes.c_uint64()
        if cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) != 0:
            break
        held.append(ptr)
        want -= size
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    print(f"ballast: {len(held)} GiB held, {free.value / (1 << 30):.1f} GiB free of "
          f"{total.value / (1 << 30):.1f}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
