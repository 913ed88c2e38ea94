#include "tools/bench/bench_offload.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/offload_manager.hpp"
#include "actors/protocol/offload.hpp"
#include "memory/aligned_pool.hpp"
#include "memory/host_buffer.hpp"
#include "memory/nvme_store.hpp"
#include "tools/bench/bench_nvme.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Milliseconds of each optimizer pass over `partition` with the state in `tier`.
Result<std::vector<double>> time_passes(caf::actor_system& system, const OffloadBenchOptions& o,
                                        const std::string& tier, PartitionSpan partition, Tracer* tracer) {
  OffloadManagerOptions m;
  m.offload.state_on_nvme = tier == "nvme";
  m.offload.nvme_dir = o.dir;
  m.offload.direct_io = DirectIo::require;  // figures of the device, never of the page cache
  m.offload.sub_group_size = o.sub_group_size;
  m.offload.buffer_count = o.buffer_count;
  m.offload.block_size = o.block_size;
  m.offload.queue_depth = o.queue_depth;
  m.rule.kind = OptimizerRule::Kind::adamw;
  m.rule.weight_decay = 0.01;
  m.partition = {partition};
  m.threads = o.threads;
  m.tracer = tracer;
  m.ledger = std::make_shared<MemoryLedger>();
  caf::actor manager = spawn_offload_manager(system, std::move(m));
  caf::scoped_actor self{system};
  std::vector<double> ms;
  for (int64_t i = 0; i <= o.iters; ++i) {  // pass 0 warms up (and, on nvme, writes the first state)
    auto start = Clock::now();
    self->send(manager, optimizer_pass{i + 1, nullptr, {}, 1.0, caf::actor_cast<caf::actor>(self)});
    std::string error;
    self->receive([&](optimizer_pass_done& d) { error = d.error; },
                  caf::after(std::chrono::seconds(600)) >> [&] { error = "a pass took longer than 600 s"; });
    if (!error.empty()) {
      self->send_exit(manager, caf::exit_reason::user_shutdown);
      return make_error(fmt::format("{} pass {}: {}", tier, i, error));
    }
    if (i > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  self->send_exit(manager, caf::exit_reason::user_shutdown);
  return ms;
}

// Milliseconds to write then read `bytes` through the store, as the passes do.
Result<double> time_io(const OffloadBenchOptions& o, std::size_t bytes) {
  NvmeStoreOptions so;
  so.block_size = static_cast<std::size_t>(o.block_size);
  so.queue_depth = static_cast<unsigned>(o.queue_depth);
  auto store = NvmeStore::open(o.dir, so);
  if (!store) return store.error();
  auto pool = AlignedPool::make(AlignedPoolOptions{bytes, 1, nullptr, MemoryKind::communication, "bench"});
  if (!pool) return pool.error();
  auto buffer = (*pool)->acquire(std::chrono::milliseconds(1000));
  if (!buffer) return buffer.error();
  std::memset(*buffer, 1, bytes);
  std::vector<double> ms;
  Status failed;
  for (int64_t i = 0; i < o.iters && failed; ++i) {
    auto w = time_nvme_transfer(**store, true, "bench-io.bin", *buffer, static_cast<int64_t>(bytes));
    auto r = w ? time_nvme_transfer(**store, false, "bench-io.bin", *buffer, static_cast<int64_t>(bytes)) : w;
    if (r)
      ms.push_back((*w + *r) * 1000);
    else
      failed = r.error();
  }
  (*pool)->release(*buffer);  // every buffer goes back before the pool goes
  std::remove((*store)->path_of("bench-io.bin").c_str());
  if (!failed) return failed.error();
  return median(ms);
}

}  // namespace

int run_offload_bench(const OffloadBenchOptions& o) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "troupe bench offload: %s\n", m.c_str());
    return 1;
  };
  if (o.dir.empty()) return fail("--dir names the directory of the nvme tier");
  auto n = static_cast<std::size_t>(o.params);
  HostBuffer params(n * sizeof(float)), grads(n * sizeof(float));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < n; ++i) {
    params.as<float>()[i] = normal(rng);
    grads.as<float>()[i] = normal(rng);
  }
  PartitionSpan partition{params.as<float>(), grads.as<float>(), n, 0, {ParameterRun{0, n, 0}}};
  std::unique_ptr<Tracer> tracer = o.trace_path.empty() ? nullptr : std::make_unique<Tracer>(0);

  caf::actor_system_config config;
  config.set("scheduler.policy", caf::atom("sharing"));
  config.set("scheduler.max-threads", 2);
  caf::actor_system system{config};
  auto cpu = time_passes(system, o, "cpu", partition, nullptr);
  if (!cpu) return fail(cpu.error().message);
  auto nvme = time_passes(system, o, "nvme", partition, tracer.get());
  if (!nvme) return fail(nvme.error().message);
  std::size_t state_bytes = n * 2 * sizeof(float);
  auto io = time_io(o, state_bytes);
  if (!io) return fail(io.error().message);
  if (tracer) {
    auto written = tracer->write(o.trace_path);
    if (!written) return fail(written.error().message);
  }

  double cpu_ms = median(*cpu), nvme_ms = median(*nvme), bound = std::max(cpu_ms, *io);
  if (o.json) {
    nlohmann::json j{
        {"bench", "offload"}, {"params", o.params}, {"state_bytes", state_bytes}, {"cpu_ms", cpu_ms},
        {"io_ms", *io},       {"nvme_ms", nvme_ms}, {"bound_ms", bound},          {"ratio", nvme_ms / bound}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "bench=offload params=%lld state_bytes=%zu cpu_ms=%.1f io_ms=%.1f nvme_ms=%.1f bound_ms=%.1f "
        "ratio=%.3f\n",
        static_cast<long long>(o.params), state_bytes, cpu_ms, *io, nvme_ms, bound, nvme_ms / bound);
  }
  return 0;
}

}  // namespace troupe
