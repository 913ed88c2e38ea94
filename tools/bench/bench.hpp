// `troupe bench`: transport and collective benchmarks over real processes.
//
// run_bench starts its own ranks on this machine (through the launcher), each of
// which runs run_bench_rank; rank 0 prints one line per size — JSON with --json:
// bench, ranks, bytes, seconds, algbw_GBps, busbw_GBps (nccl-tests' conventions:
// all-reduce busbw = algbw × 2(n−1)/n, reduce-scatter and all-gather × (n−1)/n, where
// bytes is the whole buffer); `transport` (two processes, one streaming to the other)
// reports MBps in ucx_perftest's unit, 2^20 bytes per second; `rtt` (two processes)
// reports the median and 99th percentile round trip of an actor message. With
// --beside-compute a collective's line says so ("beside_compute": true).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

struct BenchOptions {
  std::string kind;            ///< transport | allreduce | reduce_scatter | allgather | rtt
  std::vector<int64_t> bytes;  ///< sizes to measure; empty = 1 KiB to 256 MiB, ×4
  int64_t ranks = 2;
  bool json = false;
  double seconds_per_size = 0.5;  ///< measuring time aimed at for each size, after warm-up
  int64_t window = 16;            ///< transport: messages in flight
  /// Collectives: each rank keeps a core busy with a thread of its own while it measures, as
  /// a training rank's compute does while its gradients are reduced.
  bool beside_compute = false;
};

/// A port nobody listens on now on 127.0.0.1, for a benchmark's own coordinator; 0 when
/// none could be had.
int free_port();

/// The kinds of benchmark, for the command line.
const std::vector<std::string>& bench_kinds();

/// Starts options.ranks processes of `troupe bench-rank` and returns the exit code.
int run_bench(const BenchOptions& options, const std::string& troupe_program);

/// One rank of a benchmark (rank and coordinator from the environment).
int run_bench_rank(const BenchOptions& options);

}  // namespace troupe
