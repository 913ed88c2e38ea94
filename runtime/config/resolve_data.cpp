#include "runtime/config/resolve_data.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/config/schema.hpp"
#include "runtime/config/toml_text.hpp"
#include "runtime/data/indexed_samples.hpp"

namespace troupe {
namespace {

std::string shown(const std::vector<double>& values) {
  std::vector<std::string> text;
  for (double v : values) text.push_back(toml_float(v));
  return fmt::format("[{}]", fmt::join(text, ", "));
}

Status check_split(const std::vector<double>& split, const JobConfig& job, const ConfigOrigins& origins) {
  bool numbers = !split.empty() && split.size() <= 3;
  double sum = 0;
  for (double share : split) {
    numbers = numbers && std::isfinite(share) && share >= 0;
    sum += share;
  }
  if (!numbers || !(sum > 0) || !(split[0] > 0))
    return key_error(origins, "data", "split",
                     fmt::format("split must be {}, with a train share above 0, got {}",
                                 expect_of("data", "split"), shown(split)));
  if (job.train.eval_interval > 0 && (split.size() < 2 || !(split[1] > 0)))
    return key_error(
        origins, "train", "eval_interval",
        fmt::format("eval_interval = {} runs the validation split, but [data] split = {} gives it no "
                    "share; set [data] split, e.g. [98, 2]",
                    job.train.eval_interval, shown(split)));
  return {};
}

Status check_weights(const DataConfig& data, const ConfigOrigins& origins) {
  if (!data.path.empty() && !data.paths.empty())
    return key_error(
        origins, "data", "paths",
        fmt::format("paths (indexed datasets) and path = {} (a byte file) are both set; give one",
                    toml_string(data.path)));
  if (data.weights.empty()) return {};
  if (data.paths.empty())
    return key_error(origins, "data", "weights", "weights blend [data] paths, which is empty");
  if (data.weights.size() != data.paths.size())
    return key_error(origins, "data", "weights",
                     fmt::format("weights has {} entries for {} paths; give one weight per path",
                                 data.weights.size(), data.paths.size()));
  for (std::size_t k = 0; k < data.weights.size(); ++k) {
    if (!(std::isfinite(data.weights[k]) && data.weights[k] > 0))
      return key_error(
          origins, "data", "weights",
          fmt::format("weights[{}] (for {}) must be a positive number, got {}; leave a dataset out "
                      "of paths rather than giving it weight 0",
                      k, toml_string(data.paths[k]), toml_float(data.weights[k])));
  }
  return {};
}

// One part of a byte corpus of `bytes` bytes must hold a sample: more than seq_len + 1 bytes.
Status check_byte_part(int64_t bytes, DataPart part, const JobConfig& job, const ConfigOrigins& origins,
                       const std::string& what) {
  const auto [begin, end] = split_sequences(data_split(job.data), bytes)[static_cast<int>(part)];
  if (end - begin > job.model.seq_len + 1) return {};
  return key_error(
      origins, "data", "split",
      fmt::format("split = {} leaves the {} part of {} {} bytes, but one sample needs more than "
                  "seq_len + 1 = {}",
                  shown(data_split(job.data)), name_of(part), what, end - begin, job.model.seq_len + 1));
}

// data.path, when set, must be a readable file with at least one sample in each part used.
Status check_data_file(const JobConfig& job, const ConfigOrigins& origins) {
  namespace fs = std::filesystem;
  const DataConfig& data = job.data;
  std::error_code error;
  const fs::file_status status = fs::status(data.path, error);
  std::string problem;
  if (!fs::exists(status)) {
    problem = "does not exist";
  } else if (!fs::is_regular_file(status)) {
    problem = "is not a regular file";
  } else if (!std::ifstream(data.path, std::ios::binary)) {
    problem = fmt::format("cannot be opened for reading: {}", std::strerror(errno));
  } else {
    const std::uintmax_t bytes = fs::file_size(data.path, error);
    if (error || bytes <= static_cast<std::uintmax_t>(job.model.seq_len) + 1) {
      problem = fmt::format("holds {} bytes, but one sample needs more than seq_len + 1 = {}",
                            error ? 0 : bytes, job.model.seq_len + 1);
    } else {
      const std::string what = fmt::format("path {}", toml_string(data.path));
      TROUPE_TRY(check_byte_part(static_cast<int64_t>(bytes), DataPart::train, job, origins, what));
      if (job.train.eval_interval > 0)
        TROUPE_TRY(check_byte_part(static_cast<int64_t>(bytes), DataPart::validation, job, origins, what));
    }
  }
  if (problem.empty()) return {};
  return key_error(origins, "data", "path", fmt::format("path \"{}\" {}", data.path, problem));
}

Status check_indexed_datasets(const JobConfig& job, const ConfigOrigins& origins) {
  IndexedSamplesOptions o;
  for (const std::string& prefix : job.data.paths) {
    auto dataset = IndexedDataset::open(prefix);
    if (!dataset) return key_error(origins, "data", "paths", dataset.error().message);
    o.datasets.push_back(std::move(dataset).value());
  }
  o.weights = job.data.weights;
  o.split = data_split(job.data);
  o.seq_len = job.model.seq_len;
  o.vocab_size = job.model.vocab_size;
  for (DataPart part : {DataPart::train, DataPart::validation}) {
    if (part == DataPart::validation && job.train.eval_interval == 0) break;
    o.part = part;
    auto samples = IndexedSamples::make(o);
    if (!samples) return key_error(origins, "data", "paths", samples.error().message);
  }
  return {};
}

}  // namespace

std::vector<double> data_split(const DataConfig& data) {
  if (!data.split.empty()) return data.split;
  if (!data.paths.empty()) return {969, 30, 1};
  return {1};
}

Status resolve_data(const JobConfig& job, const ConfigOrigins& origins) {
  const DataConfig& data = job.data;
  const int64_t seq_len = job.model.seq_len;
  if (data.prefetch_micro_batches < 1 || data.prefetch_micro_batches > 1024)
    return key_error(origins, "data", "prefetch_micro_batches",
                     fmt::format("prefetch_micro_batches must be {}, got {}",
                                 expect_of("data", "prefetch_micro_batches"), data.prefetch_micro_batches));
  if (data.synthetic_bytes > int64_t{1} << 36)
    return key_error(origins, "data", "synthetic_bytes",
                     fmt::format("synthetic_bytes must be {}, got {}", expect_of("data", "synthetic_bytes"),
                                 data.synthetic_bytes));
  // seq_len is positive here, so the subtraction cannot overflow.
  if (data.synthetic_bytes <= seq_len || data.synthetic_bytes - seq_len <= 1) {
    return key_error(origins, "data", "synthetic_bytes",
                     fmt::format("synthetic_bytes must be greater than seq_len + 1 = {}, got {}", seq_len + 1,
                                 data.synthetic_bytes));
  }
  TROUPE_TRY(check_weights(data, origins));
  TROUPE_TRY(check_split(data_split(data), job, origins));
  if (!data.paths.empty()) return check_indexed_datasets(job, origins);
  if (!data.path.empty()) return check_data_file(job, origins);
  TROUPE_TRY(check_byte_part(data.synthetic_bytes, DataPart::train, job, origins, "the synthetic corpus"));
  if (job.train.eval_interval > 0)
    TROUPE_TRY(
        check_byte_part(data.synthetic_bytes, DataPart::validation, job, origins, "the synthetic corpus"));
  return {};
}

}  // namespace troupe
