#include "runtime/host_check.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "runtime/estimate.hpp"

namespace troupe {
namespace {

constexpr double kFloatBytes = 4;
// What one more rank process takes from the host before its job's own memory: 32 ranks of
// the tiny GPT took 2.3 GB of MemAvailable (about 73 MiB each: LibTorch's operator registry,
// CAF, UCX, stacks; the libraries' pages are shared). About 200 MiB is resident in each,
// but most of it is those shared pages, so it is not what the host loses per rank.
constexpr double kRankProcessBytes = 80.0 * (1 << 20);

double activation_bytes(const ModelConfig& m, int64_t micro_batch) {
  const double b = static_cast<double>(micro_batch), s = static_cast<double>(m.seq_len);
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.d_ff);
  const double heads = static_cast<double>(m.n_heads), vocab = static_cast<double>(m.vocab_size);
  // Attention through scaled_dot_product_attention keeps no s × s scores, only a row
  // log-sum-exp per head; LLaMA's SwiGLU keeps three d_ff-wide tensors to GPT's two.
  const bool llama = m.type == "llama";
  const double kv = static_cast<double>(m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads) / heads;
  const double per_block = llama ? 8 * b * s * d + 2 * b * s * d * kv + 4 * b * s * f + b * heads * s
                                 : 10 * b * s * d + 2 * b * s * f + b * heads * s;
  return kFloatBytes * (static_cast<double>(m.n_layers) * per_block + 2 * b * s * d + 3 * b * s * vocab);
}

double corpus_bytes(const DataConfig& data) {
  if (data.path.empty()) return static_cast<double>(data.synthetic_bytes);
  struct stat st {};
  return ::stat(data.path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) : 0;
}

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

// A directory the run will write into: it must exist, be a directory and be writable.
Status writable_directory(const std::string& dir, const std::string& what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return make_error(fmt::format("{}: the directory {} {}", what, dir,
                                  errno == ENOENT ? "does not exist" : std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) return make_error(fmt::format("{}: {} is not a directory", what, dir));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return make_error(fmt::format("{}: cannot write in {}: {}", what, dir, std::strerror(errno)));
  return {};
}

std::string parent_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// A file the run will create or replace: its directory must be writable, and the path
// itself must not be a directory.
Status writable_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return make_error(fmt::format("{}: {} is a directory, not a file", what, path));
  return writable_directory(parent_of(path), fmt::format("{} {}", what, path));
}

}  // namespace

Result<RankMemoryDemand> rank_memory_demand(const JobConfig& job) {
  auto estimate = estimate_job(job);
  if (!estimate) return estimate.error();
  RankMemoryDemand d;
  const MemoryBytes& b = estimate->bytes;
  for (int64_t bytes : b.bytes) d.model_states += static_cast<double>(bytes);
  d.activations = activation_bytes(job.model, job.batch.micro_batch_size);
  d.corpus = corpus_bytes(job.data);
  d.process = kRankProcessBytes;
  return d;
}

Result<int64_t> host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") return kib * 1024;
  }
  return make_error("cannot read MemAvailable from /proc/meminfo");
}

Status check_host_memory(const JobConfig& job, int64_t local_ranks, const std::string& who) {
  auto demand = rank_memory_demand(job);
  if (!demand) return demand.error();
  auto available = host_available_bytes();
  if (!available) return available.error();
  const double needed = demand->total() * static_cast<double>(local_ranks);
  if (needed <= static_cast<double>(*available)) return {};
  return make_error(fmt::format(
      "{}: {} need at least {} of memory but this machine has {} available: each rank {} (model "
      "states {}, activations of one micro-batch {}, corpus {}, the process itself {}); make the model, "
      "micro_batch_size or ranks smaller, raise the ZeRO stage, or offload the optimizer state",
      job.source, who, gib(needed), gib(static_cast<double>(*available)), gib(demand->total()),
      gib(demand->model_states), gib(demand->activations), gib(demand->corpus), gib(demand->process)));
}

Status check_output_paths(const JobConfig& job, const std::string& metrics_path) {
  const OffloadConfig& o = job.offload;
  if ((o.optimizer == OffloadTier::nvme || o.param == OffloadTier::nvme) && !o.nvme_path.empty()) {
    struct stat st {};
    const bool exists = ::stat(o.nvme_path.c_str(), &st) == 0;
    // The tier's directory is made by the ranks when missing, so its parent must do.
    TROUPE_TRY(exists ? writable_directory(o.nvme_path, "[offload] nvme_path")
                      : writable_directory(parent_of(o.nvme_path),
                                           fmt::format("[offload] nvme_path {} (to be made)", o.nvme_path)));
  }
  for (const auto& [path, what] : {std::pair{metrics_path, std::string("--metrics")},
                                   std::pair{job.train.metrics_path, std::string("[train] metrics_path")},
                                   std::pair{job.trace.path, std::string("[trace] path")}}) {
    if (!path.empty()) TROUPE_TRY(writable_file(path, what));
  }
  return {};
}

}  // namespace troupe
