#include "actors/checkpoint_writer.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/protocol/checkpoint_writer.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/stream.hpp"
#include "memory/checkpoint_dir.hpp"

namespace troupe {
namespace {

// A rank's file list arriving at rank 0: (files_atom, step, rank, files as JSON, error).
using files_atom = caf::atom_constant<caf::atom("ckptfiles")>;
// Internal: the stream wrote this rank's files of a step, or committed one (rank 0).
using written_atom = caf::atom_constant<caf::atom("ckptwrote")>;
using committed_atom = caf::atom_constant<caf::atom("ckptdone")>;
using expired_atom = caf::atom_constant<caf::atom("ckptlate")>;

constexpr const char* kRole = "checkpoint_writer";

// Rank 0: the lists of one step's save, as they arrive.
struct Gathering {
  std::vector<CheckpointFile> files;
  std::vector<bool> arrived;
  int64_t count = 0;
  std::string error;  // the first rank's failure
  bool committing = false;
};

struct WriterState {
  CheckpointWriterOptions options;
  std::map<int64_t, std::string> outcome;                  // by step: the saves done, with their error
  std::multimap<int64_t, caf::response_promise> awaiting;  // by step (-1: every save)
  std::map<int64_t, Gathering> gathering;                  // rank 0, by step
  int64_t writes_in_flight = 0;
  std::unique_ptr<CpuStream> io;  // last: its thread stops before the rest goes
  static inline const char* name = "checkpoint_writer";
};
using Writer = caf::stateful_actor<WriterState>;

bool idle(const WriterState& s) {
  return s.writes_in_flight == 0 && s.gathering.empty();
}

// The save of `step` is done: whoever awaits it hears how, and once nothing is pending,
// whoever awaits every save.
void answer(Writer* self, int64_t step, const std::string& error) {
  auto& s = self->state;
  if (!error.empty()) spdlog::error("rank {}: checkpoint of step {}: {}", s.options.rank, step, error);
  s.outcome[step] = error;
  auto [first, last] = s.awaiting.equal_range(step);
  for (auto it = first; it != last; ++it) it->second.deliver(checkpoint_saved{step, error});
  s.awaiting.erase(first, last);
  if (!idle(s)) return;
  std::string failed;  // the first failure of any save, for whoever waits for them all
  for (const auto& [done, why] : s.outcome)
    if (failed.empty() && !why.empty()) failed = fmt::format("step {}: {}", done, why);
  auto [all_first, all_last] = s.awaiting.equal_range(-1);
  for (auto it = all_first; it != all_last; ++it) it->second.deliver(checkpoint_saved{-1, failed});
  s.awaiting.erase(all_first, all_last);
}

void await(Writer* self, int64_t step) {
  auto& s = self->state;
  auto promise = self->make_response_promise();
  if (auto done = s.outcome.find(step); done != s.outcome.end()) {
    promise.deliver(checkpoint_saved{step, done->second});
    return;
  }
  if (step == -1 && idle(s)) {
    std::string failed;
    for (const auto& [at, why] : s.outcome)
      if (failed.empty() && !why.empty()) failed = fmt::format("step {}: {}", at, why);
    promise.deliver(checkpoint_saved{-1, failed});
    return;
  }
  s.awaiting.emplace(step, std::move(promise));
}

// On the stream: the files into the staging folder, each fsynced; their list as JSON.
void write_files(Writer* self, write_checkpoint w) {
  auto& s = self->state;
  ++s.writes_in_flight;
  auto listed = std::make_shared<std::vector<CheckpointFile>>();
  auto error = std::make_shared<std::string>();
  s.io->enqueue(fmt::format("write checkpoint {}", w.step),
                [root = s.options.root, w, listed, error, delay = s.options.write_delay] {
                  auto dir = join_checkpoint(root, w.step);
                  if (delay.count() > 0) std::this_thread::sleep_for(delay);  // fault injection: a slow disk
                  if (!dir) {
                    *error = dir.error().message;
                    return;
                  }
                  for (const CheckpointBlob& blob : w.files) {
                    auto file = write_checkpoint_file(*dir, blob.name, blob.data, blob.bytes);
                    if (!file) {
                      *error = file.error().message;
                      return;
                    }
                    listed->push_back(*file);
                  }
                });
  s.io->record().on_complete([me = caf::actor_cast<caf::actor>(self), step = w.step, listed, error] {
    caf::anon_send(me, written_atom::value, step, checkpoint_files_json(*listed), *error);
  });
}

void expect(Writer* self, int64_t step) {
  auto& s = self->state;
  Gathering& g = s.gathering[step];
  if (!g.arrived.empty()) return;
  g.arrived.assign(static_cast<std::size_t>(s.options.world_size), false);
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(s.options.timeout_s * 1000)),
                     expired_atom::value, step);
}

