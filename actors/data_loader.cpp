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

struct DataLoaderState {
  DataLoaderOptions options;
  std::map<int64_t, Slot> slots;  // by linear index step × micro_count + micro; bounded by prefetch
  int64_t next_to_prepare = 0;
  std::unique_ptr<CpuStream> data;  // after slots: its thread stops first
  static inline const char* name = "data_loader";
};
using DataLoader = caf::stateful_actor<DataLoaderState>;

micro_batch_ready answer(const DataLoaderOptions& o, int64_t index, const Slot& slot) {
  return micro_batch_ready{index / o.micro_count, index % o.micro_count, slot.batch,
                           slot.batch ? slot.batch->target.numel() : 0};
}

void prepare_through(DataLoader* self, int64_t last) {
  auto& s = self->state;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (; s.next_to_prepare <= last; ++s.next_to_prepare) {
    int64_t index = s.next_to_prepare;
    Slot* slot = &s.slots[index];  // std::map nodes stay put
    int64_t first = first_sample_of(s.options, index / s.options.micro_count, index % s.options.micro_count);
    s.data->enqueue(fmt::format("prepare micro-batch {}", index),
                    [slot, first, source = s.options.source, count = s.options.micro_batch_size] {
                      try {
                        slot->batch = std::make_shared<MicroBatch>(source(first, count));
                      } catch (const std::exception& e) {
                        slot->error = e.what();
                      }
                    });
    s.data->notify(s.data->record(), me, caf::make_message(prepared_atom::value, index));
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
        int64_t index = f.step * st.options.micro_count + f.micro;
        // Micro-batches before the one asked for will never be asked for again.
        while (!st.slots.empty() && st.slots.begin()->first < index && st.slots.begin()->second.ready)
          st.slots.erase(st.slots.begin());
        if (st.next_to_prepare < index) st.next_to_prepare = index;
        prepare_through(self, index + st.options.prefetch);
        Slot& slot = st.slots[index];
        slot.waiting = self->make_response_promise();
        if (slot.ready) deliver(slot, answer(st.options, index, slot));
      },
      [=](prepared_atom, int64_t index) {
        auto& st = self->state;
        auto it = st.slots.find(index);
        if (it == st.slots.end()) return;
        it->second.ready = true;
        if (it->second.waiting) deliver(it->second, answer(st.options, index, it->second));
      },
  };
}

}  // namespace

int64_t first_sample_of(const DataLoaderOptions& o, int64_t step, int64_t micro) {
  int64_t global = o.micro_batch_size * o.micro_count * o.dp;
  return step * global + (micro * o.dp + o.rank) * o.micro_batch_size;
}

caf::actor spawn_data_loader(caf::actor_system& system, DataLoaderOptions options) {
  return system.spawn(data_loader_behavior, std::move(options));
}

}  // namespace troupe
