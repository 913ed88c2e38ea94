// `troupe bench adam`: the fused CPU AdamW step (fp32, kernels/cpu/optimizer.hpp) over one flat
// buffer of `params` parameters in this process, timed the way the torch-adamw.sh peer times
// its loops: one warm-up step (which also faults the pages in), then `iters` steps, the best of
// them reported. Prints
//   bench=adam params=N isa=avx512 threads=T Mparams_per_s=X GBps=Y
// — or with --json one object with the same keys plus the median — where GBps counts the 28
// bytes a parameter moves (p, g, m, v in; p, m, v out). TROUPE_KERNEL_ISA picks the path.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

struct AdamBenchOptions {
  int64_t params = int64_t{1} << 26;  ///< fp32 parameters: 28 bytes of traffic each per step
  int64_t iters = 5;                  ///< timed steps after the warm-up
  int threads = 0;                    ///< adam_step_parallel's threads (1: inline; 0: every hardware thread)
  bool json = false;
  std::string device = "cpu";  ///< "cuda": the CUDA kernel on GPU 0 (tools/bench/bench_cuda_adam.cpp)
};

/// `--device cuda`: the fused CUDA AdamW over device buffers, timed with CUDA events, beside
/// the device's own copy bandwidth (a device-to-device cudaMemcpy, read + write counted) as
/// the memory bound. Prints
///   bench=adam device=cuda params=N Mparams_per_s=X GBps=Y copy_GBps=Z fraction_of_copy=F
/// An error sentence (exit 2) where this build has no CUDA or there is no GPU.
int run_bench_cuda_adam(const AdamBenchOptions& options);

/// Runs the benchmark and returns the exit code (errors go to stderr as one sentence).
int run_bench_adam(AdamBenchOptions options);

}  // namespace troupe
