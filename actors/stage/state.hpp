// The stage actor's state and the functions its files share (actors/stage.cpp: building,
// gradient reduction and the update; stage/flow.cpp: the actions and the point-to-point
// transfers between stages; stage/compute.cpp: the work items of the compute stream).
// Private to the stage actor.
//
// What the compute stream touches: the model's layers, the parameter store, gradient rows,
// fetcher and sequence check (each documented as owned by the compute thread), and the
// ComputeSide below, which only work items read and write. Everything else here belongs to
// the actor thread; work items get copies of what they need and answer with messages.
#pragma once

#include <torch/torch.h>
#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/deferred_weights.hpp"
#include "actors/protocol/checkpoint.hpp"
#include "actors/protocol/comm.hpp"
#include "actors/protocol/pipeline.hpp"
#include "actors/protocol/stage.hpp"
#include "actors/stage.hpp"
#include "actors/stage/step_figures.hpp"
#include "actors/stream.hpp"
#include "actors/zero/gradient_rows.hpp"
#include "actors/zero/issue_queue.hpp"
#include "actors/zero/parameter_fetcher.hpp"
#include "actors/zero/sequence_check.hpp"

namespace troupe::stage {

// Collective tags of the stage: kind in the top byte, then bucket slot, then row (or, for
// transfers between stages, the action's index).
enum class Tag : uint64_t {
  gradients = 1,
  loss,
  norm,
  parameters,
  fetch,
  step_figures,  // the memory peaks and busy time exchanged after each update
  sequence,
  tie,          // a tied weight's gradients (row = tie) or used mark (slot 1) summed between stages
  sent,         // an activation or gradient handed to a neighbour
  received,     // an activation or gradient arrived
  header_sent,  // the shape of the activations to the next stage
  header_received,
};
inline uint64_t tag(Tag kind, uint64_t row = 0, uint64_t slot = 0) {
  return static_cast<uint64_t>(kind) << 56 | slot << 40 | row;
}
inline Tag kind_of(uint64_t t) {
  return static_cast<Tag>(t >> 56);
}
inline uint64_t row_of(uint64_t t) {
  return t & ((uint64_t{1} << 40) - 1);
}
inline uint64_t slot_of(uint64_t t) {
  return (t >> 40) & 0xffff;
}

struct StepProgress {
  int64_t step = 0;
  int64_t micro_count = 1;
  std::size_t reduced = 0;  // gradient rows reduced (and absorbed)
  bool loss_reduced = false;
  ParameterUse used = nullptr;  // once the loss is reduced: the parameters any rank gave a gradient
  bool loss_ready = false, loss_issued = false;  // see reduce_loss
  bool ties_issued = false;                      // see sum_ties
  std::size_t ties_left = 0;                     // tied weights' sums in flight
  bool norm_asked = false;
  bool answer_ready = false;       // what reduce_gradients answers with is known
  troupe::gradients_ready answer;  // the step's figures (one stage) or this stage's share (a pipeline)
  bool norm_known = false;         // the global norm is known: the optimizer may step
  double grad_norm = 0;
  double lr = 0;  // the rate this step's update ran at
  double loss_scale = 0;  // the scale this step's backward ran with (0: no scaler)
  bool skipped = false;   // the gradients overflowed: no update
  std::size_t gathers_left = 0;
};

// The step's actions and what they wait for (actor thread only).
struct Flow {
  std::deque<stage_action> queue;  // handed over, not started yet, in program order
  caf::actor scheduler;
  int64_t step = -1;
  int64_t micro_count = 1;
  std::map<int64_t, MicroBatchPtr> batches;                     // loaded, by micro-batch
  std::map<int64_t, std::shared_ptr<HostBuffer>> inputs;        // activations received
  std::map<int64_t, std::shared_ptr<HostBuffer>> output_grads;  // gradients of our output received
  std::map<int64_t, std::shared_ptr<HostBuffer>> outputs;       // forward outputs, to send
  std::map<int64_t, std::shared_ptr<HostBuffer>> input_grads;   // backward results, to send
  std::set<int64_t> inputs_arrived, output_grads_arrived;
  std::set<int64_t> posted_ahead;  // receive actions still queued whose receive is posted
  // Receives from another rank, posted and not yet arrived or taken by their compute, by
  // micro-batch: that compute may go on the stream before its bytes are in, behind a wait
  // for the transport's completion (ReceiveArrival).
  std::map<int64_t, std::shared_ptr<ReceiveArrival>> input_arrivals, gradient_arrivals;
  // Actions started and not finished, by index: their micro-batch and kind.
  std::map<int64_t, pipeline::Action> started;
  int64_t tokens = 0;  // target elements loaded this step (last stage)
  double busy_s = 0;   // forward and backward time on the stream this step
  // Shapes crossing the stage's boundaries: sent once and cached on both sides.
  std::vector<int64_t> input_shape;   // from the previous stage's header
  std::vector<int64_t> output_shape;  // of this stage's forward output
  bool header_sent = false;
  bool header_posted = false;  // a receive for the previous stage's header is out
  std::shared_ptr<HostBuffer> header_in;
  // Neighbouring chunks on this rank (virtual stages), and transfers between them by key:
  // arrived before their receive started, or receives started and waiting.
  caf::actor local_previous, local_next;
  std::map<uint64_t, local_transfer> local_arrived;
  std::map<uint64_t, int64_t> local_waiting;  // action index
  // A validation batch under way (between training steps): its actions are answered with
  // its batch, and the last stage sums its losses here.
  bool evaluating = false;
  int64_t eval_batch = 0;
  double eval_loss_sum = 0;
  int64_t eval_count = 0;
};

// What a micro-batch's backward needs from its forward.
struct Saved {
  torch::Tensor input;   // requires grad on every stage but the first
  torch::Tensor output;  // the loss on the last stage; undefined when checkpointing
  torch::Tensor target;  // the last stage's, for the loss
  std::vector<int64_t> sequence;  // the layers the forward ran
  MemoryCharge held;              // input and output bytes, as MemoryKind::activations
};
// A split backward's weight half, waiting: its work and the activations it keeps.
struct Deferred {
  DeferredWeights work;
  MemoryCharge held;
};

// Owned by the compute stream's work items; the actor only holds the pointer.
struct ComputeSide {
  std::map<int64_t, Saved> saved;
  std::map<int64_t, Deferred> deferred;  // by micro-batch
  double loss_sum = 0;
  int64_t forward_step = -1;   // the step the forwards (and loss_sum) belong to
  int64_t gradient_step = -1;  // the step the gradient passes belong to
  int64_t finished = 0;        // micro-batches of it whose gradients are complete
};

// A weight shared with other stages (StageOptions::ties), as this stage holds it.
struct TieSlot {
  BufferSpan gradient;       // this rank's reduced block of its row
  std::size_t position = 0;  // in the layout
  CommunicatorId comm = world_communicator;
};

struct StageState {
  StageOptions options;
  std::vector<TieSlot> ties;
  std::shared_ptr<HostBuffer> tie_marks;  // by tie: 1 when a rank of this stage used it this step
  std::shared_ptr<ParameterStore> store;
  std::shared_ptr<BucketPool> pool;
  std::unique_ptr<GradientRows> rows;
  std::unique_ptr<ParameterFetcher> fetcher;
  std::unique_ptr<LayerSequenceCheck> sequence_check;
  std::vector<torch::nn::AnyModule*> layers;
  caf::actor owner;
  // After what its work touches: its thread stops first. Shared with the rank's other
  // chunks (StageOptions::compute), it may outlive this state: see the destructor.
  std::shared_ptr<Stream> compute;
  std::shared_ptr<ComputeSide> compute_side = std::make_shared<ComputeSide>();
  StepProgress progress;
  Flow flow;
  // This rank's loss of the step, then the stage group's mean; after it, by layout
  // position, 1 where the parameter got a gradient, then the mean of that over the group.
  std::shared_ptr<HostBuffer> loss;
  std::shared_ptr<HostBuffer> norm;     // this rank's gradient square sum, then the group's
  // Every group rank's row of step figures (actors/stage/step_figures.hpp), gathered after
  // the update.
  std::shared_ptr<HostBuffer> step_figures;
  std::vector<caf::response_promise> collecting;
  // Every collective the compute thread issues, in order (see issue_queue.hpp).
  std::shared_ptr<IssueQueue> issue = std::make_shared<IssueQueue>();
  bool failed = false;
  std::string failure;  // why, once failed
  int64_t updates_applied = 0;  // optimizer updates so far: where the learning-rate schedule is
  std::optional<LossScaler> scaler;  // with StageOptions::loss_scale
  std::optional<caf::response_promise> checkpoint_reply;  // a snapshot or restore in flight
  std::shared_ptr<std::atomic<bool>> stopped =
      std::make_shared<std::atomic<bool>>(false);  // compute reads it
  static inline const char* name = "stage";

