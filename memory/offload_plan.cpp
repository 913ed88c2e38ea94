#include "memory/offload_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe {

Result<std::size_t> sub_group_limit(int64_t sub_group_size, int64_t host_budget_bytes, int64_t buffer_count,
                                    std::size_t states) {
  auto limit = static_cast<std::size_t>(std::max<int64_t>(sub_group_size, 1));
  if (host_budget_bytes == 0 || states == 0) return limit;
  std::size_t per_element = states * sizeof(float) * static_cast<std::size_t>(buffer_count);
  std::size_t fits =
      static_cast<std::size_t>(host_budget_bytes) / per_element / min_sub_group * min_sub_group;
  if (fits < min_sub_group)
    return make_error(
        fmt::format("[offload] host_budget_bytes = {} cannot hold {} swap buffers of even {} elements ({} "
                    "bytes each); raise "
                    "the budget or lower buffer_count",
                    host_budget_bytes, buffer_count, min_sub_group, min_sub_group * states * sizeof(float)));
  return std::min(limit, fits);
}

Result<std::size_t> parameter_piece_size(int64_t sub_group_size, int64_t host_budget_bytes,
                                         int64_t buffer_count, std::size_t states, bool state_on_nvme) {
  auto limit =
      sub_group_limit(sub_group_size, host_budget_bytes, buffer_count, (state_on_nvme ? states : 0) + 1);
  if (!limit) return limit.error();
  return std::max(min_sub_group, *limit / min_sub_group * min_sub_group);
}

}  // namespace troupe