// Rank 0: every list is in; commit (the manifest, the rename) and prune on the stream.
void commit(Writer* self, int64_t step) {
  auto& s = self->state;
  Gathering& g = s.gathering[step];
  g.committing = true;
  auto error = std::make_shared<std::string>();
  CheckpointManifest manifest{step, g.files, s.options.meta};
  s.io->enqueue(fmt::format("commit checkpoint {}", step), [o = s.options, manifest, error] {
    if (Status done = commit_checkpoint(o.root, manifest); !done) {
      *error = done.error().message;
      return;
    }
    if (Status pruned = prune_checkpoints(o.root, o.keep_last); !pruned)
      spdlog::warn("pruning checkpoints: {}", pruned.error().message);  // the save itself stands
  });
  s.io->record().on_complete([me = caf::actor_cast<caf::actor>(self), step, error] {
    caf::anon_send(me, committed_atom::value, step, *error);
  });
}

void on_files(Writer* self, int64_t step, int64_t rank, const std::string& json, const std::string& error) {
  auto& s = self->state;
  expect(self, step);
  Gathering& g = s.gathering[step];
  if (rank < 0 || rank >= s.options.world_size || g.arrived[static_cast<std::size_t>(rank)] || g.committing)
    return;
  g.arrived[static_cast<std::size_t>(rank)] = true;
  ++g.count;
  auto files = parse_checkpoint_files_json(json);
  if (g.error.empty() && !error.empty()) g.error = fmt::format("rank {}: {}", rank, error);
  if (g.error.empty() && !files)
    g.error = fmt::format("rank {}'s file list: {}", rank, files.error().message);
  if (files) g.files.insert(g.files.end(), files->begin(), files->end());
  if (g.count < s.options.world_size) return;
  if (!g.error.empty()) {
    std::string why = "not committed: " + g.error;
    s.gathering.erase(step);
    return answer(self, step, why);
  }
  commit(self, step);
}

caf::behavior writer_behavior(Writer* self, CheckpointWriterOptions options) {
  auto& s = self->state;
  s.options = std::move(options);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  s.io = CpuStream::make("checkpoint", s.options.tracer, [me](const std::string& what) {
    caf::anon_send(me, written_atom::value, int64_t{-1}, std::string("[]"), "the checkpoint stream: " + what);
  });
  if (s.options.rank == 0) self->send(s.options.comm_agent, register_actor{kRole, 0, me});
  return {
      [=](write_checkpoint& w) {
        self->state.outcome.erase(w.step);  // saved again (a resumed run)
        write_files(self, std::move(w));
      },
      [=](await_checkpoint& a) { await(self, a.step); },
      [=](written_atom, int64_t step, const std::string& json, const std::string& error) {
        auto& st = self->state;
        --st.writes_in_flight;
        if (st.options.rank == 0) return on_files(self, step, 0, json, error);
        self->send(st.options.comm_agent,
                   remote_send{0, kRole, 0,
                               caf::make_message(files_atom::value, step, st.options.rank, json, error)});
        answer(self, step, error);
      },
      [=](files_atom, int64_t step, int64_t rank, const std::string& json, const std::string& error) {
        on_files(self, step, rank, json, error);
      },
      [=](committed_atom, int64_t step, const std::string& error) {
        self->state.gathering.erase(step);
        answer(self, step, error);
      },
      [=](expired_atom, int64_t step) {
        auto& st = self->state;
        auto it = st.gathering.find(step);
        if (it == st.gathering.end() || it->second.committing) return;
        std::vector<int64_t> missing;
        for (std::size_t r = 0; r < it->second.arrived.size(); ++r)
          if (!it->second.arrived[r]) missing.push_back(static_cast<int64_t>(r));
        st.gathering.erase(it);
        answer(self, step,
               fmt::format("not committed: ranks {} did not report their files within {} s",
                           fmt::join(missing, ", "), st.options.timeout_s));
      },
      [=](collective_done&) {},  // the registration
  };
}

}  // namespace

caf::actor spawn_checkpoint_writer(caf::actor_system& system, CheckpointWriterOptions options) {
  return system.spawn(writer_behavior, std::move(options));
}

}  // namespace troupe
