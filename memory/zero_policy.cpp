#include "memory/zero_policy.hpp"

#include <fmt/format.h>

#include "base/check.hpp"

namespace troupe {

Result<ZeroPolicy> ZeroPolicy::for_stage(int64_t stage) {
  if (stage < 0 || stage > 3)
    return make_error(fmt::format("ZeRO stage must be 0, 1, 2 or 3, got {}", stage));
  return ZeroPolicy(stage);
}

ZeroPolicy ZeroPolicy::of(int64_t stage) {
  auto policy = for_stage(stage);
  TROUPE_CHECK(policy.ok(), "a validated config names a ZeRO stage of 0 to 3");
  return *policy;
}

}  // namespace troupe
