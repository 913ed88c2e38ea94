#include <cstdio>

#include "tools/bench/bench_adam.hpp"

namespace troupe {

int run_bench_cuda_adam(const AdamBenchOptions&) {
  std::fprintf(stderr,
               "troupe: bench adam --device cuda: this troupe was built without CUDA (no CUDA toolkit was "
               "found when it was configured)\n");
  return 2;
}

}  // namespace troupe
