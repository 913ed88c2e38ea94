// One rank of the staged-collective test: the staged comm actor (copy out, reduce over UCX
// by the comm agent, copy back) on host memory, with CpuStreams standing in for the d2h and
// h2d streams, in a real multi-process job. Integer-valued floats make every sum exact, so
// each result is checked exactly, including where this rank's block lands.
// Usage: staged_rank PORT; rank and world from TROUPE_RANK / TROUPE_WORLD_SIZE.
#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "actors/comm_agent.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/device_comm.hpp"
#include "actors/staged_comm.hpp"
#include "tests/support/collective_calls.hpp"
#include "tests/support/rank_transport.hpp"

namespace troupe {
namespace {

float value_of(int64_t rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 10 + static_cast<int64_t>(i % 7));
}

bool run(caf::actor_system& system, const caf::actor& staged, testing::DeviceRequest r) {
  uint64_t tag = r.tag;
  auto reply = testing::ask(system, staged, std::move(r), std::chrono::seconds(30));
  if (!reply)
    std::fprintf(stderr, "collective %llu: no reply\n", static_cast<unsigned long long>(tag));
  else if (!reply->error.empty())
    std::fprintf(stderr, "collective %llu: %s\n", static_cast<unsigned long long>(tag), reply->error.c_str());
  return testing::tag_of(reply) == static_cast<int64_t>(tag);
}

int check(int64_t rank, int64_t world, caf::actor_system& system, const caf::actor& staged) {
  const std::size_t n = 1001;
  auto w = static_cast<std::size_t>(world);
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "rank %lld: %s is wrong\n", static_cast<long long>(rank), what);
      ++failures;
    }
  };
  std::vector<float> data(n), input(n * w), output(n * w, -1.0f);
  for (std::size_t i = 0; i < n; ++i) data[i] = value_of(rank, i);
  expect(run(system, staged,
             testing::device_request(1, CollectiveKind::all_reduce, data.data(), data.data(), n)),
         "all_reduce");
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int64_t r = 0; r < world; ++r) sum += value_of(r, i);
    if (data[i] != sum) return expect(false, "all_reduce's sum"), failures;
  }
  // Reduce-scatter: block b of every rank's input sums into rank b's output.
  for (std::size_t i = 0; i < n * w; ++i) input[i] = value_of(rank, i);
  expect(run(system, staged,
             testing::device_request(2, CollectiveKind::reduce_scatter, input.data(), output.data(), n)),
         "reduce_scatter");
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int64_t r = 0; r < world; ++r) sum += value_of(r, static_cast<std::size_t>(rank) * n + i);
    if (output[i] != sum) return expect(false, "reduce_scatter's block"), failures;
  }
  // All-gather: rank r's n values land in block r.
  for (std::size_t i = 0; i < n; ++i) data[i] = value_of(rank, i);
  expect(run(system, staged,
             testing::device_request(3, CollectiveKind::all_gather, data.data(), output.data(), n)),
         "all_gather");
  for (int64_t r = 0; r < world; ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (output[static_cast<std::size_t>(r) * n + i] != value_of(r, i))
        return expect(false, "all_gather's blocks"), failures;
  // Broadcast from rank 1.
  for (std::size_t i = 0; i < n; ++i) data[i] = value_of(rank, i);
  expect(run(system, staged,
             testing::device_request(4, CollectiveKind::broadcast, data.data(), data.data(), n, 1)),
         "broadcast");
  for (std::size_t i = 0; i < n; ++i)
    if (data[i] != value_of(1, i)) return expect(false, "broadcast's values"), failures;
  return failures;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  auto transport = troupe::testing::launched_rank_transport(argv[1]);
  if (!transport) return 1;
  const int64_t rank = transport->rank(), world = transport->world_size();
  int failures = 0;
  {
    caf::actor_system_config config;
    caf::actor_system system{config};
    caf::actor agent = troupe::spawn_comm_agent(system, std::move(transport), nullptr);
    auto fail = [](const std::string& what) { std::fprintf(stderr, "stream: %s\n", what.c_str()); };
    troupe::StagedCommOptions so;
    so.comm_agent = agent;
    so.d2h = std::shared_ptr<troupe::Stream>(troupe::CpuStream::make("d2h", nullptr, fail));
    so.h2d = std::shared_ptr<troupe::Stream>(troupe::CpuStream::make("h2d", nullptr, fail));
    so.places = troupe::world_place(rank, world);
    caf::actor staged = troupe::spawn_staged_comm(system, std::move(so));
    failures = troupe::check(rank, world, system, staged);
    caf::anon_send_exit(staged, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  }
  if (failures == 0) std::printf("rank %lld: staged collectives match\n", static_cast<long long>(rank));
  return failures == 0 ? 0 : 1;
}
