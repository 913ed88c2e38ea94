#include "sim/device.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace troupe::sim {
namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;

// NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS dense BF16/FP16 Tensor Core
// (1,979 with sparsity), 67 TFLOPS FP32, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s (450 per
// direction), PCIe Gen5 128 GB/s (64 per direction). The host optimizer rate: DGX H100's
// two Xeon 8480C with 16 channels of DDR5-4800 (614 GB/s) at Adam's 28 bytes per fp32
// element, half of that bandwidth reached, shared by 8 ranks.
DeviceSpec h100() {
  DeviceSpec d;
  d.name = "h100-sxm";
  d.kind = "gpu";
  d.source =
      "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS dense BF16/FP16, 67 TFLOPS FP32, 80 GB "
      "HBM3 at 3.35 TB/s, PCIe Gen5 64 GB/s per direction; DGX H100 hosts: 8x ConnectX-7 NDR 400 Gb/s, "
      "2x Xeon 8480C with DDR5-4800; NVMe from DeepSpeed's DeepNVMe blog (06-2025, 8x Gen5: 48/26 GB/s)";
  d.gemm_flops = {{"bf16", 989 * kTFLOPS}, {"fp16", 989 * kTFLOPS}, {"fp32", 67 * kTFLOPS}};
  d.memory_bandwidth = 3350 * kGB;
  d.memory_bytes = int64_t{80} * 1000 * 1000 * 1000;
  d.optimizer_elements_per_s = d.memory_bandwidth / 28 * 0.8;  // fused Adam: 28 B per element, 80% of peak
  d.host_optimizer_elements_per_s = 614 * kGB * 0.5 / 28 / 8;
  d.host_link_bandwidth = 64 * kGB;
  d.nvme_read = 48 * kGB;
  d.nvme_write = 26 * kGB;
  return d;
}

// NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100's compute with 141 GB of HBM3e at
// 4.8 TB/s; the rest as the H100 (DGX H200 has DGX H100's network and host).
DeviceSpec h200() {
  DeviceSpec d = h100();
  d.name = "h200-sxm";
  d.source =
      "NVIDIA H200 Tensor Core GPU datasheet (SXM): 989 TFLOPS dense BF16/FP16, 67 TFLOPS FP32, 141 GB "
      "HBM3e at 4.8 TB/s, PCIe Gen5 64 GB/s per direction; DGX H200 hosts: 8x ConnectX-7 NDR 400 Gb/s, "
      "2x Xeon 8480C with DDR5-4800; NVMe from DeepSpeed's DeepNVMe blog (06-2025, ND-H200-v5 8x Gen5: "
      "48/26 GB/s)";
  d.memory_bandwidth = 4800 * kGB;
  d.memory_bytes = int64_t{141} * 1000 * 1000 * 1000;
  d.optimizer_elements_per_s = d.memory_bandwidth / 28 * 0.8;
  return d;
}

template <class T>
Result<T> field(const nlohmann::json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end()) return make_error(fmt::format("{}: the device file has no \"{}\"", path, key));
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return make_error(
        fmt::format("{}: \"{}\" is {}, not the type a device file holds", path, key, it->dump()));
  }
}

// An optional figure measured at several rank counts: {"4": ...}; empty when absent.
template <class T>
Result<std::map<int64_t, T>> by_rank_count(const nlohmann::json& j, const char* key,
                                           const std::string& path) {
  std::map<int64_t, T> figures;
  if (!j.contains(key)) return figures;
  auto read = field<std::map<std::string, T>>(j, key, path);
  if (!read) return read.error();
  for (auto& [ranks, figure] : *read) {
    char* end = nullptr;
    const long long n = std::strtoll(ranks.c_str(), &end, 10);
    if (ranks.empty() || *end != '\0' || n < 2)
      return make_error(
          fmt::format("{}: {} has the key \"{}\"; its keys are rank counts of 2 or more", path, key, ranks));
    figures[n] = std::move(figure);
  }
  return figures;
}

}  // namespace

Result<double> DeviceSpec::gemm_rate(std::string_view dtype) const {
  auto it = gemm_flops.find(std::string(dtype));
  if (it == gemm_flops.end()) it = gemm_flops.find("fp32");
  if (it == gemm_flops.end() || it->second <= 0)
    return make_error(fmt::format("device {} has no matrix-product rate for {}", name, dtype));
  return it->second;
}

std::vector<std::string> device_preset_names() {
  return {"h100-sxm", "h200-sxm"};
}

Result<DeviceSpec> device_preset(std::string_view name) {
  if (name == "h100-sxm") return h100();
  if (name == "h200-sxm") return h200();
  return make_error(fmt::format("no device preset \"{}\"; the presets are {}", name,
                                fmt::join(device_preset_names(), ", ")));
}

