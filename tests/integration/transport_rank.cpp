// One rank of the transport integration tests: joins a cluster over UCX and runs
// collectives on seeded random sizes (0, 1, odd, smaller than the world size, larger
// than a chunk), checking every result exactly. Exits 0 when all match.
// Usage: transport_rank PORT SEED [abort-at-rank]; rank and world from TROUPE_RANK/TROUPE_WORLD_SIZE.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/reduce.hpp"
#include "tests/support/typed_values.hpp"
#include "transport/transport.hpp"

namespace {

using troupe::testing::decode;
using troupe::testing::encode;

int64_t env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoll(v);
}

// Integer-valued floats, so sums are exact whatever the order of addition.
float value_of(int64_t rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int64_t>(i % 13));
}

bool check_all_reduce(troupe::Transport& t, std::size_t count, troupe::ReduceOp op) {
  int64_t n = t.world_size();
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = value_of(t.rank(), i);
  auto s = t.all_reduce_sync(data.data(), count, op);
  if (!s) {
    std::fprintf(stderr, "all_reduce of %zu failed: %s\n", count, s.error().message.c_str());
    return false;
  }
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int64_t r = 0; r < n; ++r) sum += value_of(r, i);
    float expected = op == troupe::ReduceOp::sum ? sum : sum * (1.0f / static_cast<float>(n));
    if (data[i] != expected) {
      std::fprintf(stderr, "all_reduce of %zu: element %zu is %g, expected %g\n", count, i, data[i],
                   expected);
      return false;
    }
  }
  return true;
}

bool check_broadcast(troupe::Transport& t, std::size_t count, int64_t root) {
  std::vector<float> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = value_of(t.rank(), i);
  auto s = t.broadcast_sync(data.data(), count, root);
  if (!s) {
    std::fprintf(stderr, "broadcast of %zu failed: %s\n", count, s.error().message.c_str());
    return false;
  }
  for (std::size_t i = 0; i < count; ++i)
    if (data[i] != value_of(root, i)) {
      std::fprintf(stderr, "broadcast of %zu from %lld: element %zu is %g\n", count,
                   static_cast<long long>(root), i, data[i]);
      return false;
    }
  return true;
}

// Small integers, exact in every type and in sums over a few ranks.
float small_value(int64_t rank, std::size_t i) {
  return static_cast<float>((rank * 7 + static_cast<int64_t>(i)) % 16);
}

// Reduce-scatter then all-gather, out of place, in every type: the sum of every rank's blocks.
bool check_scatter_gather(troupe::Transport& t, std::size_t count, troupe::DataType type) {
  int64_t n = t.world_size(), r = t.rank();
  std::vector<float> mine(count * n);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = small_value(r, i);
  auto input = encode(mine, type);
  std::vector<uint8_t> block(count * troupe::element_bytes(type)), gathered(input.size());
  auto s = t.reduce_scatter_sync(input.data(), block.data(), count, type, troupe::ReduceOp::sum);
  if (s) s = t.all_gather_sync(block.data(), gathered.data(), count, type);
  if (!s) {
    std::fprintf(stderr, "scatter/gather of %zu %s failed: %s\n", count, troupe::data_type_name(type),
                 s.error().message.c_str());
    return false;
  }
  for (std::size_t i = 0; i < mine.size(); ++i) {
    float expected = 0;
    for (int64_t q = 0; q < n; ++q) expected += small_value(q, i);
    if (decode(gathered, i, type) != expected) {
      std::fprintf(stderr, "scatter/gather of %zu %s: element %zu is %g, expected %g\n", count,
                   troupe::data_type_name(type), i, decode(gathered, i, type), expected);
      return false;
    }
  }
  return true;
}

// Every rank sends to its right neighbour and receives from its left, several messages in order.
bool check_point_to_point(troupe::Transport& t) {
  int64_t n = t.world_size(), r = t.rank();
  if (n == 1) return true;
  bool ok = true;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{3} << 20}) {
    std::vector<uint8_t> out(bytes, static_cast<uint8_t>(r + bytes)), in(bytes);
    std::promise<troupe::Status> sent;
    t.send(out.data(), bytes, (r + 1) % n, [&sent](troupe::Status s) { sent.set_value(s); });
    auto got = t.recv_sync(in.data(), bytes, (r + n - 1) % n);
    auto s = sent.get_future().get();
    uint8_t from = static_cast<uint8_t>((r + n - 1) % n + bytes);
    ok = ok && got.ok() && s.ok() &&
         std::all_of(in.begin(), in.end(), [from](uint8_t b) { return b == from; });
  }
  if (!ok) std::fprintf(stderr, "point-to-point exchange failed\n");
  return ok;
}

