#include "actors/data_loader.hpp"

#include <caf/all.hpp>

#include <map>
#include <optional>

#include <fmt/format.h>

#include "actors/stream.hpp"

namespace troupe {
namespace {

using prepared_atom = caf::atom_constant<caf::atom("prepared")>;

struct Slot {
  MicroBatchPtr batch;  // written on the data stream, read after `prepared` arrives
  std::string error;
  bool ready = false;
  std::optional<caf::response_promise> waiting;
};

// The train stream or the validation one: its prepared micro-batches and the next to prepare.
struct Lane {
  std::map<int64_t, Slot> slots;  // by linear index step × micro_count + micro; bounded by prefetch
  int64_t next_to_prepare = 0;
};

struct DataLoaderState {
  DataLoaderOptions options;
  Lane lanes[2];                    // train, validation
  std::unique_ptr<CpuStream> data;  // after lanes: its thread stops first
  static inline const char* name = "data_loader";
};
using DataLoader = caf::stateful_actor<DataLoaderState>;

micro_batch_ready answer(const DataLoaderOptions& o, int64_t index, const Slot& slot) {
  return micro_batch_ready{index / o.micro_count, index % o.micro_count, slot.batch,
                           slot.batch ? slot.batch->target.numel() : 0};
}

void prepare_through(DataLoader* self, int lane, int64_t last) {
  auto& s = self->state;
  Lane& l = s.lanes[lane];
  caf::actor me = caf::actor_cast<caf::actor>(self);
  const MicroBatchSource& source = lane == 0 ? s.options.source : s.options.validation;
  for (; l.next_to_prepare <= last; ++l.next_to_prepare) {
    int64_t index = l.next_to_prepare;
    if (l.slots.count(index)) continue;  // a validation pass's, prepared in the pass before
    Slot* slot = &l.slots[index];        // std::map nodes stay put
    int64_t first =
        first_sample_of(s.options, index / s.options.micro_count, index % s.options.micro_count, lane == 1);
    s.data->enqueue(fmt::format("prepare {}micro-batch {}", lane == 0 ? "" : "validation ", index),
                    [slot, first, source, count = s.options.micro_batch_size] {
                      try {
                        slot->batch = std::make_shared<MicroBatch>(source(first, count));
                      } catch (const std::exception& e) {
                        slot->error = e.what();
                      }
                    });
    s.data->notify(s.data->record(), me, caf::make_message(prepared_atom::value, lane, index));
  }
}

void deliver(Slot& slot, const micro_batch_ready& ready) {
  if (!slot.error.empty())
    slot.waiting->deliver(caf::make_error(caf::sec::runtime_error, slot.error));
  else
    slot.waiting->deliver(ready);
}

caf::behavior data_loader_behavior(DataLoader* self, DataLoaderOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  s.data = CpuStream::make("data", s.options.tracer, nullptr);
  return {
      [=](fetch_micro_batch& f) {
        Tracer::Scope span(self->state.options.tracer, "data_loader", "fetch_micro_batch");
        auto& st = self->state;
        if (f.validation && !st.options.validation) {
          self->make_response_promise().deliver(
              caf::make_error(caf::sec::runtime_error, "the job's [data] split gives validation no share"));
          return;
        }
        const int lane = f.validation ? 1 : 0;
        Lane& l = st.lanes[lane];
        int64_t index = f.step * st.options.micro_count + f.micro;
        // Micro-batches before the one asked for will never be asked for again (a
        // validation pass starts over: its slots are only dropped once prepared).
        while (!l.slots.empty() && l.slots.begin()->first < index && l.slots.begin()->second.ready)
          l.slots.erase(l.slots.begin());
        if (l.next_to_prepare < index || (f.validation && index == 0 && l.slots.count(0) == 0))
          l.next_to_prepare = index;
        prepare_through(self, lane, index + st.options.prefetch);
        Slot& slot = l.slots[index];
        slot.waiting = self->make_response_promise();
        if (slot.ready) deliver(slot, answer(st.options, index, slot));
      },
      [=](data_position& p) {
        // Before the first fetch (a resume): nothing of the old numbering is prepared.
        self->state.options.start = p;
      },
      [=](prepared_atom, int lane, int64_t index) {
        auto& st = self->state;
        auto& slots = st.lanes[lane].slots;
        auto it = slots.find(index);
        if (it == slots.end()) return;
        it->second.ready = true;
        if (it->second.waiting) deliver(it->second, answer(st.options, index, it->second));
      },
  };
}

}  // namespace

int64_t first_sample_of(const DataLoaderOptions& o, int64_t step, int64_t micro, bool validation) {
  int64_t global = o.micro_batch_size * o.micro_count * o.dp;
  const int64_t batch_start = validation ? step * global : o.start.samples_after(step, global);
  return batch_start + (micro * o.dp + o.rank) * o.micro_batch_size;
}

caf::actor spawn_data_loader(caf::actor_system& system, DataLoaderOptions options) {
  return system.spawn(data_loader_behavior, std::move(options));
}

}  // namespace troupe
