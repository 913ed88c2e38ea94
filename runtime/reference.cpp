#include "runtime/reference.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "actors/model_parameters.hpp"
#include "actors/optimizer_hyper.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/config/scheduler.hpp"
#include "runtime/data/token_data.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/optimizer.hpp"
#include "runtime/overflow_injection.hpp"
#include "runtime/parameter_file.hpp"

namespace troupe {
namespace {

Status check_batch(const BatchConfig& batch) {
  if (batch.micro_batch_size <= 0 || batch.global_batch_size <= 0 ||
      batch.global_batch_size % batch.micro_batch_size != 0) {
    return make_error(
        fmt::format("the reference trainer needs a resolved batch: global_batch_size ({}) must be a "
                    "positive multiple of micro_batch_size ({})",
                    batch.global_batch_size, batch.micro_batch_size));
  }
  return {};
}

int compute_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

// Forward and backward over the global batch from sample `first`, accumulating gradients; returns
// the global-batch mean loss (the sum of the per-micro-batch losses / micro-batch count).
double accumulate_step(torch::nn::Sequential& model, const TokenData& data, const JobConfig& job,
                       int64_t first, double loss_scale) {
  const int64_t global = job.batch.global_batch_size;
  const int64_t micro = job.batch.micro_batch_size;
  const int64_t micro_batches = global / micro;
  double loss_sum = 0;
  for (int64_t k = 0; k < micro_batches; ++k) {
    const TokenBatch batch = data.train(first + k * micro, micro);
    auto loss = lm_loss(model->forward(batch.input), batch.target) / static_cast<double>(micro_batches);
    if (loss_scale == 1.0)
      loss.backward();
    else  // as troupe's last stage: d(scale · loss) = scale
      loss.backward(torch::full_like(loss, loss_scale));
    loss_sum += loss.item<double>();
  }
  return loss_sum;
}

// [train] eval_steps global batches of the validation samples, forward only: the mean of
// their micro-batch losses, as the engine's evaluate() computes it.
double validation_loss(torch::nn::Sequential& model, const TokenData& data, const JobConfig& job) {
  torch::NoGradGuard no_graph;
  const int64_t micro = job.batch.micro_batch_size;
  const int64_t micro_batches = job.train.eval_steps * job.batch.global_batch_size / micro;
  double sum = 0;
  for (int64_t k = 0; k < micro_batches; ++k) {
    const TokenBatch batch = data.validation(k * micro, micro);
    sum += lm_loss(model->forward(batch.input), batch.target).item<double>();
  }
  return sum / static_cast<double>(micro_batches);
}

// The global L2 norm of every parameter's gradient: squares summed in double, then sqrt.
double gradient_norm(const std::vector<torch::Tensor>& parameters) {
  double sum_of_squares = 0;
  for (const auto& parameter : parameters) {
    const torch::Tensor& grad = parameter.grad();
    if (grad.defined()) sum_of_squares += grad.to(torch::kDouble).square().sum().item<double>();
  }
  return std::sqrt(sum_of_squares);
}

// DeepSpeed's clipping: with factor = (norm + 1e-6) / max_norm, gradients are divided by
// the factor when it is above 1 and left untouched otherwise.
double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double factor = std::max(1.0, (norm + 1e-6) / max_norm);
  return factor > 1.0 ? 1.0 / factor : 1.0;
}

void scale_gradients(const std::vector<torch::Tensor>& parameters, double scale) {
  if (scale == 1.0) return;
  torch::NoGradGuard no_grad;
  for (const auto& parameter : parameters) {
    torch::Tensor grad = parameter.grad();
    if (grad.defined()) grad.mul_(scale);
  }
}

// Mixed precision as troupe runs it: the model computes in 16 bits, the optimizer steps
// fp32 master copies with the widened (and clipped) gradients, and the model gets the
// masters rounded back. Empty when the job trains fp32.
struct Masters {
  std::vector<torch::Tensor> values;  // by parameter, fp32

  static Masters of(const std::vector<torch::Tensor>& parameters, Dtype dtype) {
    Masters m;
    if (dtype == Dtype::fp32) return m;
    const auto low = dtype == Dtype::bf16 ? torch::kBFloat16 : torch::kFloat16;
    torch::NoGradGuard no_grad;
    for (const auto& p : parameters) {
      m.values.push_back(p.detach().clone());
      p.set_data(p.detach().to(low));
    }
    return m;
  }
  bool active() const { return !values.empty(); }
  // The widened gradients become the masters' (scaled by `scale`, as troupe's kernel does).
  void take_gradients(const std::vector<torch::Tensor>& parameters, double scale) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const torch::Tensor& g = parameters[i].grad();
      values[i].mutable_grad() =
          g.defined()
              ? (scale == 1.0 ? g.to(torch::kFloat32) : g.to(torch::kFloat32) * static_cast<float>(scale))
              : torch::Tensor();
    }
  }
  void copy_to(const std::vector<torch::Tensor>& parameters) const {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < values.size(); ++i) parameters[i].copy_(values[i]);
  }
};

