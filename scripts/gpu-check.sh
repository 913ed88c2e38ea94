#!/usr/bin/env bash
# The GPU checks, in one script for a machine with an NVIDIA GPU (../shared/device/README.md
# says how the Debian dependencies get there: `source .device/prepare.sh` first):
# configure with CUDA for sm_90, build, run the gpu-labelled tests (GPU training against the CPU
# reference among them), then the GPU benchmarks: CUDA AdamW, GPT training with and without the
# optimizer offloaded to the host beside plain PyTorch, and a traced run.
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
targets="cuda_stream_test cuda_memory_test gpu_training_test troupe"
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
# GPT training on the GPU (12 layers, d_model 768, seq 512, micro-batch 8, fp32): troupe with
# the optimizer on the GPU (the fused CUDA AdamW) and offloaded to the host (fused CPU
# AdamW, gradients and parameters over PCIe), and plain eager PyTorch on the same shape.
shape="--set model.n_layers=12 --set model.d_model=768 --set model.n_heads=12 --set model.seq_len=512"
train_gpu() {  # NAME SETTINGS...: 21 steps; the first warms up
  local name=$1
  shift
  build-gpu/troupe run configs/tiny-gpt.toml --set cluster.device=cuda --set cluster.world_size=1 \
    --set parallel.dp=1 --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 $shape \
    --set train.steps=21 --set optimizer.lr=3e-4 --set cluster.coordinator=127.0.0.1:29591 "$@" \
    --metrics "$out/$name.jsonl" && python3 - "$out/$name.jsonl" "$name" >"$out/$name.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
step = statistics.median(r["step_ms"] for r in rows)
tflops = rows[0]["step_flops"] / (step / 1000) / 1e12
# MFU against an H100/H200's dense bf16 tensor-core peak (989 TFLOP/s, NVIDIA's figure).
print(json.dumps({"run": sys.argv[2], "median_step_ms": step, "tflops": tflops, "mfu_bf16_dense": tflops / 989,
                  "tokens_per_s": rows[0]["tokens"] / (step / 1000), "steps": len(rows)}))
PY
}
export out shape big
export -f train_gpu
step train-gpu 300 bash -c 'train_gpu "$@"' _ train-gpu
step train-gpu-offload 300 bash -c 'train_gpu "$@"' _ train-gpu-offload --set offload.optimizer=cpu
step train-torch-cuda 300 sh -c "python3 scripts/peer-torch-gpt-cuda.py --layers 12 --hidden 768 --heads 12 \
  --seq 512 --micro 8 --steps 20 > '$out/train-torch-cuda.txt'"
# The issue's GPU benchmark: a GPT of about 1.3 B parameters (24 layers, d_model 2048, 16
# heads, sequence 1024) in bf16 with fp32 masters on the GPU, beside eager PyTorch under
# bf16 autocast on the same shape (targets: MFU >= 40%, >= 1.05x eager).
big="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set model.seq_len=1024"
step train-gpu-1b3-bf16 420 bash -c 'train_gpu "$@" $big' _ train-gpu-1b3-bf16 --set precision.dtype=bf16 \
  --set batch.micro_batch_size=4 --set train.steps=11
step train-torch-cuda-1b3-bf16 420 sh -c "python3 scripts/peer-torch-gpt-cuda.py --layers 24 --hidden 2048 \
  --heads 16 --seq 1024 --micro 4 --steps 10 --dtype bf16 > '$out/train-torch-cuda-1b3-bf16.txt'"
# A short traced run: compute, comm and copy streams in one Perfetto timeline.
step trace-gpu 120 build-gpu/troupe run configs/tiny-gpt.toml --set cluster.device=cuda --set cluster.world_size=1 \
  --set parallel.dp=1 --set train.steps=5 --set offload.optimizer=cpu --set zero.reduce_bucket_size=16384 \
  --set cluster.coordinator=127.0.0.1:29592 --set trace.path="$out/trace-gpu.json"
cat "$out/train-torch-cuda.txt" "$out/train-torch-cuda-1b3-bf16.txt" 2>/dev/null
for f in "$out"/*.json; do
  [ -f "$f" ] && [ "$(basename "$f")" != trace-gpu.json ] && echo "$(basename "$f"): $(cat "$f")"
done
exit $status
