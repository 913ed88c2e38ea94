// How the offload tier cuts a partition into sub-groups: the rule the offload manager
// follows and `troupe estimate` predicts from. Pure arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"

namespace troupe {

/// Fewer elements than this per sub-group only add I/O requests.
constexpr std::size_t min_sub_group = 1024;

/// The largest sub-group (elements) for `sub_group_size`, such that `buffer_count` swap
/// buffers of `states` fp32 values per element fit `host_budget_bytes` (0 = no limit).
/// An error naming host_budget_bytes when not even min_sub_group fits.
Result<std::size_t> sub_group_limit(int64_t sub_group_size, int64_t host_budget_bytes, int64_t buffer_count,
                                    std::size_t states);

/// Elements per piece of a parameter row on NVMe ([offload] param = "nvme"): the
/// sub-group rule with swap buffers that carry the parameters, and the state too when it
/// is on NVMe (`state_on_nvme`), rounded to whole 4 KiB pages.
Result<std::size_t> parameter_piece_size(int64_t sub_group_size, int64_t host_budget_bytes,
                                         int64_t buffer_count, std::size_t states, bool state_on_nvme);

}  // namespace troupe
