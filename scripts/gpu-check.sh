#!/usr/bin/env bash
# The GPU checks, in one script for a machine with an NVIDIA GPU (../shared/device/README.md
# says how the Debian dependencies get there: `source .device/prepare.sh` first):
# configure with CUDA for sm_90, build, run the gpu-labelled tests, then the GPU benchmarks.
# Logs and JSON results go under $OUT (default build-gpu/out); the exit status is non-zero
# when any step failed, and every step runs under a time limit.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
jobs=$(nproc)
status=0
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"  # nvcc, where the toolkit usually is

# step NAME SECONDS COMMAND...: runs it with its output in NAME.log; a failure is reported, not fatal.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  if timeout "$limit" "$@" >"$out/$name.log" 2>&1; then
    echo "== $name: ok ($((SECONDS - start)) s)"
  else
    echo "== $name: FAILED ($((SECONDS - start)) s); the end of $name.log:"
    tail -25 "$out/$name.log"
    status=1
  fi
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nvcc --version | tail -1
  echo "cores: $jobs"
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# TORCH_CUDA_ARCH_LIST: LibTorch's CMake would otherwise guess the architectures itself.
step configure 300 cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DTORCH_CUDA_ARCH_LIST=9.0
grep "troupe: CUDA backend" "$out/configure.log" || true
# The kernels' test needs no LibTorch: build it alone first, so that a LibTorch the rest of
# the project does not compile against still leaves it. Then the others (keep going on errors).
step build-kernels-test 600 ninja -C build-gpu -j"$jobs" cuda_kernels_test
targets="cuda_stream_test cuda_memory_test"
for t in nccl_test torch_cuda_stream_test; do  # built when NCCL, and a LibTorch with CUDA, are found
  ninja -C build-gpu -t targets all 2>/dev/null | grep -q "^$t:" && targets="$targets $t"
done
step build-gpu-tests 600 ninja -C build-gpu -j"$jobs" -k 0 $targets
step gpu-tests 600 ctest --test-dir build-gpu -L gpu --output-on-failure --timeout 300
step build-troupe 600 ninja -C build-gpu -j"$jobs" troupe
# CUDA AdamW against the device's copy bandwidth; the CPU kernel on the same machine beside it.
step bench-adam-cuda 120 sh -c "build-gpu/troupe bench adam --device cuda --params 268435456 --iters 10 --json \
  > '$out/bench-adam-cuda.json'"
step bench-adam-cpu 120 sh -c "build-gpu/troupe bench adam --params 67108864 --json > '$out/bench-adam-cpu.json'"
for f in "$out"/*.json; do [ -f "$f" ] && echo "$(basename "$f"): $(cat "$f")"; done
exit $status
