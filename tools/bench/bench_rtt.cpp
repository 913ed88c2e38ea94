#include "tools/bench/bench_rtt.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/comm_agent.hpp"
#include "actors/protocol/comm.hpp"
#include "tools/bench/busy_core.hpp"

namespace troupe {
namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using Clock = std::chrono::steady_clock;
constexpr auto answer_timeout = std::chrono::seconds(10);

// Both ends send with the rank's Courier, from their own thread (see comm_agent.hpp).
caf::behavior echo(caf::event_based_actor*, Courier courier) {
  return {[=](ping_atom, int64_t from, uint64_t sequence, const std::string& pad) {
    courier.send(from, "pinger", 0, caf::make_message(pong_atom::value, sequence, pad));
  }};
}

Status register_as(caf::scoped_actor& self, const caf::actor& agent, const std::string& role,
                   caf::actor actor) {
  Status result = make_error("the comm agent did not answer the registration");
  self->request(agent, answer_timeout, register_actor{role, 0, std::move(actor)})
      .receive([&](collective_done&) { result = {}; }, [&](caf::error&) {});
  return result;
}

// Median and 99th percentile of round trips in µs.
RoundTrips summarized(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return RoundTrips{static_cast<int64_t>(samples.size()), samples[samples.size() / 2],
                    samples[std::min(samples.size() - 1, samples.size() * 99 / 100)]};
}

Result<RoundTrips> ping(caf::scoped_actor& self, const Courier& courier, int64_t payload_bytes,
                        double seconds) {
  std::string pad(static_cast<std::size_t>(payload_bytes), 'x');
  std::vector<double> samples;
  auto end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (uint64_t sequence = 0; Clock::now() < end || samples.size() < 100; ++sequence) {
    auto start = Clock::now();
    courier.send(1, "echo", 0, caf::make_message(ping_atom::value, int64_t{0}, sequence, pad));
    bool answered = false;
    self->receive([&](pong_atom, uint64_t s, const std::string&) { answered = s == sequence; },
                  caf::after(answer_timeout) >> [] {});
    if (!answered) return make_error("rank 1's echo did not answer ping " + std::to_string(sequence));
    if (sequence >= 50)
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return summarized(std::move(samples));
}

// A turn-taking token: each side sleeps until the other hands it over.
class Baton {
 public:
  void pass_to(int side) {
    {
      std::lock_guard lock(mutex_);
      holder_ = side;
    }
    changed_.notify_one();
  }
  void await(int side) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return holder_ == side; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int holder_ = 0;
};

}  // namespace

double measure_wake_pair(int64_t count) {
  Baton baton;
  std::thread other([&] {
    for (int64_t i = 0; i < count; ++i) {
      baton.await(1);
      baton.pass_to(0);
    }
  });
  std::vector<double> samples;
  for (int64_t i = 0; i < count; ++i) {
    auto start = Clock::now();
    baton.pass_to(1);
    baton.await(0);
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  other.join();
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

namespace {

// A transfer's completion, waited for by the thread that reacts to it.
class Arrival {
 public:
  Completion done() {
    return [this](Status s) {
      {
        std::lock_guard lock(mutex_);
        status_ = std::move(s);
        arrived_ = true;
      }
      changed_.notify_one();
    };
  }
  Status await() {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, answer_timeout, [&] { return arrived_; }))
      return make_error("the peer's tensor did not arrive within 10 s");
    arrived_ = false;
    return status_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool arrived_ = false;
  Status status_;
};

// A rank beyond the pair: keeps a core busy, as a computing rank of a crowded host does,
// until the pair is done. Its thread spins apart from the barriers the rank waits in.
Result<RoundTrips> keep_a_core_busy(Transport& transport) {
  Status status;
  {
    BusyCore busy;
    status = transport.barrier_sync();              // the pair registered
    if (status) status = transport.barrier_sync();  // the pair done
  }
  if (!status) return status.error();
  return RoundTrips{};
}

// Holds a core for `ms`, as a stage's compute does between the tensors it passes on.
void compute_for(double ms) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::milli>(ms));
  volatile uint64_t work = 0;
  while (Clock::now() < until) work = work + 1;
}

}  // namespace

Result<RoundTrips> measure_tensor_hops(Transport& transport, int64_t bytes, int64_t round_trips,
                                       double compute_ms) {
  if (transport.rank() >= 2) return keep_a_core_busy(transport);
  std::vector<uint8_t> out(static_cast<std::size_t>(bytes), 1), in(static_cast<std::size_t>(bytes));
  const int64_t peer = 1 - transport.rank();
  Arrival arrival;
  TROUPE_TRY(transport.barrier_sync());
  std::vector<double> samples;
  const int64_t warm = 5;
  for (int64_t i = 0; i < warm + round_trips; ++i) {
    // Each side computes before it answers, so the other's transport has gone to sleep
    // by the time the tensor comes, as between a pipeline's stages.
    const auto start = Clock::now();
    transport.recv(in.data(), in.size(), peer, arrival.done());  // posted ahead, as a stage's
    if (transport.rank() == 0) {
      compute_for(compute_ms);
      transport.send(out.data(), out.size(), peer, [](Status) {});
    }
    TROUPE_TRY(arrival.await());
    if (transport.rank() == 1) {
      compute_for(compute_ms);
      transport.send(out.data(), out.size(), peer, [](Status) {});
    }
    const double took = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (i >= warm) samples.push_back(took - 2e3 * compute_ms);
  }
  TROUPE_TRY(transport.barrier_sync());
  if (transport.rank() != 0) return RoundTrips{};
  return summarized(std::move(samples));
}

Result<RoundTrips> measure_round_trips(std::shared_ptr<Transport> transport, int64_t payload_bytes,
                                       double seconds) {
  if (transport->rank() >= 2) return keep_a_core_busy(*transport);
  caf::actor_system_config config;
  config.set("scheduler.policy", caf::atom("sharing"));
  config.set("scheduler.max-threads", 2);
  caf::actor_system system{config};
  Courier courier;
  caf::actor agent = spawn_comm_agent(system, transport, nullptr, &courier);
  Result<RoundTrips> result = RoundTrips{};
  {
    caf::scoped_actor self{system};
    caf::actor responder;
    Status registered;
    if (transport->rank() == 0) {
      registered = register_as(self, agent, "pinger", caf::actor{self});
    } else {
      responder = system.spawn(echo, courier);
      registered = register_as(self, agent, "echo", responder);
    }
    if (!registered) return registered.error();
    TROUPE_TRY(transport->barrier_sync());  // both ends registered
    if (transport->rank() == 0) result = ping(self, courier, payload_bytes, seconds);
    if (transport->rank() == 0 && result.ok()) result->wake_pair_us = measure_wake_pair(10000);
    auto done = transport->barrier_sync();
    if (result.ok() && !done) result = done.error();
    if (responder) caf::anon_send_exit(responder, caf::exit_reason::user_shutdown);
  }
  caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  return result;
}

}  // namespace troupe
