#!/bin/sh
# On a lent GPU machine: build a CUDA library with VMM for this GPU's architecture, then collect
# a bundle whose policy points the catalog's probes at it. Usage: sh capture_gpu_full.sh NAME OUT
set -eu
name=$1 out=$2
work=$(mktemp -d)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
printf '#include <cuda.h>\n__global__ void k(float *x) { x[threadIdx.x] *= 2; }\nextern "C" int pool_reserve(size_t n) { CUmemGenericAllocationHandle h; CUmemAllocationProp p = {}; p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE; return (int)cuMemCreate(&h, n, &p, 0); }\n' > "$work/vmm.cu"
nvcc -shared -Xcompiler -fPIC -gencode "arch=compute_$cc,code=sm_$cc" -o "$work/libggml-cuda.so" "$work/vmm.cu" -lcuda
cat > "$work/policy.json" <<JSON
{"omni_llamacpp_binaries": ["$work/libggml-cuda.so"], "omni_disk_free": [{"path": "/", "min_free_gib": 1}],
 "omni_build_packages": ["numactl"]}
JSON
cp "$work/policy.json" "$out/$name.policy.json"
python3 benchmarks/capture_gpu.py "$name" "$out/$name.tar.gz" "$work/policy.json"
