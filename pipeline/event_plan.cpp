#include "pipeline/event_plan.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipeline/frontier.hpp"

namespace troupe::pipeline {
namespace {

struct ModelRank {
  Frontier frontier;
  std::unique_ptr<EventScheduler> scheduler;
  int64_t busy_until = 0;  // when its last chosen compute ends
  std::vector<Action> order;
};

class EventPlan {
 public:
  EventPlan(std::string_view name, const EventSchedulerFactory& make, const Layout& layout, int64_t m,
            bool split, const Costs& costs)
      : name_(name), layout_(layout), m_(m), costs_(costs), shape_{layout.ranks, m, layout.chunks} {
    for (int64_t r = 0; r < layout.ranks; ++r)
      ranks_.push_back(ModelRank{Frontier(layout, r, m, split), nullptr, 0, {}});
    make_ = make;
  }

  Result<std::vector<std::vector<Action>>> run() {
    try {
      return run_steps();
    } catch (const std::exception& e) {
      return make_error(fmt::format("scheduler \"{}\" threw: {}", name_, e.what()));
    }
  }

 private:
  Result<std::vector<std::vector<Action>>> run_steps() {
    for (int64_t r = 0; r < layout_.ranks; ++r) {
      ModelRank& rank = at(r);
      rank.scheduler = make_(shape_, r);
      if (!rank.scheduler)
        return make_error(fmt::format("scheduler \"{}\" made no scheduler for stage {}", name_, r));
      rank.scheduler->on_event(Event{EventKind::step_started, {}}, rank.frontier.view(shape_, 0, 0));
      for (int64_t c = 0; c < layout_.chunks; ++c)
        if (rank.frontier.loads(c))
          for (int64_t k = 0; k < m_; ++k) post(0, r, {EventKind::batch_loaded, {Op::load, k, c}});
    }
    for (int64_t now = 0;;) {
      while (!events_.empty() && events_.begin()->first <= now) {
        auto [rank, event] = events_.begin()->second;
        events_.erase(events_.begin());
        deliver(now, rank, event);
      }
      for (int64_t r = 0; r < layout_.ranks; ++r) post_receives(now, r);
      if (!events_.empty() && events_.begin()->first <= now) continue;  // arrivals just made possible
      for (int64_t r = 0; r < layout_.ranks; ++r) TROUPE_TRY(decide(now, r));
      if (!events_.empty() && events_.begin()->first <= now) continue;
      if (std::all_of(ranks_.begin(), ranks_.end(),
                      [](const ModelRank& r) { return r.frontier.all_finished(); }))
        break;
      if (events_.empty()) return stuck();
      now = events_.begin()->first;
    }
    std::vector<std::vector<Action>> orders;
    for (ModelRank& r : ranks_) orders.push_back(std::move(r.order));
    return orders;
  }

  ModelRank& at(int64_t rank) { return ranks_[static_cast<std::size_t>(rank)]; }

  void post(int64_t time, int64_t rank, Event event) { events_.emplace(time, std::make_pair(rank, event)); }

  // The frontier first, then the scheduler, which sees the state after the event.
  void deliver(int64_t now, int64_t r, const Event& e) {
    ModelRank& rank = at(r);
    Frontier& f = rank.frontier;
    const Action& a = e.action;
    switch (e.kind) {
      case EventKind::batch_loaded:
        f.loaded(a.micro, a.chunk);
        break;
      case EventKind::activation_arrived:
        f.activation_arrived(a.micro, a.chunk);
        break;
      case EventKind::gradient_arrived:
        f.gradient_arrived(a.micro, a.chunk);
        break;
      case EventKind::compute_finished:
        f.finished(a);
        send_results(now, r, a);
        break;
      default:
        break;
    }
    rank.scheduler->on_event(e, f.view(shape_, 0, 0));
  }

  // A forward's activation goes to the next virtual stage (it arrives once that stage's
  // receive is posted); an input gradient to the previous one, whose receive was posted
  // when it chose the forward.
  void send_results(int64_t now, int64_t r, const Action& a) {
    const int64_t stage = layout_.virtual_stage(r, a.chunk);
    if (a.op == Op::forward && stage + 1 < layout_.virtual_stages()) {
      const auto to = std::make_tuple(layout_.rank_of(stage + 1), layout_.chunk_of(stage + 1), a.micro);
      if (posted_.count(to))
        arrive(now, to, EventKind::activation_arrived);
      else
        unposted_.insert(to);
    } else if (makes_input_gradient(a.op) && stage > 0) {
      arrive(now, std::make_tuple(layout_.rank_of(stage - 1), layout_.chunk_of(stage - 1), a.micro),
             EventKind::gradient_arrived);
    }
  }

  using Place = std::tuple<int64_t, int64_t, int64_t>;  // rank, chunk, micro-batch

  void arrive(int64_t now, const Place& to, EventKind kind) {
    const Op op = kind == EventKind::activation_arrived ? Op::recv_activation : Op::recv_gradient;
    post(now, std::get<0>(to), Event{kind, Action{op, std::get<2>(to), std::get<1>(to)}});
  }

  void post_receives(int64_t now, int64_t r) {
    for (const Action& receive : at(r).frontier.receives_to_post()) {
      const Place place{r, receive.chunk, receive.micro};
      posted_.insert(place);
      if (unposted_.erase(place)) arrive(now, place, EventKind::activation_arrived);
    }
  }

  Status decide(int64_t now, int64_t r) {
    ModelRank& rank = at(r);
    Frontier& f = rank.frontier;
    while (f.running() < kComputeLookahead && !f.all_chosen()) {
      std::optional<Action> pick = rank.scheduler->next(f.view(shape_, 0, 0));
      if (!pick) return {};
      if (Status chosen = f.choose(*pick); !chosen)
        return make_error(fmt::format("scheduler \"{}\" on stage {} {}", name_, r, chosen.error().message));
      const int64_t start = std::max(now, rank.busy_until);
      rank.busy_until = start + costs_.of(pick->op);
      rank.order.push_back(*pick);
      post(rank.busy_until, r, Event{EventKind::compute_finished, *pick});
    }
    return {};
  }

  Error stuck() const {
    std::vector<std::string> ranks;
    for (int64_t r = 0; r < layout_.ranks; ++r) {
      const Frontier& f = ranks_[static_cast<std::size_t>(r)].frontier;
      if (f.all_finished()) continue;
      ranks.push_back(fmt::format("stage {} has {} actions left, ready: {}; waits for {}", r, f.remaining(),
                                  f.ready_names(), f.waiting_for()));
    }
    return make_error(
        fmt::format("scheduler \"{}\" gets stuck on the pipeline at unit costs, choosing nothing "
                    "more: {}",
                    name_, fmt::join(ranks, "; ")));
  }

  std::string name_;
  EventSchedulerFactory make_;
  Layout layout_;
  int64_t m_;
  Costs costs_;
  ScheduleShape shape_;
  std::vector<ModelRank> ranks_;
  std::multimap<int64_t, std::pair<int64_t, Event>> events_;  // by time; in order of posting within one
  std::set<Place> posted_;                                    // activation receives posted
  std::set<Place> unposted_;  // activations sent before their receive was posted
};

}  // namespace

Result<std::vector<std::vector<Action>>> plan_events(std::string_view name, const EventSchedulerFactory& make,
                                                     const Layout& layout, int64_t micro_batches, bool split,
                                                     const Costs& costs) {
  return EventPlan(name, make, layout, micro_batches, split, costs).run();
}

}  // namespace troupe::pipeline
