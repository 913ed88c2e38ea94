#include "actors/zero/parameter_fetcher.hpp"

#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

ParameterFetcher::ParameterFetcher(std::shared_ptr<ParameterStore> store, FetchPlanner::Limits limits,
                                   Gather gather, std::shared_ptr<IssueQueue> queue, double timeout_s,
                                   Tracer* tracer)
    : store_(std::move(store)),
      planner_(store_->layout().row_sizes(), store_->plan().persistent_rows, limits),
      gather_(std::move(gather)),
      queue_(std::move(queue)),
      timeout_s_(timeout_s),
      tracer_(tracer),
      pending_(store_->layout().row_count()) {
  arrivals_->arrived.assign(store_->layout().row_count(), false);
}

void ParameterFetcher::Arrivals::fail(const std::string& why) {
  {
    std::lock_guard lock(mutex);
    if (error.empty()) error = why;
  }
  changed.notify_all();
}

void ParameterFetcher::begin_pass(std::size_t kind) {
  planner_.begin_pass(kind);
}

void ParameterFetcher::issue(std::size_t row) {
  const FlatLayout& layout = store_->layout();
  const auto& r = layout.row(row);
  pending_[row] = store_->make_row_buffer(row);
  {
    std::lock_guard lock(arrivals_->mutex);
    arrivals_->arrived[row] = false;
  }
  const DataType type = store_->dtype();
  BufferSpan whole = typed_span(pending_[row], 0, layout.row_elements(row), type);
  if (store_->swapped(row))
    return read_then_gather(
        row, typed_span(pending_[row], r.block * static_cast<std::size_t>(store_->rank()), r.block, type),
        std::move(whole));
  queue_->issue([gather = gather_, row,
                 in = typed_span(store_->partition_parameters(), r.partition_offset, r.block, type),
                 out = std::move(whole)]() mutable { gather(row, std::move(in), std::move(out)); });
}

// The gather takes its place in line now; it goes out once this rank's block is read
// into `block` (inside `whole`, so the all-gather runs in place). A failed read leaves
// the line blocked: this rank stops, and issuing anything after it would only
// mismatch the peers' collectives.
void ParameterFetcher::read_then_gather(std::size_t row, BufferSpan block, BufferSpan whole) {
  float* into = reinterpret_cast<float*>(pending_[row]->data() + block.offset_bytes);
  IssueQueue::Ticket ticket =
      queue_->reserve([gather = gather_, row, in = std::move(block), out = std::move(whole)]() mutable {
        gather(row, std::move(in), std::move(out));
      });
  // The store traces the read itself (from its first block's completion).
  store_->swap()->read_block(
      row, into, [queue = queue_, arrivals = arrivals_, ticket, keep = pending_[row]](Status read) {
        if (!read) return arrivals->fail("reading parameters from NVMe failed: " + read.error().message);
        queue->ready(ticket);
      });
}

void ParameterFetcher::wait_for(std::size_t row) {
  if (!pending_[row]) return;  // bound already
  Arrivals& a = *arrivals_;
  std::unique_lock lock(a.mutex);
  std::optional<Tracer::Scope> waiting;
  if (!a.arrived[row]) waiting.emplace(tracer_, "compute wait", "gather");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (!a.arrived[row] && a.error.empty())
    if (a.changed.wait_until(lock, deadline) == std::cv_status::timeout)
      throw std::runtime_error(
          fmt::format("gathering parameter row {} took longer than {} s", row, timeout_s_));
  if (!a.error.empty()) throw std::runtime_error(a.error);
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
  Arrivals& a = *arrivals_;
  {
    std::lock_guard lock(a.mutex);
    if (!error.empty() && a.error.empty()) a.error = "gathering parameters failed: " + error;
    a.arrived[row] = true;
  }
  a.changed.notify_all();
}

void ParameterFetcher::fail(const std::string& error) {
  arrivals_->fail(error);
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