// LibTorch's optimizers keep a parameter's state under its TensorImpl: the pointer itself
// in LibTorch 2.x's recent releases, its printed address in earlier ones.
template <typename Optimizer>
auto optimizer_state_key(Optimizer& optimizer, const torch::Tensor& parameter) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;
    address << parameter.unsafeGetTensorImpl();
    return address.str();
  } else {
    return static_cast<Key>(parameter.unsafeGetTensorImpl());
  }
}

int64_t defined_bytes(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.nbytes()) : 0;
}

// Bytes of every tensor the optimizer keeps per parameter: Adam's and AdamW's moments
// (and max_exp_avg_sq under amsgrad), SGD's momentum buffer.
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    const torch::optim::OptimizerParamState* state = entry.second.get();
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
      bytes += defined_bytes(adam->exp_avg()) + defined_bytes(adam->exp_avg_sq()) +
               defined_bytes(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
      bytes += defined_bytes(adamw->exp_avg()) + defined_bytes(adamw->exp_avg_sq()) +
               defined_bytes(adamw->max_exp_avg_sq());
    } else if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
      bytes += defined_bytes(sgd->momentum_buffer());
    }
  }
  return bytes;
}

// [checkpoint] resume: the model's values and the optimizer's state from a checkpoint of
// any layout (consolidated by parameter name), for the reference to continue the run the
// way the engine does; the run's position comes back.
Result<ConsolidatedParameters> resume_reference(const JobConfig& job, torch::nn::Sequential& model,
                                                torch::optim::Optimizer& optimizer) {
  auto folder = resume_folder(job.checkpoint);
  if (!folder) return folder.error();
  if (!*folder) return ConsolidatedParameters{};  // "latest" with none: afresh
  auto saved = consolidate_parameters(**folder, true);
  if (!saved) return saved.error();
  auto named = model_parameters(model);
  if (!named) return named.error();
  const std::vector<std::string> wanted = checkpoint_arrays(job.optimizer);
  if (saved->arrays != wanted)
    return make_error(fmt::format("checkpoint {} keeps {}; this job's optimizer keeps {}", **folder,
                                  fmt::join(saved->arrays, ", "), fmt::join(wanted, ", ")));
  std::map<std::string, std::size_t> index;
  for (std::size_t t = 0; t < saved->tensors.size(); ++t) index[saved->tensors[t].name] = t;
  auto as_tensor = [](const std::vector<float>& v, at::IntArrayRef shape) {
    return torch::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kFloat32)
        .clone()
        .view(shape);
  };
  torch::NoGradGuard no_grad;
  for (std::size_t t = 0; t < named->tensors.size(); ++t) {
    auto found = index.find(named->names[t]);
    if (found == index.end())
      return make_error(fmt::format("checkpoint {} has no {}", **folder, named->names[t]));
    const std::size_t i = found->second;
    torch::Tensor& p = named->tensors[t];
    p.copy_(as_tensor(saved->values[i], p.sizes()));
    const auto key = optimizer_state_key(optimizer, p);
    const int64_t steps = saved->steps[i];
    if (steps == 0) continue;  // never updated: LibTorch makes its state on the first step
    if (job.optimizer.type == OptimizerType::adamw) {
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(steps);
      state->exp_avg(as_tensor(saved->state[0][i], p.sizes()));
      state->exp_avg_sq(as_tensor(saved->state[1][i], p.sizes()));
      optimizer.state()[key] = std::move(state);
    } else if (job.optimizer.type == OptimizerType::adam) {
      auto state = std::make_unique<torch::optim::AdamParamState>();
      state->step(steps);
      state->exp_avg(as_tensor(saved->state[0][i], p.sizes()));
      state->exp_avg_sq(as_tensor(saved->state[1][i], p.sizes()));
      optimizer.state()[key] = std::move(state);
    } else if (!saved->state.empty()) {
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(as_tensor(saved->state[0][i], p.sizes()));
      optimizer.state()[key] = std::move(state);
    }
  }
  return saved;
}

