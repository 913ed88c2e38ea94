// `troupe bench offload`: one rank's optimizer step with its state on NVMe against the
// two things it overlaps — the same step with the state in memory, and reading plus
// writing the state at the disk's own speed — all measured in the same run.
//
// It runs the offload manager actor (AdamW, fp32) over a partition of --params elements:
// passes with the "cpu" tier, passes with the "nvme" tier under --dir, and a plain
// NvmeStore write and read of the same number of state bytes. It prints
//   bench=offload params=N state_bytes=S cpu_ms=C io_ms=I nvme_ms=T bound_ms=max(C,I) ratio=T/bound
// (JSON with --json), medians over --iters passes after one warm-up pass, and with
// --trace FILE writes a Perfetto trace of the nvme passes ("nvme" track: reads and
// writes; "stream offload": updates).
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

struct OffloadBenchOptions {
  int64_t params = 16 * 1024 * 1024;
  std::string dir;
  int64_t iters = 3;
  int64_t sub_group_size = 4 * 1024 * 1024;
  int64_t buffer_count = 4;
  int64_t block_size = 1048576;
  int64_t queue_depth = 32;
  int64_t threads = 1;
  std::string trace_path;
  bool json = false;
};

int run_offload_bench(const OffloadBenchOptions& options);

}  // namespace troupe
