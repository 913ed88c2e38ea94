#include "memory/parameter_swap.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>

#include <fmt/format.h>

namespace troupe {
namespace {

constexpr std::size_t kPageElements = 1024;  // fp32 values in a 4 KiB page

// Counts a block's piece reads down and reports the first error once all are done.
struct BlockRead {
  std::mutex mutex;
  std::size_t left = 0;
  Status first;
  IoCallback done;
};

}  // namespace

Result<std::shared_ptr<ParameterSwap>> ParameterSwap::make(std::unique_ptr<NvmeStore> store,
                                                           const FlatLayout& layout,
                                                           const std::vector<bool>& persistent_rows,
                                                           std::size_t piece_limit) {
  if (piece_limit == 0 || piece_limit % kPageElements != 0)
    return make_error(fmt::format("parameter pieces of {} elements are not whole 4 KiB pages", piece_limit));
  auto swap = std::shared_ptr<ParameterSwap>(new ParameterSwap());
  swap->store_ = std::move(store);
  swap->pieces_.resize(layout.row_count());
  for (std::size_t k = 0; k < layout.row_count(); ++k) {
    if (k < persistent_rows.size() && persistent_rows[k]) continue;
    std::size_t block = layout.row(k).block;
    if (block % kPageElements != 0)
      return make_error(
          fmt::format("parameter row {}'s block of {} elements is not a whole number of 4 KiB "
                      "pages; the layout must be planned with page_block_align",
                      k, block));
    for (std::size_t at = 0, piece = 0; at < block; at += piece_limit, ++piece)
      swap->pieces_[k].push_back(
          Piece{fmt::format("param-{:05}-{:03}.bin", k, piece), at, std::min(piece_limit, block - at)});
  }
  return swap;
}

void ParameterSwap::read_block(std::size_t row, float* block, IoCallback done) {
  auto read = std::make_shared<BlockRead>();
  read->left = pieces_[row].size();
  read->done = std::move(done);
  for (const Piece& p : pieces_[row])
    store_->read(p.key, block + p.offset, p.count * sizeof(float), [read](Status status) {
      std::unique_lock lock(read->mutex);
      if (!status && read->first) read->first = std::move(status);
      if (--read->left > 0) return;
      lock.unlock();
      read->done(std::move(read->first));
    });
}

Status ParameterSwap::write_block(std::size_t row, const float* block) {
  std::vector<std::future<Status>> written;
  for (const Piece& p : pieces_[row]) {
    auto promise = std::make_shared<std::promise<Status>>();
    written.push_back(promise->get_future());
    store_->write(p.key, block + p.offset, p.count * sizeof(float),
                  [promise](Status status) { promise->set_value(std::move(status)); });
  }
  // The store completes or fails every request within its io timeout; twice that is a bound.
  auto deadline =
      std::chrono::steady_clock::now() + 2 * store_->options().io_timeout + std::chrono::seconds(1);
  Status outcome;
  for (auto& w : written) {
    if (w.wait_until(deadline) != std::future_status::ready)
      return make_error(
          fmt::format("writing parameter row {} to {} did not finish in time", row, store_->dir()));
    if (Status s = w.get(); !s && outcome) outcome = std::move(s);
  }
  return outcome;
}

}  // namespace troupe
