// What one device of a cluster can do, as the simulator's cost models need it: matrix
// products per dtype, memory bandwidth and size, optimizer update rate, the host link, and
// the transport and NVMe figures of the machine it sits in.
//
// A device is either measured (`troupe profile-device --json` on the machine itself) or a
// preset for hardware that is not here, its figures taken from published sources that the
// preset names (device_presets()).
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace troupe::sim {

/// One measured matrix product: [m, k] · [k, n] in `dtype`.
struct GemmSample {
  std::string dtype;
  int64_t m = 0, k = 0, n = 0;
  double flops_per_s = 0;
};

struct DeviceSpec {
  std::string name;    ///< "h200-sxm", or the host's name for a profiled machine
  std::string kind;    ///< "gpu" or "cpu"
  std::string source;  ///< where the figures come from (a datasheet, or "measured on HOST at DATE")
  /// Dense matrix-product FLOP/s by dtype ("fp32", "bf16", "fp16"): the best a large
  /// product reaches (measured), or the datasheet's peak (presets).
  std::map<std::string, double> gemm_flops;
  std::vector<GemmSample> gemm_samples;      ///< measured only: every shape tried
  double memory_bandwidth = 0;               ///< bytes/s the device's memory streams
  int64_t memory_bytes = 0;                  ///< what one rank may hold
  int64_t cores = 0;                         ///< cpu: the cores a host's ranks share
  int64_t compute_threads = 0;               ///< cpu: the threads the layers were measured with
  double optimizer_elements_per_s = 0;       ///< fused Adam updates per second on the device
  double host_optimizer_elements_per_s = 0;  ///< gpu: the host's CPU Adam, per rank (offload)
  double host_link_bandwidth = 0;            ///< gpu: device ↔ host bytes/s per direction (PCIe)
  double transport_bandwidth = 0;            ///< host-to-host transport bytes/s (measured) or 0
  double transport_latency_s = 0;            ///< its one-way latency
  /// A tensor's transfer between two ranks of the host as pipeline stages make it (from a
  /// stage's compute end through its stage actor, comm agent and transport to the waiting
  /// neighbour's compute start: `troupe bench pipeline --spin`), less its bytes over
  /// transport_bandwidth: the wake-ups on both sides, by the host's rank count (2, and twice
  /// its cores: the others computing, the transport not polling).
  std::map<int64_t, double> transport_hop_latency_by_ranks;
  /// Measured: the bus bandwidth (nccl-tests' busbw) of troupe's own collectives between
  /// the ranks of one host, by "all_reduce", "reduce_scatter", "all_gather"; where a
  /// collective's reduction and copies run on the CPU they are well below the transport's.
  std::map<std::string, double> collective_busbw;
  /// The same with more ranks on the host, by their number (twice its cores when measured):
  /// ranks that time-slice the cores wait for them at every hop of a ring.
  std::map<int64_t, std::map<std::string, double>> collective_busbw_by_ranks;
  /// The same between two ranks of which each keeps a core busy meanwhile (`troupe bench
  /// --beside-compute`), as a rank's gradients are reduced beside its next compute: the
  /// collective gets the share of the cores the computes leave it, and each of its hops
  /// waits for the other side's thread to be woken on a core that computes.
  std::map<std::string, double> collective_busbw_beside_compute;
  double nvme_read = 0;                      ///< bytes/s per host
  double nvme_write = 0;

  /// The GEMM rate of `dtype`; fp32's when the dtype has none; an error when neither is known.
  Result<double> gemm_rate(std::string_view dtype) const;
};

/// The presets' names: "h100-sxm", "h200-sxm".
std::vector<std::string> device_preset_names();
/// A preset by name; an error lists the presets.
Result<DeviceSpec> device_preset(std::string_view name);

/// The device file `troupe profile-device --json` writes, as one JSON object.
std::string device_json(const DeviceSpec& device);
/// Reads a device file; an error names the file and the field that is missing or wrong.
Result<DeviceSpec> load_device_file(const std::string& path);

}  // namespace troupe::sim
