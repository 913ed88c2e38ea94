// One rank of the device-path test: the stage of a GPU rank (actors/device_rank.hpp) run on
// the CPU — the compute "device" a CpuStream, collectives staged through the comm agent
// over UCX between real processes, the fused Adam's CPU twin in place of the CUDA kernel —
// beside the plain host path, on the same seeded model and data. Everything a GPU rank
// does apart from the CUDA calls themselves: the IssuingStream, the gradient rows in one
// flat tensor all-reduced with device requests, the device Adam, and the host mirror of
// [offload] with its d2h/h2d copies.
// Usage: device_path_rank PORT MODE STEPS; MODE is host, device, device-offload or
// device-torch (LibTorch's AdamW on the device tensors). Rank 0 prints "loss STEP VALUE"
// per step and "parameter-norm VALUE" at the end.
#include <torch/torch.h>
#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/comm_agent.hpp"
#include "actors/data_loader.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/scheduler.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/scheduler.hpp"
#include "actors/stage.hpp"
#include "actors/staged_comm.hpp"
#include "pipeline/schedule.hpp"
#include "tests/support/rank_transport.hpp"

namespace troupe {
namespace {

constexpr int64_t kFeatures = 12, kOutputs = 3, kGlobalBatch = 8, kAccumulation = 2;

torch::nn::Sequential make_model() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, 24), torch::nn::Tanh(), torch::nn::Linear(24, 24),
                               torch::nn::Tanh(), torch::nn::Linear(24, kOutputs));
}

// Sample i of the stream, the same on every rank and in every mode.
MicroBatch samples(int64_t first, int64_t count) {
  // 16 samples, seen again every other step, so the losses fall.
  auto index = torch::remainder(torch::arange(first, first + count, torch::kFloat32), 16.0).unsqueeze(1);
  auto input = torch::sin(index * torch::arange(1, kFeatures + 1, torch::kFloat32) * 0.37);
  auto target = torch::cos(index * torch::arange(1, kOutputs + 1, torch::kFloat32) * 0.21);
  return MicroBatch{input, target};
}

OptimizerRule adamw() {
  OptimizerRule r;
  r.lr = 1e-2;
  r.weight_decay = 0.01;
  return r;
}

struct Streams {
  std::shared_ptr<Stream> device, d2h, h2d;
};

int train(caf::actor_system& system, caf::actor agent, int64_t rank, int64_t world, const std::string& mode,
          int steps, const Streams& streams) {
  auto model = make_model();
  StageOptions so;
  so.model = model;
  so.loss = [](const torch::Tensor& out, const torch::Tensor& target) {
    return torch::mse_loss(out, target);
  };
  so.dp = world;
  so.rank = rank;
  so.place.world_rank = rank;
  so.place.world_size = world;
  so.collective_timeout_s = 30;
  so.comm_agent = agent;
  so.ledger = std::make_shared<MemoryLedger>();
  so.rule = adamw();
  so.make_optimizer = [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  };
  if (mode == "host" || mode == "device-offload") so.offload = OffloadOptions{};
  if (mode != "host") {
    DeviceRank d;
    d.stream = streams.device;
    d.d2h = streams.d2h;
    d.h2d = streams.h2d;
    d.collectives = spawn_staged_comm(
        system,
        StagedCommOptions{agent, streams.d2h, streams.h2d, world_place(rank, world), so.ledger, nullptr});
    so.device = d;
    if (mode != "device-torch") so.make_optimizer = nullptr;  // the fused device Adam
  }
  caf::actor stage = spawn_stage(system, std::move(so));
  caf::actor loader = spawn_data_loader(
      system,
      DataLoaderOptions{
          samples, kGlobalBatch / world / kAccumulation, kAccumulation, world, rank, 2, nullptr, {}, {}});
  SchedulerOptions sched;
  sched.chunks = {stage};
  sched.data_loader = loader;
  sched.comm_agent = agent;
  sched.program = *pipeline::make_program("1f1b", {1, kAccumulation}, 0);
  sched.micro_count = kAccumulation;
  caf::actor scheduler = spawn_scheduler(system, std::move(sched));
  caf::scoped_actor self{system};
  int failures = 0;
  for (int step = 0; step < steps && failures == 0; ++step)
    self->request(scheduler, std::chrono::seconds(60), train_step{step})
        .receive(
            [&](step_report& r) {
              if (!r.error.empty()) {
                std::fprintf(stderr, "rank %lld step %d: %s\n", static_cast<long long>(rank), step,
                             r.error.c_str());
                ++failures;
              } else if (rank == 0) {
                std::printf("loss %d %.9g\n", step + 1, r.loss);
              }
            },
            [&](caf::error& e) {
              std::fprintf(stderr, "step %d: %s\n", step, system.render(e).c_str());
              ++failures;
            });
  self->request(stage, std::chrono::seconds(60), collect_parameters{})
      .receive(
          [&](parameters_collected& c) {
            if (!c.error.empty() || !c.flat) {
              std::fprintf(stderr, "collect: %s\n", c.error.c_str());
              ++failures;
              return;
            }
            auto flat = torch::from_blob(c.flat->data(), {static_cast<int64_t>(c.flat->bytes() / 4)});
            if (rank == 0) std::printf("parameter-norm %.9g\n", flat.norm().item<double>());
          },
          [&](caf::error& e) {
            std::fprintf(stderr, "collect: %s\n", system.render(e).c_str());
            ++failures;
          });
  for (auto* a : {&scheduler, &loader, &stage}) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  return failures;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  auto transport = troupe::testing::launched_rank_transport(argv[1]);
  if (!transport) return 1;
  const int64_t rank = transport->rank(), world = transport->world_size();
  torch::set_num_threads(1);
  int failures = 0;
  {
    auto fail = [](const std::string& what) { std::fprintf(stderr, "stream: %s\n", what.c_str()); };
    troupe::Streams streams{troupe::CpuStream::make("device", nullptr, fail),
                            troupe::CpuStream::make("d2h", nullptr, fail),
                            troupe::CpuStream::make("h2d", nullptr, fail)};
    caf::actor_system_config config;
    caf::actor_system system{config};
    caf::actor agent = troupe::spawn_comm_agent(system, std::move(transport), nullptr);
    failures = troupe::train(system, agent, rank, world, argv[2], std::atoi(argv[3]), streams);
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  }
  return failures == 0 ? 0 : 1;
}
