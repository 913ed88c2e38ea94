#include "tools/profile/device_profile.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/median.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "memory/host_buffer.hpp"
#include "tools/profile/child_json.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The best of a few runs of `work`, after one that warms up, stopping early past `budget_s`.
template <class Work>
double best_seconds(Work&& work, int runs, double budget_s) {
  work();
  double best = 1e300, spent = 0;
  for (int r = 0; r < runs && spent < budget_s; ++r) {
    auto start = Clock::now();
    work();
    const double took = seconds_since(start);
    best = std::min(best, took);
    spent += took;
  }
  return best;
}

void measure_gemm(sim::DeviceSpec& d, bool quick) {
  const std::vector<std::array<int64_t, 3>> shapes =
      quick ? std::vector<std::array<int64_t, 3>>{{256, 256, 256}, {512, 512, 512}}
            : std::vector<std::array<int64_t, 3>>{{256, 256, 256},
                                                  {1024, 1024, 1024},
                                                  {2048, 2048, 2048},
                                                  {4096, 1024, 4096},
                                                  {2048, 4096, 1024}};
  for (const auto& [dtype, type] :
       {std::pair<const char*, torch::ScalarType>{"fp32", torch::kFloat32}, {"bf16", torch::kBFloat16}}) {
    double best_rate = 0;
    for (const auto& [m, k, n] : shapes) {
      torch::Tensor a = torch::randn({m, k}).to(type), b = torch::randn({k, n}).to(type);
      torch::Tensor c = torch::empty({m, n}, a.options());
      const double s = best_seconds([&] { torch::mm_out(c, a, b); }, 3, quick ? 0.3 : 2.0);
      const double rate = 2.0 * static_cast<double>(m * k * n) / s;
      d.gemm_samples.push_back(sim::GemmSample{dtype, m, k, n, rate});
      best_rate = std::max(best_rate, rate);
    }
    d.gemm_flops[dtype] = best_rate;
  }
}

void measure_memory(sim::DeviceSpec& d, bool quick) {
  const std::size_t bytes = quick ? (std::size_t{64} << 20) : (std::size_t{512} << 20);
  HostBuffer from(bytes), to(bytes);
  std::memset(from.data(), 1, bytes);
  std::memset(to.data(), 2, bytes);
  const double s = best_seconds([&] { std::memcpy(to.data(), from.data(), bytes); }, 5, 5.0);
  d.memory_bandwidth = 2.0 * static_cast<double>(bytes) / s;  // read and written
}

