#include "runtime/overflow_injection.hpp"

#include <cstdlib>
#include <sstream>
#include <string>

namespace troupe {

std::set<int64_t> injected_overflow_steps(std::optional<int64_t> rank) {
  std::set<int64_t> steps;
  const char* value = std::getenv(kInjectOverflowVariable);
  if (value == nullptr) return steps;
  const std::string text = value;
  const auto colon = text.find(':');
  if (colon == std::string::npos) return steps;
  if (rank && std::atoll(text.substr(0, colon).c_str()) != *rank) return steps;
  std::stringstream list(text.substr(colon + 1));
  for (std::string step; std::getline(list, step, ',');)
    if (const long long n = std::atoll(step.c_str()); n > 0) steps.insert(n);
  return steps;
}

}  // namespace troupe
