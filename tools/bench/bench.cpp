#include "tools/bench/bench.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memory/host_buffer.hpp"
#include "runtime/coordinator.hpp"
#include "runtime/launch/environment.hpp"
#include "runtime/launch/launcher.hpp"
#include "tools/bench/bench_rtt.hpp"
#include "tools/bench/busy_core.hpp"
#include "transport/transport.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<int64_t> default_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t b = 1 << 10; b <= (int64_t{256} << 20); b *= 4) sizes.push_back(b);
  return sizes;
}

// Counts completions of asynchronous operations and keeps the first error.
class Completions {
 public:
  Completion make() {
    return [this](Status s) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++done_;
      if (!s && error_.empty()) error_ = s.error().message;
      cv_.notify_all();
    };
  }
  // Waits until at most `in_flight` of `issued` are unfinished.
  Status wait_until(int64_t issued, int64_t in_flight) {
    std::unique_lock<std::mutex> lock(mutex_);
    bool ok = cv_.wait_for(lock, std::chrono::seconds(300),
                           [&] { return !error_.empty() || issued - done_ <= in_flight; });
    if (!error_.empty()) return make_error(error_);
    if (!ok) return make_error("benchmark operations did not complete within 300 s");
    return {};
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t done_ = 0;
  std::string error_;
};

struct Measured {
  double seconds = 0;  // per operation
};

// One collective of `bytes` in the benchmark's buffer.
Status run_collective(Transport& t, const std::string& kind, HostBuffer& buffer, int64_t bytes) {
  std::size_t n = static_cast<std::size_t>(t.world_size());
  std::size_t floats = static_cast<std::size_t>(bytes) / sizeof(float);
  if (kind == "allreduce") return t.all_reduce_sync(buffer.as<float>(), floats, ReduceOp::sum);
  std::size_t per_rank = floats / n;
  float* own = buffer.as<float>() + per_rank * static_cast<std::size_t>(t.rank());
  if (kind == "reduce_scatter")
    return t.reduce_scatter_sync(buffer.as<float>(), own, per_rank, DataType::f32, ReduceOp::sum);
  return t.all_gather_sync(own, buffer.as<float>(), per_rank, DataType::f32);
}

// Times `iterations` back-to-back operations between two barriers, as rank 0 sees it.
Result<Measured> time_collective(Transport& t, const std::string& kind, HostBuffer& buffer, int64_t bytes,
                                 int64_t iterations) {
  TROUPE_TRY(t.barrier_sync());
  auto start = Clock::now();
  for (int64_t i = 0; i < iterations; ++i) TROUPE_TRY(run_collective(t, kind, buffer, bytes));
  double elapsed = seconds_since(start);
  return Measured{elapsed / static_cast<double>(iterations)};
}

// Rank 0 streams `iterations` messages to rank 1 with `window` in flight; rank 1 acknowledges the last.
Result<Measured> time_transport(Transport& t, HostBuffer& buffer, int64_t bytes, int64_t iterations,
                                int64_t window) {
  TROUPE_TRY(t.barrier_sync());
  auto start = Clock::now();
  Completions completions;
  bool sender = t.rank() == 0;
  for (int64_t i = 0; i < iterations; ++i) {
    TROUPE_TRY(completions.wait_until(i, window - 1));
    if (sender)
      t.send(buffer.data(), static_cast<std::size_t>(bytes), 1, completions.make());
    else
      t.recv(buffer.data(), static_cast<std::size_t>(bytes), 0, completions.make());
  }
  TROUPE_TRY(completions.wait_until(iterations, 0));
  uint8_t ack = 0;
  TROUPE_TRY(sender ? t.recv_sync(&ack, 1, 1) : t.send_sync(&ack, 1, 0));
  return Measured{seconds_since(start) / static_cast<double>(iterations)};
}

double bus_factor(const std::string& kind, int64_t n) {
  if (kind == "allreduce") return 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
  if (kind == "transport") return 1.0;
  return static_cast<double>(n - 1) / static_cast<double>(n);
}

