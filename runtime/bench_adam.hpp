// `troupe bench adam`: the fused CPU AdamW step (fp32, kernels/cpu/optimizer.hpp) over one flat
// buffer of `params` parameters in this process, timed the way the torch-adamw.sh peer times
// its loops: one warm-up step (which also faults the pages in), then `iters` steps, the best of
// them reported. Prints
//   bench=adam params=N isa=avx512 threads=T Mparams_per_s=X GBps=Y
// — or with --json one object with the same keys plus the median — where GBps counts the 28
// bytes a parameter moves (p, g, m, v in; p, m, v out). TROUPE_KERNEL_ISA picks the path.
#pragma once

#include <cstdint>

namespace troupe {

struct AdamBenchOptions {
  int64_t params = int64_t{1} << 26;  ///< fp32 parameters: 28 bytes of traffic each per step
  int64_t iters = 5;                  ///< timed steps after the warm-up
  int threads = 0;                    ///< adam_step_parallel's threads (1: inline; 0: every hardware thread)
  bool json = false;
};

/// Runs the benchmark and returns the exit code (errors go to stderr as one sentence).
int run_bench_adam(AdamBenchOptions options);

}  // namespace troupe