// Communicators over subsets: even ranks, odd ranks and the world in reverse order, with
// collectives on them in flight at the same time as one on the world.
bool check_communicators(troupe::Transport& t) {
  int64_t n = t.world_size(), r = t.rank();
  std::vector<int64_t> evens, odds, reversed;
  for (int64_t q = 0; q < n; ++q) (q % 2 ? odds : evens).push_back(q);
  for (int64_t q = n - 1; q >= 0; --q) reversed.push_back(q);
  auto even = t.make_communicator(evens);
  auto odd =
      n > 1 ? t.make_communicator(odds) : troupe::Result<troupe::CommunicatorId>(troupe::CommunicatorId{0});
  auto backwards = t.make_communicator(reversed);
  if (!even || !odd || !backwards) {
    std::fprintf(stderr, "make_communicator failed\n");
    return false;
  }
  const auto& group = r % 2 ? odds : evens;
  troupe::CommunicatorId mine = r % 2 ? *odd : *even;
  std::vector<float> in_group(1001), in_world(777, 1.0f), from_last(513, static_cast<float>(r));
  for (std::size_t i = 0; i < in_group.size(); ++i) in_group[i] = value_of(r, i);
  std::promise<troupe::Status> group_done, world_done;
  t.all_reduce(
      in_group.data(), in_group.size(), troupe::DataType::f32, troupe::ReduceOp::sum,
      [&](troupe::Status s) { group_done.set_value(s); }, mine);
  t.all_reduce(in_world.data(), in_world.size(), troupe::ReduceOp::sum,
               [&](troupe::Status s) { world_done.set_value(s); });
  auto b = t.broadcast_sync(from_last.data(), from_last.size(), troupe::DataType::f32, 0,
                            *backwards);  // position 0 is rank n-1
  bool ok = group_done.get_future().get().ok() && world_done.get_future().get().ok() && b.ok();
  for (std::size_t i = 0; ok && i < in_group.size(); ++i) {
    float expected = 0;
    for (int64_t q : group) expected += value_of(q, i);
    ok = in_group[i] == expected;
  }
  ok = ok && in_world[776] == static_cast<float>(n) && from_last[512] == static_cast<float>(n - 1);
  ok = ok && t.position_in(*backwards) == n - 1 - r && t.barrier_sync(mine).ok();
  if (!ok) std::fprintf(stderr, "communicator collectives failed\n");
  return ok;
}

