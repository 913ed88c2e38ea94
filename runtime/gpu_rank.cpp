// GpuRank with CUDA: streams, NCCL (when built with it) and LibTorch's stream guard (when
// the LibTorch found has CUDA; without it open() says why GPU training cannot run).
#include "runtime/gpu_rank.hpp"

#include <torch/torch.h>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cuda_stream.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/staged_comm.hpp"
#include "base/check.hpp"
#include "memory/cuda/pinned.hpp"
#if TROUPE_WITH_NCCL
#include "actors/device_comm.hpp"
#include "transport/nccl_group.hpp"
#endif
#if TROUPE_WITH_TORCH_CUDA
#include <torch/cuda.h>

#include "actors/torch_stream_guard.hpp"
#endif

namespace troupe {

// Where CUDA errors of the rank's streams go: the log, and once there is one, the stage.
// A weak handle: the streams outlive the actor system, and a strong one would keep the
// stage, and through its options the detached collectives actor, alive past the system's
// end, whose destructor would then wait for that actor forever.
struct GpuErrorRoute {
  std::mutex mutex;
  caf::weak_actor_ptr stage;
  void operator()(int device, const std::string& what) {
    spdlog::error("GPU {}: {}", device, what);
    std::lock_guard lock(mutex);
    if (auto strong = stage.lock())
      caf::anon_send(caf::actor_cast<caf::actor>(strong),
                     stage_failed{fmt::format("GPU {}: {}", device, what)});
  }
};

struct GpuRank::Impl {
  int device = 0;
  double timeout_s = 120;
  Tracer* tracer = nullptr;
  std::shared_ptr<CudaStream> compute, h2d, d2h;
  std::unique_ptr<CudaStream> comm;  // handed to the NCCL issuer
#if TROUPE_WITH_NCCL
  NcclGroups nccl;  // by communicator
#endif
  IssuingStream::Scope scope;
  bool staged = false;  // collectives through host memory: no NCCL
  std::shared_ptr<GpuErrorRoute> errors = std::make_shared<GpuErrorRoute>();
};

GpuRank::~GpuRank() = default;

namespace {

// LibTorch must run its kernels on the GPU, on troupe's compute stream.
Result<IssuingStream::Scope> torch_scope([[maybe_unused]] const std::shared_ptr<CudaStream>& compute) {
#if TROUPE_WITH_TORCH_CUDA
  if (!torch::cuda::is_available())
    return make_error("[cluster] device = \"cuda\": LibTorch finds no CUDA device it can use");
  return IssuingStream::Scope([compute] { return std::make_shared<TorchStreamGuard>(*compute); });
#else
  return make_error(
      "[cluster] device = \"cuda\": the LibTorch this troupe was built against has no CUDA; build "
      "troupe against one that has, such as PyTorch's wheel (scripts/setup.sh's), to train on the GPU, "
      "or use device = \"cpu\"");
#endif
}

}  // namespace

Result<std::unique_ptr<GpuRank>> GpuRank::open(Transport& transport, int device, double timeout_s,
                                               Tracer* tracer, bool staged,
                                               [[maybe_unused]] std::vector<CommunicatorId> groups) {
  std::unique_ptr<GpuRank> gpu(new GpuRank());
  gpu->impl_ = std::make_unique<Impl>();
  Impl& m = *gpu->impl_;
  m.device = device;
  m.timeout_s = timeout_s;
  m.tracer = tracer;
  auto on_error = [device, errors = m.errors](const std::string& what) { (*errors)(device, what); };
  auto streams = CudaStreams::make(device, tracer, on_error);
  if (!streams) return streams.error();
  m.compute = std::move(streams->compute);
  m.h2d = std::move(streams->h2d);
  m.d2h = std::move(streams->d2h);
  m.comm = std::move(streams->comm);
  auto scope = torch_scope(m.compute);
  if (!scope) return scope.error();
  m.scope = std::move(*scope);
  m.staged = staged;
#if TROUPE_WITH_NCCL
  if (!staged) {
    auto timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s));
    groups.push_back(world_communicator);
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    for (CommunicatorId comm : groups) {
      auto group = NcclGroup::create(transport, device, timeout, comm);
      if (!group)
        return make_error(fmt::format("starting NCCL (communicator {}): {}", comm, group.error().message));
      m.nccl.emplace(comm, std::move(*group));
    }
  }
#endif
  return gpu;
}

Status GpuRank::adopt(torch::nn::Sequential& model) {
  Impl& m = *impl_;
  auto failure = std::make_shared<std::string>();
  auto issuing = IssuingStream::make("adopt", m.compute, m.scope, m.tracer,
                                     [failure](const std::string& what) { *failure = what; });
  torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(m.device));
  issuing->enqueue("model to device", [&model, device] { model->to(device); });
  auto limit =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(m.timeout_s));
  if (!issuing->record().wait_for(limit))
    return make_error(fmt::format("moving the model to GPU {} took longer than {} s", m.device, m.timeout_s));
  if (!failure->empty()) return make_error(fmt::format("moving the model to GPU {}: {}", m.device, *failure));
  return {};
}

DeviceRank GpuRank::spawn(caf::actor_system& system, [[maybe_unused]] caf::actor comm_agent,
                          [[maybe_unused]] std::shared_ptr<MemoryLedger> ledger, CommunicatorPlaces places) {
  Impl& m = *impl_;
  DeviceRank d;
  d.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(m.device));
  d.memory = Placement::on_device(m.device);
  d.stream = m.compute;
  d.d2h = m.d2h;
  d.h2d = m.h2d;
  d.pin = pin_host;
  d.scope = m.scope;
#if TROUPE_WITH_NCCL
  if (!m.staged) {
    TROUPE_CHECK(!m.nccl.empty(), "GpuRank::spawn is called once");
    d.collectives = spawn_device_comm(system, std::move(comm_agent), std::move(m.nccl), std::move(m.comm));
    return d;
  }
#endif
  d.collectives = spawn_staged_comm(
      system,
      StagedCommOptions{std::move(comm_agent), m.d2h, m.h2d, std::move(places), std::move(ledger), pin_host});
  return d;
}

void GpuRank::report_errors_to(caf::actor stage) {
  std::lock_guard lock(impl_->errors->mutex);
  impl_->errors->stage = caf::actor_cast<caf::weak_actor_ptr>(stage);
}

}  // namespace troupe
