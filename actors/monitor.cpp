#include "actors/monitor.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <exception>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/protocol/monitor.hpp"
#include "actors/stream.hpp"

namespace troupe {
namespace {

// Internal: the stream wrote one record (or opened the sinks), with what failed doing so.
using wrote_atom = caf::atom_constant<caf::atom("monwrote")>;
using opened_atom = caf::atom_constant<caf::atom("monopened")>;
// Internal: work on the stream threw (its record still completes).
using threw_atom = caf::atom_constant<caf::atom("monthrew")>;

// The sinks and which of them failed: touched on the monitor's stream only (but for the
// flag that cancels what is still queued, which the monitor's owner may set).
struct Sinks {
  std::vector<std::shared_ptr<MonitorSink>> all;
  std::vector<bool> failed;
  std::shared_ptr<std::atomic<bool>> cancelled;

  // `work` on every sink that has not failed; a sink that fails now (an error or an
  // exception) is named in the result and skipped from then on, so each failure is said once.
  template <class Work>
  std::vector<std::string> each(Work&& work) {
    std::vector<std::string> problems;
    for (std::size_t i = 0; i < all.size() && !cancelled->load(); ++i) {
      if (failed[i]) continue;
      std::string why;
      try {
        if (Status done = work(*all[i]); !done) why = done.error().message;
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (why.empty()) continue;
      failed[i] = true;
      problems.push_back(
          fmt::format("{}: {}; it is not written from here on, training goes on", all[i]->where(), why));
    }
    return problems;
  }
};

struct MonitorState {
  MonitorOptions options;
  std::shared_ptr<Sinks> sinks;
  bool opening = true;    // the sinks' open is on the stream
  int64_t in_flight = 0;  // records handed to the stream, not yet written
  int64_t written = 0;
  int64_t dropped = 0;
  std::vector<caf::response_promise> awaiting;
  std::unique_ptr<CpuStream> io;  // last: its thread stops before the rest goes
  static inline const char* name = "monitor";
};
using Monitor = caf::stateful_actor<MonitorState>;

void say(MonitorState& s, const std::string& what) {
  if (s.options.say) return s.options.say(what);
  spdlog::warn("monitor: {}", what);
}

// `work` on the stream; `Done` (wrote_atom or opened_atom) comes back with its problems.
template <class Done>
void enqueue(Monitor* self, std::string label, std::function<std::vector<std::string>(Sinks&)> work) {
  auto& s = self->state;
  auto problems = std::make_shared<std::vector<std::string>>();
  s.io->enqueue(std::move(label),
                [sinks = s.sinks, work = std::move(work), problems] { *problems = work(*sinks); });
  s.io->record().on_complete(
      [me = caf::actor_cast<caf::actor>(self), problems] { caf::anon_send(me, Done::value, *problems); });
}

bool drained(const MonitorState& s) {
  return s.in_flight == 0 && !s.opening;
}

void answer_drained(MonitorState& s) {
  if (!drained(s)) return;
  for (auto& promise : s.awaiting) promise.deliver(monitor_drained{s.written, s.dropped});
  s.awaiting.clear();
}

void on_record(Monitor* self, MonitorRecord record) {
  auto& s = self->state;
  if (s.in_flight >= s.options.queue) {
    if (s.dropped++ == 0)
      say(s, fmt::format("writing is {} records behind; the records of step {} on are dropped until it "
                         "catches up",
                         s.in_flight, record.step));
    return;
  }
  ++s.in_flight;
  const int64_t step = record.step;
  enqueue<wrote_atom>(self, fmt::format("monitor step {}", step), [record = std::move(record)](Sinks& sinks) {
    return sinks.each([&](MonitorSink& sink) { return sink.write(record); });
  });
}

void on_written(Monitor* self, const std::vector<std::string>& problems) {
  auto& s = self->state;
  for (const std::string& problem : problems) say(s, problem);
  --s.in_flight;
  ++s.written;
  answer_drained(s);
}

caf::behavior monitor_behavior(Monitor* self, MonitorOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  s.sinks = std::make_shared<Sinks>();
  s.sinks->all = s.options.sinks;
  s.sinks->failed.assign(s.options.sinks.size(), false);
  s.sinks->cancelled = s.options.cancelled ? s.options.cancelled : std::make_shared<std::atomic<bool>>(false);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  s.io = CpuStream::make("monitor", s.options.tracer, [me](const std::string& what) {
    caf::anon_send(me, threw_atom::value, "the monitor's stream: " + what);
  });
  enqueue<opened_atom>(self, "monitor open", [kept = s.options.kept_through](Sinks& sinks) {
    return sinks.each([&](MonitorSink& sink) { return sink.open(kept); });
  });
  return {
      [=](MonitorRecord& record) { on_record(self, std::move(record)); },
      [=](wrote_atom, const std::vector<std::string>& problems) { on_written(self, problems); },
      [=](opened_atom, const std::vector<std::string>& problems) {
        auto& st = self->state;
        for (const std::string& problem : problems) say(st, problem);
        st.opening = false;
        answer_drained(st);
      },
      [=](threw_atom, const std::string& what) { say(self->state, what); },
      [=](await_monitor) -> caf::result<monitor_drained> {
        auto& st = self->state;
        if (drained(st)) return monitor_drained{st.written, st.dropped};
        st.awaiting.push_back(self->make_response_promise());
        return caf::delegated<monitor_drained>();
      },
  };
}

}  // namespace

caf::actor spawn_monitor(caf::actor_system& system, MonitorOptions options) {
  return system.spawn(monitor_behavior, std::move(options));
}

}  // namespace troupe
