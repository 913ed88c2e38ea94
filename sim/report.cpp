// The simulation's outputs: the timeline as Chrome-trace JSON, the figures as one JSON
// object and as a report for people (declared in simulation.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/simulation.hpp"

namespace troupe::sim {
namespace {

const char* track_name(Track track) {
  switch (track) {
    case Track::compute:
      return "compute";
    case Track::transfer:
      return "transfers";
    case Track::collective:
      return "collectives";
  }
  return "?";
}

std::string json_text(const std::string& s) {
  return nlohmann::json(s).dump();
}

}  // namespace

std::string timeline_json(const SimulationResult& result) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    if (!first) out += ",\n";
    first = false;
    out += event;
  };
  for (std::size_t r = 0; r < result.places.size(); ++r) {
    const pipeline::RankPlace& p = result.places[r];
    add(fmt::format(
        R"j({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"rank {} (stage {}, replica {}, shard {})"}}}})j",
        r, r, p.stage, p.replica, p.shard));
    add(fmt::format(R"j({{"name":"process_sort_index","ph":"M","pid":{},"args":{{"sort_index":{}}}}})j", r,
                    r));
    for (Track t : {Track::compute, Track::transfer, Track::collective})
      add(fmt::format(R"j({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})j", r,
                      static_cast<int>(t), track_name(t)));
  }
  for (const TimelineEvent& e : result.timeline)
    add(fmt::format(R"j({{"name":{},"cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}}})j",
                    json_text(e.name), track_name(e.track), e.rank, static_cast<int>(e.track),
                    static_cast<double>(e.start) / 1e3, static_cast<double>(e.end - e.start) / 1e3));
  out += "\n]}\n";
  return out;
}

std::string result_json(const SimulationResult& r, const std::string& job, const std::string& cluster) {
  nlohmann::ordered_json j;
  j["file"] = job;
  j["cluster"] = cluster;
  j["ranks"] = r.ranks;
  j["step_ms"] = r.step_ms_median();
  j["step_ms_each"] = r.step_ms;
  j["bubble"] = r.bubble;
  j["exposed_comm_ms"] = r.exposed_comm_ms;
  j["peak_bytes"] = r.peak_bytes;
  j["peak_rank"] = r.peak_rank;
  j["step_flops"] = r.step_flops;
  j["mfu"] = r.mfu;
  const double step_s = r.step_ms_median() / 1e3;
  j["tokens_per_s"] = step_s > 0 ? static_cast<double>(r.tokens) / step_s : 0.0;
  if (r.noise_passes > 0)
    j["compute_noise"] = {{"passes", r.noise_passes}, {"mean", r.noise_mean}, {"p90", r.noise_p90}};
  j["events"] = r.events;
  j["wall_s"] = r.wall_s;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageFigures& s : r.stages)
    stages.push_back({{"stage", s.stage},
                      {"peak_bytes", s.peak_bytes},
                      {"model_state_bytes", s.model_state_bytes},
                      {"communication_bytes", s.communication_bytes},
                      {"activation_bytes", s.activation_bytes},
                      {"bubble", s.bubble},
                      {"busy_ms", s.busy_ms},
                      {"exposed_comm_ms", s.exposed_comm_ms}});
  j["stages"] = stages;
  j["error"] = r.error;
  return j.dump();
}

std::string render_result(const SimulationResult& r, const std::string& job, const std::string& cluster) {
  std::string out = fmt::format("{} on {}: {} ranks, {} steps simulated in {:.2f} s ({} events)\n", job,
                                cluster, r.ranks, r.step_ms.size(), r.wall_s, r.events);
  if (!r.step_ms.empty()) {
    const double step_s = r.step_ms_median() / 1e3;
    out += fmt::format("  step time       {:.3f} ms\n", r.step_ms_median());
    out += fmt::format("  bubble          {:.1f}%\n", 100 * r.bubble);
    out += fmt::format("  exposed comm    {:.3f} ms per step (mean over ranks)\n", r.exposed_comm_ms);
    if (r.noise_passes > 0)
      out += fmt::format(
          "  compute noise   the measured passes replayed: {} ratios to the median, mean {:.3f}, "
          "p90 {:.3f}\n",
          r.noise_passes, r.noise_mean, r.noise_p90);
    out += fmt::format("  peak memory     {:.3f} GB (rank {})\n", static_cast<double>(r.peak_bytes) / 1e9,
                       r.peak_rank);
    out += fmt::format("  throughput      {:.0f} tokens/s, {:.3g} FLOPs per step, MFU {:.1f}%\n",
                       static_cast<double>(r.tokens) / step_s, r.step_flops, 100 * r.mfu);
    out += fmt::format("  {:>5}  {:>14}  {:>12}  {:>16}  {:>7}\n", "stage", "peak GB", "compute ms",
                       "exposed comm ms", "bubble");
    for (const StageFigures& s : r.stages)
      out +=
          fmt::format("  {:>5}  {:>14.3f}  {:>12.3f}  {:>16.3f}  {:>6.1f}%\n", s.stage,
                      static_cast<double>(s.peak_bytes) / 1e9, s.busy_ms, s.exposed_comm_ms, 100 * s.bubble);
  }
  if (!r.error.empty()) out += fmt::format("  the job failed: {}\n", r.error);
  return out;
}

}  // namespace troupe::sim