Result<std::vector<StepMetrics>> train(const JobConfig& job,
                                       const std::function<void(const StepMetrics&)>& on_step,
                                       torch::Tensor* final_parameters) {
  torch::set_num_threads(compute_threads(job.train.threads));
  auto data = TokenData::make(job);
  if (!data.ok()) return data.error();

  torch::manual_seed(static_cast<uint64_t>(job.train.seed));
  torch::nn::Sequential model = make_model(job.model);
  if (!job.model.init_from.empty()) {  // the same starting point as the engine's
    auto named = model_parameters(model);
    if (!named) return named.error();
    TROUPE_TRY(load_initial_parameters(job.model, *named));
  }
  // Each tensor once: the optimizer would step a tied weight twice if listed twice.
  const std::vector<torch::Tensor> parameters = unique_parameters(*model);
  Masters masters = Masters::of(parameters, job.precision.dtype);
  auto optimizer = make_optimizer(job.optimizer, masters.active() ? masters.values : parameters);
  auto schedule = make_lr_schedule(job);  // the same schedule, stepped after every update
  if (!schedule) return schedule.error();
  // Gradients set to none between steps (PyTorch 2's zero_grad): a parameter without a
  // gradient in a step is skipped by the optimizer, as troupe skips it.
  auto clear_gradients = [&] {
    for (auto p : parameters) p.mutable_grad().reset();
  };
  const int64_t params = count_parameters(*model);
  std::optional<LossScaler> scaler;
  if (job.precision.scales_loss()) {
    auto made = LossScaler::make(loss_scale_options(job));
    if (!made) return made.error();
    scaler = std::move(*made);
  }
  const std::set<int64_t> injected = injected_overflow_steps(std::nullopt);

  std::vector<StepMetrics> history;
  int64_t updates = 0;  // where the schedule is: skipped steps do not step it
  int64_t first = 0;    // the first step to train (a resumed run's checkpoint step)
  int64_t samples = 0;  // training samples read before it (the checkpoint's data position)
  if (!job.checkpoint.resume.empty()) {
    if (masters.active())
      return make_error(
          "--reference resumes fp32 runs only: its bf16 masters are not rebuilt from a checkpoint");
    auto resumed = resume_reference(job, model, *optimizer);
    if (!resumed) return resumed.error();
    first = resumed->step;
    updates = resumed->updates_applied;
    if (resumed->samples >= 0) samples = resumed->samples;
    if (scaler && resumed->scaler) scaler->restore(*resumed->scaler);
  }
  const int64_t tokens = job.batch.global_batch_size * job.model.seq_len;
  for (int64_t step = first; step < job.train.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const double loss_scale = scaler ? scaler->scale() : 1.0;
    const double loss =
        accumulate_step(model, *data, job, samples + (step - first) * job.batch.global_batch_size,
                        injected.count(step + 1) ? std::numeric_limits<double>::infinity() : loss_scale);
    double grad_norm = gradient_norm(parameters);
    // Loss scaling as troupe (and DeepSpeed) do it: a norm that is not finite skips the
    // update, the schedule and the Adam step count; otherwise the gradients are unscaled
    // and clipped by one factor.
    bool skipped = false;
    if (scaler) {
      skipped = !std::isfinite(grad_norm);
      if (Status updated = scaler->update(skipped); !updated)
        return make_error(fmt::format("step {}: {}", step + 1, updated.error().message));
      if (!skipped) grad_norm /= loss_scale;
    }
    const UpdateHyper hyper = schedule->for_update(updates);
    if (!skipped) {
      const double scale = clip_factor(grad_norm, job.optimizer.gradient_clipping) * (1.0 / loss_scale);
      if (masters.active())
        masters.take_gradients(parameters, scale);
      else
        scale_gradients(parameters, scale);
      set_hyper(*optimizer, hyper);
      optimizer->step();
      if (masters.active()) masters.copy_to(parameters);
      ++updates;
    }
    clear_gradients();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;

    StepMetrics metrics;
    metrics.step = step + 1;
    metrics.steps_total = job.train.steps;
    metrics.loss = loss;
    metrics.step_ms = elapsed.count() * 1000.0;
    metrics.tokens = tokens;
    metrics.tokens_per_s = elapsed.count() > 0 ? static_cast<double>(tokens) / elapsed.count() : 0;
    metrics.grad_norm = grad_norm;
    metrics.lr = hyper.lr.value_or(job.optimizer.lr);
    metrics.loss_scale = scaler ? loss_scale : 0.0;
    metrics.skipped = skipped;
    metrics.params = params;
    // One process holds everything: the parameters and gradients in the dtype, the whole
    // optimizer state (with mixed precision, the fp32 masters too, as ZeRO counts them).
    const int64_t item = masters.active() ? 2 : 4;
    metrics.parameter_bytes = item * params;
    metrics.gradient_bytes = item * params;
    metrics.optimizer_state_bytes = optimizer_state_bytes(*optimizer) + (masters.active() ? 4 * params : 0);
    metrics.communication_bytes = 0;
    metrics.model_state_bytes =
        metrics.parameter_bytes + metrics.gradient_bytes + metrics.optimizer_state_bytes;
    if (job.train.eval_interval > 0 && metrics.step % job.train.eval_interval == 0)
      metrics.val_loss = validation_loss(model, *data, job);
    history.push_back(metrics);
    if (on_step) on_step(metrics);
  }
  if (final_parameters != nullptr) *final_parameters = flatten_parameters(*model);
  return history;
}

}  // namespace

Result<std::vector<StepMetrics>> train_reference(const JobConfig& job,
                                                 const std::function<void(const StepMetrics&)>& on_step,
                                                 torch::Tensor* final_parameters) {
  TROUPE_TRY(check_batch(job.batch));
  // LibTorch reports bad shapes, bad options and allocation failures by throwing; none of
  // that may escape this seam.
  try {
    return train(job, on_step, final_parameters);
  } catch (const c10::Error& error) {
    return make_error(fmt::format("reference training failed: {}", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return make_error(fmt::format("reference training failed: {}", error.what()));
  }
}

}  // namespace troupe
