#include "sim/trace_hops.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::sim {
namespace {

struct Span {
  double start_us = 0, end_us = 0;
};

bool is_compute(const std::string& name) {
  for (const char* kind : {"forward ", "backward ", "backward_input ", "backward_weight "}) {
    const std::size_t n = std::char_traits<char>::length(kind);
    if (name.size() > n && name.compare(0, n, kind) == 0 && std::isdigit(static_cast<unsigned char>(name[n])))
      return true;
  }
  return false;
}

// By rank, the compute spans of its compute thread (the thread with the most compute time:
// autograd's own spans nest inside on the same thread), in time order.
std::map<int64_t, std::vector<Span>> compute_by_rank(const nlohmann::json& trace) {
  const nlohmann::json& events = trace.is_object() ? trace.at("traceEvents") : trace;
  std::map<int64_t, std::map<int64_t, std::vector<Span>>> by_thread;
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") != "X" || !e.contains("name") || !is_compute(e["name"].get<std::string>()))
      continue;
    const double start = e.at("ts").get<double>();
    by_thread[e.at("pid").get<int64_t>()][e.value("tid", int64_t{0})].push_back(
        {start, start + e.at("dur").get<double>()});
  }
  std::map<int64_t, std::vector<Span>> compute;
  for (auto& [rank, threads] : by_thread) {
    const auto busiest = std::max_element(threads.begin(), threads.end(), [](const auto& a, const auto& b) {
      const auto busy = [](const std::vector<Span>& spans) {
        double sum = 0;
        for (const Span& s : spans) sum += s.end_us - s.start_us;
        return sum;
      };
      return busy(a.second) < busy(b.second);
    });
    std::vector<Span>& spans = compute[rank] = std::move(busiest->second);
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.start_us < b.start_us; });
  }
  return compute;
}

}  // namespace

std::vector<double> critical_hops_ms(const nlohmann::json& trace, int64_t pp, bool wraps) {
  constexpr double kNotAWaitUs = 50;
  const auto compute = compute_by_rank(trace);
  std::vector<double> hops;
  for (const auto& [rank, spans] : compute)
    for (std::size_t i = 1; i < spans.size(); ++i) {
      const double from = spans[i - 1].end_us, to = spans[i].start_us;
      if (to - from < kNotAWaitUs) continue;
      double latest = -1;
      const int64_t first = rank / pp * pp, stage = rank % pp;
      std::vector<int64_t> neighbours;
      if (stage > 0 || wraps) neighbours.push_back(first + (stage + pp - 1) % pp);
      if (stage < pp - 1 || wraps) neighbours.push_back(first + (stage + 1) % pp);
      for (const int64_t neighbour : neighbours) {
        if (neighbour == rank) continue;
        auto it = compute.find(neighbour);
        if (it == compute.end()) continue;
        for (const Span& s : it->second)
          if (s.end_us >= from && s.end_us <= to) latest = std::max(latest, s.end_us);
      }
      if (latest >= 0) hops.push_back((to - latest) / 1e3);
    }
  return hops;
}

}  // namespace troupe::sim
