#include "tools/bench/bench_nvme.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memory/aligned_pool.hpp"
#include "memory/nvme_index.hpp"
#include "memory/nvme_store.hpp"

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// The store calls back within its own I/O timeout; this deadline only guards against a
// store that did not.
Result<double> time_nvme_transfer(NvmeStore& store, bool write, const std::string& key, std::byte* data,
                                  int64_t bytes) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  auto done = [promise](Status s) { promise->set_value(std::move(s)); };
  auto start = Clock::now();
  if (write)
    store.write(key, data, static_cast<std::size_t>(bytes), done);
  else
    store.read(key, data, static_cast<std::size_t>(bytes), done);
  auto deadline = std::chrono::seconds(600 + (bytes >> 24));  // plus 1 s per 16 MiB
  if (future.wait_for(deadline) != std::future_status::ready)
    return make_error(fmt::format("the NVMe store did not finish {} {} bytes within {} s",
                                  write ? "writing" : "reading", bytes, deadline.count()));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Status s = future.get();
  if (!s) return s.error();
  return seconds;
}

namespace {

void report(const NvmeBenchOptions& o, const char* rw, double seconds, bool direct) {
  double mbps = static_cast<double>(o.bytes) / seconds / (1 << 20);
  if (o.json) {
    nlohmann::ordered_json line{{"bench", "nvme"},
                                {"rw", rw},
                                {"bytes", o.bytes},
                                {"block", o.block_size},
                                {"qd", o.queue_depth},
                                {"MBps", mbps},
                                {"seconds", seconds},
                                {"direct", direct ? 1 : 0},
                                {"io", direct ? "direct" : "buffered (page cache)"}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("bench=nvme rw=%s bytes=%lld block=%lld qd=%lld MBps=%.1f direct=%d io=%s\n", rw,
                static_cast<long long>(o.bytes), static_cast<long long>(o.block_size),
                static_cast<long long>(o.queue_depth), mbps, direct ? 1 : 0, direct ? "direct" : "buffered");
  }
  std::fflush(stdout);
}

Status bench(const NvmeBenchOptions& o) {
  NvmeStoreOptions store_options;
  store_options.block_size = static_cast<std::size_t>(o.block_size);
  store_options.queue_depth = static_cast<unsigned>(o.queue_depth);
  store_options.direct_io = o.buffered ? DirectIo::never : DirectIo::require;
  auto store = NvmeStore::open(o.dir, store_options);
  if (!store)
    return o.buffered ? store.error()
                      : make_error(store.error().message +
                                   "; its figures would be the page cache's, not the device's (pass "
                                   "--buffered to measure buffered I/O, reported as such)");
  auto pool = AlignedPool::make(
      {static_cast<std::size_t>(o.bytes), 1, nullptr, MemoryKind::communication, "NVMe benchmark buffer"});
  if (!pool) return pool.error();
  std::byte* buffer = (*pool)->try_acquire();
  // Touch every page before timing, with bytes that do not compress or dedupe trivially.
  for (int64_t i = 0; i < o.bytes; i += 8) {
    uint64_t word = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    std::memcpy(buffer + i, &word, static_cast<std::size_t>(std::min<int64_t>(8, o.bytes - i)));
  }
  std::string key = fmt::format("bench-nvme.{}", ::getpid());
  auto written = time_nvme_transfer(**store, true, key, buffer, o.bytes);
  Result<double> read = written ? time_nvme_transfer(**store, false, key, buffer, o.bytes) : written;
  bool direct = (*store)->direct();
  std::string path = (*store)->path_of(key);
  store->reset();  // finish before the files go
  (*pool)->release(buffer);
  ::unlink(path.c_str());
  ::unlink(index_path(path).c_str());
  if (!written) return written.error();
  if (!read) return read.error();
  report(o, "write", *written, direct);
  report(o, "read", *read, direct);
  return {};
}

}  // namespace

int run_bench_nvme(const NvmeBenchOptions& options) {
  Status s = bench(options);
  if (s) return 0;
  std::fprintf(stderr, "troupe: bench nvme: %s\n", s.error().message.c_str());
  return 1;
}

}  // namespace troupe
