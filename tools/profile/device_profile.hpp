// `troupe profile-device [--json] [--nvme-dir DIR] [--quick]`: measures this machine into
// a device file for the simulator (sim/device.hpp): matrix-product FLOP/s per dtype and
// shape (LibTorch's GEMM with the threads given), memory bandwidth (a large copy), the
// fused Adam's update rate (troupe's SIMD kernel), the transport's bandwidth and latency
// between two processes (troupe bench transport and rtt, run as children) and the bus
// bandwidth of troupe's all-reduce, reduce-scatter and all-gather between two, and NVMe read
// and write (troupe bench nvme; buffered, and said so, where O_DIRECT is refused).
// Thread safety: run from one thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"
#include "sim/device.hpp"

namespace troupe {

struct DeviceProfileOptions {
  bool json = false;
  bool quick = false;    ///< smaller sizes, for tests: figures in seconds, not minutes
  std::string nvme_dir;  ///< where the NVMe file goes; empty: no NVMe figures
  int64_t threads = 0;   ///< compute threads; 0: every core
  std::string program;   ///< this program, for the benchmark children
};

Result<sim::DeviceSpec> profile_device(const DeviceProfileOptions& options);
/// Runs the command; returns the exit code.
int run_device_profile(const DeviceProfileOptions& options);

}  // namespace troupe