  StageState() = default;
  StageState(const StageState&) = delete;
  StageState& operator=(const StageState&) = delete;
  // A stream shared with other chunks goes on after this state: this chunk's queued work
  // must have run (and done nothing: stopped) before what it touches goes. The engine
  // drains the stream before it stops the actors, so this waits only when a chunk ends
  // on its own (its shard owner failed) while the stream still holds its work.
  ~StageState() {
    if (!options.compute) return;
    *stopped = true;
    compute->record().wait_for(
        std::chrono::milliseconds(static_cast<int64_t>(1000 * options.collective_timeout_s)));
  }

  // Every tied weight's gradients summed between its stages (none to sum: at once).
  bool ties_summed() const { return progress.ties_issued && progress.ties_left == 0; }
  bool first_stage() const { return options.place.stage == 0; }
  bool last_stage() const { return options.place.stage == options.place.stages - 1; }
  CommunicatorId group() const { return options.place.group; }
};

using StageActor = caf::stateful_actor<StageState>;

// stage.cpp
void fail(StageActor* self, const std::string& error);
/// The first action of a step: progress and peaks reset, stage 2-3 accumulation begun.
void begin_step(StageActor* self, int64_t step, int64_t micro_count);
/// The optimizer_step action: update, gather, report step_applied to the scheduler.
void apply_update(StageActor* self);

// flow.cpp
/// Queues an action from the scheduler and starts what can start.
void accept_action(StageActor* self, stage_action action);
/// Starts queued actions, in order, while the first one has what it needs.
void pump(StageActor* self);
/// A transfer between stages finished (collective_done with a transfer tag).
void on_transfer_done(StageActor* self, const collective_done& done);
/// A transfer from a neighbouring chunk of this rank (virtual stages).
void on_local_transfer(StageActor* self, local_transfer& t);
void on_forward_computed(StageActor* self, forward_computed& f);
void on_backward_computed(StageActor* self, backward_computed& b);
/// reduce_gradients is done once gradients_ready is known: answers the scheduler.
void answer_gradients_ready(StageActor* self);

// checkpoint.cpp
/// Where the stage's partition pieces lie, by tensor and element range.
stage_layout describe(const StageState& s);
/// snapshot_stage: the owner's copy of the partition, then the stage's own state.
void snapshot(StageActor* self);
void on_snapshot(StageActor* self, state_snapshot& got);
/// restore_stage: the model's values on the compute stream, then the owner's partition.
void restore(StageActor* self, restore_stage& r);
void on_restored(StageActor* self, state_restored& r);

// compute.cpp: work items of the compute stream.
struct ForwardWork {
  int64_t step = 0, micro = 0, micro_count = 1;
  MicroBatchPtr batch;                // first and last stage
  std::shared_ptr<HostBuffer> input;  // received activations (not on the first stage)
  std::vector<int64_t> input_shape;
  std::shared_ptr<ReceiveArrival> arrival;  // set: `input` was still arriving when this was queued
  bool eval = false;                        // a validation forward: nothing kept for a backward
};
void run_forward(StageState& s, ComputeSide& c, const ForwardWork& w, caf::actor self);
struct BackwardWork {
  pipeline::Op op = pipeline::Op::backward;  // or its input half, or its weight half
  int64_t step = 0, micro = 0, micro_count = 1;
  std::shared_ptr<HostBuffer> output_gradient;  // not on the last stage
  std::vector<int64_t> output_shape;
  std::shared_ptr<ReceiveArrival> arrival;  // set: `output_gradient` was still arriving when queued
  // The last stage backpropagates loss × this: the loss scale over the replicas, whose
  // gradients are then summed (each backpropagates its 1/dp share of the step's loss).
  double loss_seed = 1;
};
/// A whole backward, an input half or a weight half (split_backward).
void run_backward(StageState& s, ComputeSide& c, const BackwardWork& w, caf::actor self);
/// Work queued on the compute stream after this waits for `arrival` (at most the collective
/// timeout, less once the stage has failed); `label` names the wait on the trace's
/// "compute wait" track.
void queue_wait(StageState& s, std::shared_ptr<ReceiveArrival> arrival, std::string label);
/// Whether a work item's input, queued while `arrival` was pending, is there to use.
bool arrived(const std::shared_ptr<ReceiveArrival>& arrival);

}  // namespace troupe::stage