// The last rank enters late; no rank may leave the barrier before it has entered.
bool check_barrier_waits_for_the_last_rank(troupe::Transport& t) {
  using Clock = std::chrono::steady_clock;
  constexpr auto late = std::chrono::milliseconds(300);
  bool last = t.rank() == t.world_size() - 1;
  auto start = Clock::now();
  if (last) std::this_thread::sleep_for(late);
  auto s = t.barrier_sync();
  auto waited = Clock::now() - start;
  if (!s) {
    std::fprintf(stderr, "barrier failed: %s\n", s.error().message.c_str());
    return false;
  }
  if (t.world_size() > 1 && waited < late - std::chrono::milliseconds(50)) {
    std::fprintf(
        stderr, "barrier returned after %lld ms, before the last rank entered\n",
        static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  troupe::TransportOptions o;
  o.rank = env_int("TROUPE_RANK");
  o.world_size = env_int("TROUPE_WORLD_SIZE");
  o.coordinator_port = static_cast<uint16_t>(std::atoi(argv[1]));
  if (const char* host = std::getenv("TROUPE_TEST_COORDINATOR_HOST")) o.coordinator_host = host;
  if (const char* per_host = std::getenv("TROUPE_TEST_RANKS_PER_HOST")) {
    // Pretend ranks [k·n, (k+1)·n) share host k, and reduce in two levels.
    o.host_id = "host-" + std::to_string(o.rank / std::atoll(per_host));
    o.topology = troupe::Topology::two_level;
  }
  o.chunk_bytes = 4096;  // small chunks, so modest sizes span many of them
  o.bootstrap_timeout_s = 30;
  o.collective_timeout_s = argc > 3 && std::string(argv[3]) == "timeout" ? 2 : 30;
  unsigned seed = static_cast<unsigned>(std::atoi(argv[2]));
  auto transport = troupe::Transport::make(o);
  if (!transport) {
    std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(o.rank),
                 transport.error().message.c_str());
    return 1;
  }
  auto& t = **transport;
  std::string mode = argc > 3 ? argv[3] : "";
  if (mode == "timeout") {
    // Rank 1 never joins the all-reduce: rank 0 must fail at its deadline, naming rank 1.
    if (o.rank != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(8));
      return 0;
    }
    std::vector<float> data(1000, 1.0f);
    auto s = t.all_reduce_sync(data.data(), data.size(), troupe::ReduceOp::sum);
    std::printf("rank 0: %s\n", s.ok() ? "no error" : s.error().message.c_str());
    return s.ok() ? 1 : 0;
  }
  if (mode == "die") {
    // Rank 1 dies in the middle of a large all-reduce; rank 0 must fail, naming rank 1.
    std::vector<float> data(64 << 20, 1.0f);  // 256 MiB: tens of milliseconds
    if (o.rank != 0) {
      t.all_reduce(data.data(), data.size(), troupe::ReduceOp::sum, [](troupe::Status) {});
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      std::raise(SIGKILL);
    }
    auto s = t.all_reduce_sync(data.data(), data.size(), troupe::ReduceOp::sum);
    std::printf("rank 0: %s\n", s.ok() ? "no error" : s.error().message.c_str());
    return s.ok() ? 1 : 0;
  }
  if (mode == "members") {
    // The ranks disagree on a communicator's member list: an error on every rank.
    auto c = t.make_communicator(o.rank == 0 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{1, 0});
    std::printf("rank %lld: %s\n", static_cast<long long>(o.rank),
                c ? "no error" : c.error().message.c_str());
    return c ? 1 : 0;
  }
  if (mode == "mismatch") {
    // Rank 0 issues an all-reduce where the others issue a broadcast: an error, not a hang.
    std::vector<float> data(1000, 1.0f);
    auto s = o.rank == 0 ? t.all_reduce_sync(data.data(), data.size(), troupe::ReduceOp::sum)
                         : t.broadcast_sync(data.data(), data.size(), 0);
    std::printf("rank %lld: %s\n", static_cast<long long>(o.rank),
                s.ok() ? "no error" : s.error().message.c_str());
    return s.ok() ? 1 : 0;
  }
  std::vector<std::size_t> sizes = {
      0, 1, 2, 3, static_cast<std::size_t>(o.world_size) - 1, 1001, 4096 / 4 * 3 + 1, 100003};
  std::mt19937 rng(seed);
  for (int i = 0; i < 6; ++i) sizes.push_back(std::uniform_int_distribution<std::size_t>(0, 50000)(rng));
  bool ok = true;
  for (std::size_t count : sizes) {
    ok = ok && check_all_reduce(t, count, troupe::ReduceOp::sum);
    ok = ok && check_all_reduce(t, count, troupe::ReduceOp::average);
    ok = ok && check_broadcast(t, count, static_cast<int64_t>(count % o.world_size));
  }
  for (auto type : {troupe::DataType::f32, troupe::DataType::bf16, troupe::DataType::f16})
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{2049}})
      ok = ok && check_scatter_gather(t, count, type);
  ok = ok && check_point_to_point(t);
  ok = ok && check_communicators(t);
  // Several collectives in flight at once complete in order and correctly.
  std::vector<std::vector<float>> many(5, std::vector<float>(777, 1.0f));
  std::vector<std::promise<troupe::Status>> done(many.size());
  for (std::size_t k = 0; k < many.size(); ++k)
    t.all_reduce(many[k].data(), many[k].size(), troupe::ReduceOp::sum,
                 [&done, k](troupe::Status s) { done[k].set_value(s); });
  for (std::size_t k = 0; k < many.size(); ++k) {
    auto s = done[k].get_future().get();
    ok = ok && s.ok() && many[k][776] == static_cast<float>(o.world_size);
  }
  ok = ok && check_barrier_waits_for_the_last_rank(t);
  std::printf("rank %lld: %s (seed %u, %s)\n", static_cast<long long>(o.rank),
              ok ? "all collectives match" : "MISMATCH", seed, t.two_level() ? "two-level" : "flat");
  return ok ? 0 : 1;
}