std::string device_json(const DeviceSpec& d) {
  nlohmann::ordered_json j;
  j["name"] = d.name;
  j["kind"] = d.kind;
  j["source"] = d.source;
  j["gemm_flops"] = d.gemm_flops;
  nlohmann::ordered_json samples = nlohmann::ordered_json::array();
  for (const GemmSample& g : d.gemm_samples)
    samples.push_back(
        {{"dtype", g.dtype}, {"m", g.m}, {"k", g.k}, {"n", g.n}, {"flops_per_s", g.flops_per_s}});
  j["gemm_samples"] = samples;
  j["memory_bandwidth"] = d.memory_bandwidth;
  j["memory_bytes"] = d.memory_bytes;
  j["cores"] = d.cores;
  j["compute_threads"] = d.compute_threads;
  j["optimizer_elements_per_s"] = d.optimizer_elements_per_s;
  j["host_optimizer_elements_per_s"] = d.host_optimizer_elements_per_s;
  j["host_link_bandwidth"] = d.host_link_bandwidth;
  j["transport_bandwidth"] = d.transport_bandwidth;
  j["transport_latency_s"] = d.transport_latency_s;
  nlohmann::ordered_json hop_latency_by_ranks = nlohmann::ordered_json::object();
  for (const auto& [ranks, seconds] : d.transport_hop_latency_by_ranks)
    hop_latency_by_ranks[std::to_string(ranks)] = seconds;
  j["transport_hop_latency_by_ranks"] = hop_latency_by_ranks;
  j["collective_busbw"] = d.collective_busbw;
  nlohmann::ordered_json by_ranks = nlohmann::ordered_json::object();
  for (const auto& [ranks, busbw] : d.collective_busbw_by_ranks) by_ranks[std::to_string(ranks)] = busbw;
  j["collective_busbw_by_ranks"] = by_ranks;
  j["collective_busbw_beside_compute"] = d.collective_busbw_beside_compute;
  j["nvme_read"] = d.nvme_read;
  j["nvme_write"] = d.nvme_write;
  return j.dump();
}

Result<DeviceSpec> load_device_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("{}: cannot read the device file", path));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error(
        fmt::format("{}: not a device file (one JSON object, as troupe profile-device --json "
                    "writes)",
                    path));
  DeviceSpec d;
  auto name = field<std::string>(j, "name", path);
  auto kind = field<std::string>(j, "kind", path);
  auto gemm = field<std::map<std::string, double>>(j, "gemm_flops", path);
  auto bandwidth = field<double>(j, "memory_bandwidth", path);
  auto bytes = field<int64_t>(j, "memory_bytes", path);
  for (const Error* e :
       {name ? nullptr : &name.error(), kind ? nullptr : &kind.error(), gemm ? nullptr : &gemm.error(),
        bandwidth ? nullptr : &bandwidth.error(), bytes ? nullptr : &bytes.error()})
    if (e) return *e;
  d.name = *name;
  d.kind = *kind;
  d.gemm_flops = *gemm;
  d.memory_bandwidth = *bandwidth;
  d.memory_bytes = *bytes;
  if (d.kind != "cpu" && d.kind != "gpu")
    return make_error(fmt::format("{}: \"kind\" is \"{}\"; a device is \"cpu\" or \"gpu\"", path, d.kind));
  d.source = j.value("source", std::string("device file ") + path);
  d.cores = j.value("cores", int64_t{0});
  d.compute_threads = j.value("compute_threads", int64_t{0});
  d.optimizer_elements_per_s = j.value("optimizer_elements_per_s", 0.0);
  d.host_optimizer_elements_per_s = j.value("host_optimizer_elements_per_s", 0.0);
  d.host_link_bandwidth = j.value("host_link_bandwidth", 0.0);
  d.transport_bandwidth = j.value("transport_bandwidth", 0.0);
  d.transport_latency_s = j.value("transport_latency_s", 0.0);
  auto hops = by_rank_count<double>(j, "transport_hop_latency_by_ranks", path);
  if (!hops) return hops.error();
  d.transport_hop_latency_by_ranks = *hops;
  d.collective_busbw = j.value("collective_busbw", std::map<std::string, double>{});
  auto crowded = by_rank_count<std::map<std::string, double>>(j, "collective_busbw_by_ranks", path);
  if (!crowded) return crowded.error();
  d.collective_busbw_by_ranks = *crowded;
  d.collective_busbw_beside_compute =
      j.value("collective_busbw_beside_compute", std::map<std::string, double>{});
  d.nvme_read = j.value("nvme_read", 0.0);
  d.nvme_write = j.value("nvme_write", 0.0);
  for (const auto& s : j.value("gemm_samples", nlohmann::json::array()))
    d.gemm_samples.push_back(GemmSample{s.value("dtype", ""), s.value("m", int64_t{0}),
                                        s.value("k", int64_t{0}), s.value("n", int64_t{0}),
                                        s.value("flops_per_s", 0.0)});
  return d;
}

}  // namespace troupe::sim
