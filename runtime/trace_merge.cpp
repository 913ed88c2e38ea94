#include "runtime/trace_merge.hpp"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

namespace troupe {

std::string rank_trace_path(const std::string& path, int64_t rank) {
  return path + ".rank" + std::to_string(rank);
}

Status merge_traces(const std::vector<std::string>& parts, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& part : parts) {
    std::ifstream in(part);
    if (!in) return make_error("cannot read trace part " + part);
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (json.is_discarded() || !json.is_array())
      return make_error("trace part " + part + " is not a JSON array");
    for (auto& e : json) events.push_back(std::move(e));
  }
  std::ofstream out(path);
  if (!out) return make_error("cannot write trace file " + path);
  out << nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump();
  if (!out) return make_error("writing trace file " + path + " failed");
  for (const auto& part : parts) std::remove(part.c_str());
  return {};
}

}  // namespace troupe
