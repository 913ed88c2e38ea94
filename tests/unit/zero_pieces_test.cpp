// Pieces of ZeRO's machinery on their own: the gradient bucket pool (grows when rows
// interleave, gives the growth back between steps, fails waiters), stage 3's check that
// every rank runs the same layers (with a fake all-gather standing in for a second rank),
// and the issue queue that keeps collectives in program order while reads complete in any.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actors/zero/bucket_pool.hpp"
#include "actors/zero/issue_queue.hpp"
#include "actors/zero/sequence_check.hpp"

namespace troupe {
namespace {

int64_t communication_bytes(const MemoryLedger& ledger) {
  return ledger.current()[MemoryKind::communication];
}

TEST(IssueQueue, IssuesGoOutInTheOrderTheirPlacesWereTakenWhateverOrderTheyAreReadyIn) {
  IssueQueue queue;
  std::vector<int> out;
  auto a = queue.reserve([&] { out.push_back(1); });  // a gather waiting for its read
  queue.issue([&] { out.push_back(2); });             // a reduce-scatter ready at once
  auto c = queue.reserve([&] { out.push_back(3); });  // another gather
  EXPECT_TRUE(out.empty()) << "nothing overtakes the first place";
  EXPECT_EQ(queue.waiting(), 3u);
  queue.ready(c);  // reads complete out of order
  EXPECT_TRUE(out.empty());
  queue.ready(a);
  EXPECT_EQ(out, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(queue.waiting(), 0u);
  queue.issue([&] { out.push_back(4); });
  EXPECT_EQ(out, (std::vector<int>{1, 2, 3, 4})) << "an empty line lets a ready issue go at once";
}

TEST(IssueQueue, ReadiedFromManyThreadsKeepsTheOrder) {
  IssueQueue queue;
  std::vector<int> out;
  std::vector<IssueQueue::Ticket> tickets;
  for (int i = 0; i < 200; ++i) tickets.push_back(queue.reserve([&out, i] { out.push_back(i); }));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 199 - t; i >= 0; i -= 4) queue.ready(tickets[static_cast<std::size_t>(i)]);
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(out.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], i);
}

TEST(BucketPool, GrowsWhileEverySlotFillsAndGivesTheGrowthBackBetweenSteps) {
  auto ledger = std::make_shared<MemoryLedger>();
  BucketPool pool(/*overlap=*/true, 256, ledger, 1.0);
  const int64_t slot_bytes = 256 * sizeof(float);
  EXPECT_EQ(communication_bytes(*ledger), 2 * slot_bytes);
  std::size_t a = pool.acquire(0, 256), b = pool.acquire(1, 256);
  std::size_t c = pool.acquire(2, 256);  // both slots still filling: waiting could never end
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(communication_bytes(*ledger), 3 * slot_bytes);
  for (std::size_t s : {a, b, c}) pool.release(s);
  pool.trim();
  EXPECT_EQ(communication_bytes(*ledger), 2 * slot_bytes) << "the grown slot is freed";
}

TEST(BucketPool, WaitsForASlotBeingReducedAndFailsWaitersWithTheError) {
  auto ledger = std::make_shared<MemoryLedger>();
  BucketPool pool(/*overlap=*/false, 16, ledger, 0.2);
  std::size_t a = pool.acquire(0, 16);
  pool.reducing(a);
  EXPECT_THROW(pool.acquire(1, 16), std::runtime_error) << "bounded wait for the slot in reduction";
  pool.fail("rank 1 was lost");
  try {
    pool.acquire(1, 16);
    FAIL() << "a failed pool must not hand out slots";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 1 was lost");
  }
}

// Without overlap_comm, posting a row returns only once it was reduced (released); with
// it, at once.
TEST(BucketPool, WithoutOverlapPostingWaitsUntilTheRowIsReduced) {
  auto ledger = std::make_shared<MemoryLedger>();
  BucketPool pool(/*overlap=*/false, 16, ledger, 5.0);
  std::size_t a = pool.acquire(0, 16);
  pool.reducing(a);
  std::atomic<bool> released{false};
  std::thread reducer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    released = true;
    pool.release(a);
  });
  pool.posted(a);
  EXPECT_TRUE(released);
  reducer.join();

  BucketPool overlapped(/*overlap=*/true, 16, ledger, 5.0);
  std::size_t b = overlapped.acquire(0, 16);
  overlapped.reducing(b);
  overlapped.posted(b);  // nothing releases it: returning proves there was no wait
  EXPECT_NE(overlapped.acquire(1, 16), b) << "the second shared slot";
}

// Rank 0 of two; the fake all-gather writes rank 1's records as if it ran `other`.
std::string disagreement(const std::vector<int64_t>& mine, const std::vector<int64_t>& other) {
  LayerSequenceCheck* check = nullptr;
  LayerSequenceCheck real(
      2, 0, {"embedding", "block0", "head"},
      [&](uint64_t id, BufferSpan input, BufferSpan output) {
        auto* all = reinterpret_cast<int64_t*>(output.data());
        std::size_t width = input.count * sizeof(float) / sizeof(int64_t);
        auto* theirs = all + width;
        if (id == 0) {  // step, micro, length, digest: only the length and digest matter here
          std::memcpy(theirs, all, width * sizeof(int64_t));
          theirs[2] = static_cast<int64_t>(other.size());
          theirs[3] = all[3] + (other == mine ? 0 : 1);
        } else {
          theirs[0] = static_cast<int64_t>(other.size());
          for (std::size_t i = 0; i < other.size(); ++i) theirs[i + 1] = other[i];
        }
        check->on_gathered(id, "");
      },
      5.0);
  check = &real;
  try {
    real.agree(2, 0, mine);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(LayerSequenceCheck, SameSequencesAgree) {
  EXPECT_EQ(disagreement({0, 1, 2}, {0, 1, 2}), "");
}

TEST(LayerSequenceCheck, ADifferentLayerIsNamedWithStepMicroBatchAndPosition) {
  std::string error = disagreement({0, 1, 2}, {0, 2});
  EXPECT_EQ(
      error.rfind("step 3, micro-batch 0: rank 1 runs layer 2 (head) where rank 0 runs layer 1 (block0), "
                  "at position 1 of the forward pass",
                  0),
      0u)
      << error;
}

TEST(LayerSequenceCheck, ALongerScheduleThatRepeatsLayersIsComparedWhole) {
  // Longer than the model has layers: the exchange widens to the longest sequence.
  std::string error = disagreement({0, 1, 1, 1, 1, 2}, {0, 1, 1, 1, 1, 1, 2});
  EXPECT_NE(error.find("rank 1 runs layer 1 (block0) where rank 0 runs layer 2 (head), at position 5"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace troupe