void report(const BenchOptions& o, int64_t ranks, int64_t bytes, const Measured& m) {
  nlohmann::ordered_json line{{"bench", o.kind}, {"ranks", ranks}, {"bytes", bytes}, {"seconds", m.seconds}};
  if (o.kind == "transport") {
    line["MBps"] = static_cast<double>(bytes) / m.seconds / (1 << 20);
  } else {
    double algbw = static_cast<double>(bytes) / m.seconds / 1e9;
    line["algbw_GBps"] = algbw;
    line["busbw_GBps"] = algbw * bus_factor(o.kind, ranks);
    if (o.beside_compute) line["beside_compute"] = true;
  }
  if (o.json) {
    std::printf("%s\n", line.dump().c_str());
  } else if (o.kind == "transport") {
    std::printf("%-10s %12lld B  %10.2f us  %10.1f MB/s\n", o.kind.c_str(), static_cast<long long>(bytes),
                m.seconds * 1e6, line["MBps"].get<double>());
  } else {
    std::printf("%-14s ranks %lld %12lld B  %10.2f us  algbw %7.3f GB/s  busbw %7.3f GB/s\n", o.kind.c_str(),
                static_cast<long long>(ranks), static_cast<long long>(bytes), m.seconds * 1e6,
                line["algbw_GBps"].get<double>(), line["busbw_GBps"].get<double>());
  }
  std::fflush(stdout);
}

Result<Measured> measure(Transport& t, const BenchOptions& o, HostBuffer& buffer, int64_t bytes,
                         int64_t iterations) {
  if (o.kind == "transport") return time_transport(t, buffer, bytes, iterations, o.window);
  return time_collective(t, o.kind, buffer, bytes, iterations);
}

// The size actually moved: whole floats, and for reduce-scatter and all-gather whole blocks per rank.
int64_t effective_bytes(const std::string& kind, int64_t bytes, int64_t ranks) {
  if (kind == "transport") return bytes;
  int64_t unit = kind == "allreduce" ? 4 : 4 * ranks;
  return std::max<int64_t>(unit, bytes / unit * unit);
}

// Warm up, pick an iteration count that fills seconds_per_size (rank 0 decides for all), measure.
Status bench_size(Transport& t, const BenchOptions& o, int64_t requested) {
  int64_t bytes = effective_bytes(o.kind, requested, t.world_size());
  HostBuffer buffer(static_cast<std::size_t>(bytes));
  auto warm = measure(t, o, buffer, bytes, 3);
  if (!warm) return warm.error();
  float iterations =
      static_cast<float>(std::clamp<double>(o.seconds_per_size / std::max(warm->seconds, 1e-7), 5, 20000));
  TROUPE_TRY(t.broadcast_sync(&iterations, 1, 0));
  auto m = measure(t, o, buffer, bytes, static_cast<int64_t>(iterations));
  if (!m) return m.error();
  if (t.rank() == 0) report(o, t.world_size(), bytes, *m);
  return {};
}

int round_trips(std::shared_ptr<Transport> transport, const BenchOptions& o) {
  for (int64_t bytes : o.bytes.empty() ? std::vector<int64_t>{8} : o.bytes) {
    auto r = measure_round_trips(transport, bytes, o.seconds_per_size);
    if (!r) {
      std::fprintf(stderr, "troupe: bench rtt of %lld bytes: %s\n", static_cast<long long>(bytes),
                   r.error().message.c_str());
      return 1;
    }
    if (transport->rank() != 0) continue;
    nlohmann::ordered_json line{{"bench", "rtt"},
                                {"ranks", transport->world_size()},
                                {"bytes", bytes},
                                {"samples", r->samples},
                                {"median_us", r->median_us},
                                {"p99_us", r->p99_us},
                                {"wake_pair_us", r->wake_pair_us}};
    if (o.json)
      std::printf("%s\n", line.dump().c_str());
    else
      std::printf(
          "rtt  %8lld B  median %8.2f us  p99 %8.2f us  (%lld round trips); two threads waking each other: "
          "%.2f us\n",
          static_cast<long long>(bytes), r->median_us, r->p99_us, static_cast<long long>(r->samples),
          r->wake_pair_us);
    std::fflush(stdout);
  }
  return 0;
}