void measure_adam(sim::DeviceSpec& d, bool quick, int threads) {
  const std::size_t n = quick ? (std::size_t{4} << 20) : (std::size_t{32} << 20);
  std::vector<float> p(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  kernels::AdamParams params;
  const double s = best_seconds(
      [&] {
        kernels::adam_step_parallel(p.data(), g.data(), m.data(), v.data(), n, params,
                                    kernels::Precision16::none, nullptr, threads);
      },
      5, 5.0);
  d.optimizer_elements_per_s = static_cast<double>(n) / s;
}

// Each value of `key` that `runs` runs of a benchmark command (JSON lines) printed above 0.
std::vector<double> values_of_runs(const std::string& command, const char* key, int runs) {
  std::vector<double> values;
  for (int k = 0; k < runs; ++k)
    for (const auto& line : json_lines_of(command))
      if (line.contains(key) && line[key].get<double>() > 0) values.push_back(line[key].get<double>());
  return values;
}

// The mean of `key` over `runs` runs of a benchmark command, or the harmonic mean for a rate
// (the mean of its times); 0 when none printed it. A mean, not a median: where ranks
// time-slice the cores a run settles in a fast or a slow way of taking turns (a 16 MB all-gather
// among 4 ranks on 2 cores: 19, 20, 22, 36, 40 and 76 ms in six runs here), and a real job's
// steps draw from the same mix, one collective at a time (10-108 ms within one dp 4 run).
double mean_of_runs(const std::string& command, const char* key, int runs, bool rate) {
  const std::vector<double> values = values_of_runs(command, key, runs);
  if (values.empty()) return 0;
  double sum = 0;
  for (double v : values) sum += rate ? 1 / v : v;
  const auto count = static_cast<double>(values.size());
  return rate ? count / sum : sum / count;
}

// The rank counts a host's transport is measured at: two, and twice the cores (crowded).
std::vector<int64_t> measured_rank_counts(int64_t cores) {
  std::vector<int64_t> counts{2};
  if (2 * cores > 2) counts.push_back(std::min<int64_t>(2 * cores, 16));
  return counts;
}

Status measure_transport(sim::DeviceSpec& d, const DeviceProfileOptions& o) {
  const std::string bytes = o.quick ? "4194304" : "67108864";
  for (const auto& line : json_lines_of(
           fmt::format("{} bench transport --json --bytes {} 2>/dev/null", shell_quoted(o.program), bytes)))
    if (line.contains("MBps")) d.transport_bandwidth = line["MBps"].get<double>() * (1 << 20);
  for (const auto& line :
       json_lines_of(fmt::format("{} bench rtt --json --bytes 64 2>/dev/null", shell_quoted(o.program))))
    if (line.contains("median_us")) d.transport_latency_s = line["median_us"].get<double>() / 2 * 1e-6;
  // A pipeline hop's fixed cost, measured the way stages pass tensors: a 512 KB activation
  // (one here) through each side's stage actor, comm agent and transport, the layers keeping
  // the cores busy as compute does (troupe bench pipeline --spin), from a stage's compute end
  // to its waiting neighbour's start, less the bytes over the bandwidth; two stages, and two
  // stages of as many replicas as fill twice the cores. A bare transport's round trip misses
  // most of it: 0.9-1.9 ms one way here against 2-4 ms a hop between stages. The mean over
  // runs: a missed wake-up costs up to receive_wait_ms, and some runs miss more.
  const int64_t hop_bytes = 524288;
  for (const int64_t ranks : measured_rank_counts(d.cores)) {
    const double hop =
        1e-3 * mean_of_runs(fmt::format("{} bench pipeline --spin --pp 2 --dp {} --bytes {} --layer-ms {} "
                                        "--micro-batches 8 --steps {} --json 2>/dev/null",
                                        shell_quoted(o.program), ranks / 2, hop_bytes, o.quick ? 10 : 20,
                                        o.quick ? 2 : 4),
                            "hop_ms", o.quick ? 1 : 5, false);
    if (hop <= 0 || d.transport_bandwidth <= 0) continue;
    d.transport_hop_latency_by_ranks[ranks] =
        std::max(d.transport_latency_s, hop - static_cast<double>(hop_bytes) / d.transport_bandwidth);
  }
  // troupe's own collectives between two ranks of this host, on a gradient-sized buffer, and
  // among twice as many ranks as cores, the most a host is given here: they time-slice the
  // cores, and how long a ring's hops then wait varies run to run, hence the mean of five.
  const std::string buffer = o.quick ? "4194304" : "16777216";
  const std::pair<const char*, const char*> collectives[] = {
      {"allreduce", "all_reduce"}, {"reduce_scatter", "reduce_scatter"}, {"allgather", "all_gather"}};
  for (const auto& [kind, name] : collectives)
    for (const int64_t ranks : measured_rank_counts(d.cores)) {
      const double busbw =
          1e9 * mean_of_runs(fmt::format("{} bench {} --ranks {} --json --bytes {} 2>/dev/null",
                                         shell_quoted(o.program), kind, ranks, buffer),
                             "busbw_GBps", ranks == 2 || o.quick ? 1 : 5, true);
      if (busbw <= 0) continue;
      if (ranks == 2)
        d.collective_busbw[name] = busbw;
      else
        d.collective_busbw_by_ranks[ranks][name] = busbw;
    }
  // And between two ranks each keeping a core busy meanwhile, as a micro-batch's gradients are
  // reduced beside the next one's compute (ZeRO 2 and 3): here 5-6x slower than when idle where
  // the cores' share alone makes it 2x, as each hop waits for the other side to be woken. The
  // median of five: a spinning thread never pauses as a compute does between its passes, and
  // some runs starve the progress thread (16 MB reduce-scattered in 17, 17, 23, 24 and 130 ms
  // here), which real reductions beside compute do not show (13 MB in 13-14 ms, mean of 40).
  for (const auto& [kind, name] : collectives) {
    const double busbw =
        1e9 * upper_median(values_of_runs(
                  fmt::format("{} bench {} --ranks 2 --beside-compute --json --bytes {} 2>/dev/null",
                              shell_quoted(o.program), kind, buffer),
                  "busbw_GBps", o.quick ? 1 : 5));
    if (busbw > 0) d.collective_busbw_beside_compute[name] = busbw;
  }
  if (d.transport_bandwidth <= 0 || d.transport_latency_s <= 0 || d.collective_busbw.size() < 3)
    return make_error(
        "the transport benchmarks (troupe bench transport, troupe bench rtt) gave no figures; run "
        "them alone to see why");
  return {};
}

Status measure_nvme(sim::DeviceSpec& d, const DeviceProfileOptions& o) {
  const std::string bytes = o.quick ? "67108864" : "1073741824";
  std::string how = "O_DIRECT";
  auto lines = json_lines_of(fmt::format("{} bench nvme --json --dir {} --bytes {} 2>/dev/null",
                                         shell_quoted(o.program), shell_quoted(o.nvme_dir), bytes));
  if (lines.empty()) {  // a file system that refuses O_DIRECT (tmpfs): buffered, and said so
    how = "buffered (the page cache; O_DIRECT refused)";
    lines = json_lines_of(fmt::format("{} bench nvme --json --buffered --dir {} --bytes {} 2>/dev/null",
                                      shell_quoted(o.program), shell_quoted(o.nvme_dir), bytes));
  }
  for (const auto& line : lines) {
    const double rate = line.value("MBps", 0.0) * (1 << 20);
    (line.value("rw", "") == "read" ? d.nvme_read : d.nvme_write) = rate;
  }
  if (d.nvme_read <= 0 || d.nvme_write <= 0)
    return make_error(
        fmt::format("troupe bench nvme --dir {} gave no figures; run it alone to see why", o.nvme_dir));
  d.source += fmt::format("; NVMe in {} {}", o.nvme_dir, how);
  return {};
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "this-host";
  return name;
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char text[32] = {};
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

}  // namespace

Result<sim::DeviceSpec> profile_device(const DeviceProfileOptions& o) {
  sim::DeviceSpec d;
  d.name = host_name();
  d.kind = "cpu";
  d.cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  d.compute_threads = o.threads > 0 ? o.threads : d.cores;
  d.source =
      fmt::format("measured by troupe profile-device on {} ({} cores, {} threads, {} optimizer path) on {}",
                  d.name, d.cores, d.compute_threads, kernels::optimizer_isa(), today());
  torch::set_num_threads(static_cast<int>(d.compute_threads));
  measure_gemm(d, o.quick);
  measure_memory(d, o.quick);
  measure_adam(d, o.quick, static_cast<int>(d.compute_threads));
  d.memory_bytes =
      static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGE_SIZE));
  TROUPE_TRY(measure_transport(d, o));
  if (!o.nvme_dir.empty()) TROUPE_TRY(measure_nvme(d, o));
  return d;
}

