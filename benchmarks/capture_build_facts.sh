#!/bin/sh
# Captures, on a lent NVIDIA machine, the raw outputs the full check catalog parses:
# compute capability and health fields, nvcc, and llama.cpp-like CUDA libraries built with and
# without CUDA VMM for sm_90 and sm_120 (cuobjdump, readelf). Usage: sh capture_build_facts.sh OUTDIR
set -u
out=$1
mkdir -p "$out" && cd "$(mktemp -d)" || exit 1
nvidia-smi --query-gpu=index,name,compute_cap,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,ecc.errors.uncorrected.volatile.total --format=csv,noheader > "$out/nvidia-smi-query-health.csv" 2>&1
nvcc --version > "$out/nvcc-version.txt" 2>&1
cat > vmm.cu <<'CU'
#include <cuda.h>
__global__ void k(float *x) { x[threadIdx.x] *= 2; }
extern "C" int pool_reserve(size_t n) {
  CUmemGenericAllocationHandle h; CUmemAllocationProp p = {};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  return (int)cuMemCreate(&h, n, &p, 0);
}
CU
cat > novmm.cu <<'CU'
__global__ void k(float *x) { x[threadIdx.x] *= 2; }
extern "C" int pool_reserve(size_t n) { float *d; return (int)cudaMalloc(&d, n); }
CU
for arch in 90 120; do
  nvcc -shared -Xcompiler -fPIC -gencode arch=compute_$arch,code=sm_$arch -o libvmm_sm$arch.so vmm.cu -lcuda
  nvcc -shared -Xcompiler -fPIC -gencode arch=compute_$arch,code=sm_$arch -o libnovmm_sm$arch.so novmm.cu
  for lib in vmm novmm; do
    cuobjdump --list-elf lib${lib}_sm$arch.so > "$out/cuobjdump-list-elf_lib${lib}_sm$arch.txt" 2>&1
    readelf -d lib${lib}_sm$arch.so > "$out/readelf-d_lib${lib}_sm$arch.txt" 2>&1
    readelf --dyn-syms -W lib${lib}_sm$arch.so > "$out/readelf-dyn-syms_lib${lib}_sm$arch.txt" 2>&1
  done
done
cuobjdump --list-elf /nonexistent > "$out/cuobjdump-missing-file.txt" 2>&1
(dmesg 2>&1 | grep -i -E "xid|nvrm" | tail -20) > "$out/dmesg-nvrm.txt"
ls -la "$out"
