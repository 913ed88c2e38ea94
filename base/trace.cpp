#include "base/trace.hpp"

#include <chrono>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace troupe {

int64_t Tracer::now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

void Tracer::span(std::string_view track, std::string_view name, int64_t start_us, int64_t end_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= events_max) {
    ++dropped_;
    return;
  }
  auto [it, inserted] = tracks_.try_emplace(std::string(track), static_cast<int64_t>(tracks_.size()) + 1);
  events_.push_back(Event{it->second, std::string(name), start_us, std::max<int64_t>(0, end_us - start_us)});
}

void Tracer::settle(std::chrono::milliseconds bound) const {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (open_.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::size_t Tracer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

Status Tracer::write(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", rank_},
                    {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  events.push_back(
      {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  for (const auto& [name, id] : tracks_)
    events.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", id}, {"args", {{"name", name}}}});
  for (const auto& e : events_)
    events.push_back({{"ph", "X"},
                      {"name", e.name},
                      {"pid", rank_},
                      {"tid", e.track},
                      {"ts", e.start_us},
                      {"dur", e.duration_us}});
  if (dropped_ > 0)
    events.push_back(
        {{"ph", "M"}, {"name", "dropped_spans"}, {"pid", rank_}, {"args", {{"count", dropped_}}}});
  std::ofstream out(path);
  if (!out) return make_error("cannot write trace file " + path);
  out << events.dump();
  if (!out) return make_error("writing trace file " + path + " failed");
  return {};
}

}  // namespace troupe