int run_device_profile(const DeviceProfileOptions& options) {
  auto d = profile_device(options);
  if (!d) {
    std::fprintf(stderr, "troupe: profile-device: %s\n", d.error().message.c_str());
    return 1;
  }
  if (options.json) {
    std::printf("%s\n", sim::device_json(*d).c_str());
    return 0;
  }
  std::printf("%s\n", d->source.c_str());
  std::printf("  %-6s %6s %6s %6s %12s\n", "dtype", "m", "k", "n", "GFLOP/s");
  for (const sim::GemmSample& g : d->gemm_samples)
    std::printf("  %-6s %6lld %6lld %6lld %12.1f\n", g.dtype.c_str(), static_cast<long long>(g.m),
                static_cast<long long>(g.k), static_cast<long long>(g.n), g.flops_per_s / 1e9);
  std::printf("  memory bandwidth      %.2f GB/s (copy: read + written)\n", d->memory_bandwidth / 1e9);
  std::printf("  fused Adam            %.3f G elements/s\n", d->optimizer_elements_per_s / 1e9);
  std::printf("  transport             %.2f GB/s, %.1f us one way\n", d->transport_bandwidth / 1e9,
              d->transport_latency_s * 1e6);
  for (const auto& [ranks, seconds] : d->transport_hop_latency_by_ranks)
    std::printf("  tensor hop            %.1f us fixed cost, %lld ranks (the others computing)\n",
                seconds * 1e6, static_cast<long long>(ranks));
  for (const auto& [name, busbw] : d->collective_busbw)
    std::printf("  %-21s %.2f GB/s bus bandwidth, 2 ranks\n", name.c_str(), busbw / 1e9);
  for (const auto& [ranks, figures] : d->collective_busbw_by_ranks)
    for (const auto& [name, busbw] : figures)
      std::printf("  %-21s %.2f GB/s bus bandwidth, %lld ranks\n", name.c_str(), busbw / 1e9,
                  static_cast<long long>(ranks));
  for (const auto& [name, busbw] : d->collective_busbw_beside_compute)
    std::printf("  %-21s %.2f GB/s bus bandwidth, 2 ranks each beside a busy core\n", name.c_str(),
                busbw / 1e9);
  if (d->nvme_read > 0)
    std::printf("  NVMe                  read %.2f GB/s, write %.2f GB/s\n", d->nvme_read / 1e9,
                d->nvme_write / 1e9);
  return 0;
}

}  // namespace troupe
