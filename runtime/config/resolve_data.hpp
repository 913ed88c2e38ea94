// [data]: where the tokens come from, checked before any rank starts.
#pragma once

#include <vector>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/origins.hpp"

namespace troupe {

/// The train, validation and test shares in force: [data] split, or its default (969, 30, 1
/// for indexed datasets; every byte of a byte corpus for training).
std::vector<double> data_split(const DataConfig& data);

/// Checks [data] and the validation [train] asks of it: a byte file or the indexed datasets
/// are opened (every claim of each index checked), and the train part (and the validation
/// part when [train] eval_interval > 0) must hold at least one sample of every dataset.
/// Errors name the key and, for a file, the file.
Status resolve_data(const JobConfig& job, const ConfigOrigins& origins);

}  // namespace troupe