// One pipeline hop: half a tensor's round trip between two ranks (bench_rtt.hpp).
int tensor_hops(Transport& transport, const BenchOptions& o) {
  for (int64_t bytes : o.bytes.empty() ? std::vector<int64_t>{524288} : o.bytes) {
    auto r = measure_tensor_hops(transport, bytes, 100, 10);
    if (!r) {
      std::fprintf(stderr, "troupe: bench hop of %lld bytes: %s\n", static_cast<long long>(bytes),
                   r.error().message.c_str());
      return 1;
    }
    if (transport.rank() != 0) continue;
    nlohmann::ordered_json line{
        {"bench", "hop"},        {"ranks", transport.world_size()}, {"bytes", bytes},
        {"samples", r->samples}, {"one_way_us", r->median_us / 2},  {"p99_round_trip_us", r->p99_us}};
    if (o.json)
      std::printf("%s\n", line.dump().c_str());
    else
      std::printf("hop  %8lld B  one way %8.2f us (median of %lld round trips), %lld ranks\n",
                  static_cast<long long>(bytes), r->median_us / 2, static_cast<long long>(r->samples),
                  static_cast<long long>(transport.world_size()));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

// A port nobody listens on now, for the benchmark's own coordinator.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

const std::vector<std::string>& bench_kinds() {
  static const std::vector<std::string> kinds = {"transport", "allreduce", "reduce_scatter",
                                                 "allgather", "rtt",       "hop"};
  return kinds;
}

int run_bench(const BenchOptions& o, const std::string& troupe_program) {
  if (o.beside_compute && (o.kind == "transport" || o.kind == "rtt" || o.kind == "hop")) {
    std::fprintf(stderr,
                 "troupe: bench %s: --beside-compute measures a collective (allreduce, reduce_scatter or "
                 "allgather) beside busy cores; %s has no such form\n",
                 o.kind.c_str(), o.kind.c_str());
    return 2;
  }
  int64_t ranks = o.kind == "transport" ? 2 : o.ranks;
  int port = free_port();
  if (port == 0) {
    std::fprintf(stderr, "troupe: bench: no free port on 127.0.0.1 for the coordinator\n");
    return 1;
  }
  LaunchOptions launch;
  launch.ranks = ranks;
  launch.argv = {troupe_program,
                 "bench-rank",
                 o.kind,
                 "--seconds",
                 fmt::format("{}", o.seconds_per_size),
                 "--window",
                 std::to_string(o.window)};
  for (int64_t b : o.bytes) launch.argv.insert(launch.argv.end(), {"--bytes", std::to_string(b)});
  if (o.json) launch.argv.push_back("--json");
  if (o.beside_compute) launch.argv.push_back("--beside-compute");
  launch.prefix_stdout = false;  // only rank 0 prints results: keep its lines machine-readable
  launch.extra_env = {{"TROUPE_COORDINATOR", fmt::format("127.0.0.1:{}", port)}};
  return launch_ranks(launch);
}

int run_bench_rank(const BenchOptions& o) {
  auto env = detect_rank_environment(process_environment());
  if (!env || !*env) {
    std::fprintf(stderr, "troupe: bench-rank runs under `troupe bench`, which sets its rank\n");
    return 2;
  }
  auto address = parse_host_port((*env)->coordinator, (*env)->source);
  if (!address) {
    std::fprintf(stderr, "troupe: %s\n", address.error().message.c_str());
    return 2;
  }
  TransportOptions options;
  options.rank = (*env)->rank;
  options.world_size = (*env)->world_size;
  options.coordinator_host = address->host;
  options.coordinator_port = address->port;
  if (!ranks_fit_cores((*env)->local_world_size)) options.poll_before_sleep_us = 0;
  auto transport = Transport::make(options);
  if (!transport) {
    std::fprintf(stderr, "troupe: bench: %s\n", transport.error().message.c_str());
    return 1;
  }
  if (o.kind == "rtt") return round_trips(std::move(*transport), o);
  if (o.kind == "hop") return tensor_hops(**transport, o);
  std::optional<BusyCore> computing;
  if (o.beside_compute) computing.emplace();
  for (int64_t bytes : o.bytes.empty() ? default_sizes() : o.bytes) {
    auto done = bench_size(**transport, o, bytes);
    if (!done) {
      std::fprintf(stderr, "troupe: bench %s of %lld bytes: %s\n", o.kind.c_str(),
                   static_cast<long long>(bytes), done.error().message.c_str());
      return 1;
    }
  }
  return (*transport)->barrier_sync().ok() ? 0 : 1;
}

}  // namespace troupe
