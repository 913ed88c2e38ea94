#include "actors/zero/parameter_fetcher.hpp"

#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {
namespace {

std::vector<std::size_t> row_sizes(const FlatLayout& layout) {
  std::vector<std::size_t> sizes;
  for (std::size_t k = 0; k < layout.row_count(); ++k)
    sizes.push_back(layout.row(k).block * static_cast<std::size_t>(layout.partitions()));
  return sizes;
}

}  // namespace

ParameterFetcher::ParameterFetcher(std::shared_ptr<ParameterStore> store, FetchPlanner::Limits limits,
                                   Gather gather, double timeout_s, Tracer* tracer)
    : store_(std::move(store)),
      planner_(row_sizes(store_->layout()), store_->plan().persistent_rows, limits),
      gather_(std::move(gather)),
      timeout_s_(timeout_s),
      tracer_(tracer),
      pending_(store_->layout().row_count()),
      arrived_(store_->layout().row_count(), false) {}

void ParameterFetcher::begin_pass() {
  planner_.begin_pass();
}

void ParameterFetcher::issue(std::size_t row) {
  const FlatLayout& layout = store_->layout();
  const auto& r = layout.row(row);
  pending_[row] = store_->make_row_buffer(row);
  {
    std::lock_guard lock(mutex_);
    arrived_[row] = false;
  }
  gather_(row, float_span(store_->partition_parameters(), r.partition_offset, r.block),
          float_span(pending_[row], 0, r.block * static_cast<std::size_t>(layout.partitions())));
}

void ParameterFetcher::wait_for(std::size_t row) {
  if (!pending_[row]) return;  // bound already
  std::unique_lock lock(mutex_);
  std::optional<Tracer::Scope> waiting;
  if (!arrived_[row]) waiting.emplace(tracer_, "compute wait", "gather");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (!arrived_[row] && error_.empty())
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
      throw std::runtime_error(
          fmt::format("gathering parameter row {} took longer than {} s", row, timeout_s_));
  if (!error_.empty()) throw std::runtime_error(error_);
  waiting.reset();
  lock.unlock();
  store_->bind_row(row, std::move(pending_[row]));
  pending_[row].reset();
}

void ParameterFetcher::acquire(std::size_t row) {
  for (std::size_t r : planner_.acquire(row)) issue(r);
  wait_for(row);
}

void ParameterFetcher::drop(std::size_t row) {
  wait_for(row);  // a prefetch still in flight: the transport writes into its buffer
  store_->unbind_row(row);
}

void ParameterFetcher::release(std::size_t row) {
  if (planner_.release(row)) drop(row);
}

void ParameterFetcher::end_pass() {
  for (std::size_t r : planner_.end_pass()) drop(r);
}

void ParameterFetcher::gather_all() {
  for (std::size_t r = 0; r < store_->layout().row_count(); ++r)
    if (!store_->row_buffer(r) && !pending_[r]) issue(r);
  for (std::size_t r = 0; r < store_->layout().row_count(); ++r) wait_for(r);
}

void ParameterFetcher::drop_all() {
  for (std::size_t r = 0; r < store_->layout().row_count(); ++r)
    if (!planner_.held(r)) store_->unbind_row(r);
}

void ParameterFetcher::on_gathered(std::size_t row, const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    if (!error.empty() && error_.empty()) error_ = "gathering parameters failed: " + error;
    arrived_[row] = true;
  }
  changed_.notify_all();
}

void ParameterFetcher::fail(const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = error;
  }
  changed_.notify_all();
}

namespace {

struct GatherBeforeBackward : torch::autograd::Function<GatherBeforeBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t fetcher,
                               int64_t row) {
    ctx->saved_data["fetcher"] = fetcher;
    ctx->saved_data["row"] = row;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* fetcher = reinterpret_cast<ParameterFetcher*>(ctx->saved_data["fetcher"].toInt());
    fetcher->acquire(static_cast<std::size_t>(ctx->saved_data["row"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gather_before_backward(const torch::Tensor& x, ParameterFetcher* fetcher, std::size_t row) {
  return GatherBeforeBackward::apply(x, static_cast<int64_t>(reinterpret_cast<intptr_t>(fetcher)),
                                     static_cast<int64_t>(row));
}

}  // namespace troupe
