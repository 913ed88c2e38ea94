// The tensor-parallel layers against the plain model they split: every rank of a group
// runs on a thread of its own over an in-process exchange (the real transport's
// collectives are the integration tests'), and the loss and every gradient, put back
// together from the shards, must equal the single-process GPT's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/model_parameters.hpp"
#include "runtime/model/family.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/gpt_tensor_parallel.hpp"
#include "troupe/tensor_parallel.hpp"  // the public header, as a trainer includes it

namespace troupe {
namespace {

// Every rank hands in its buffer and gets every rank's back, in rank order.
class Exchange {
 public:
  explicit Exchange(int64_t size) : size_(size), slots_(static_cast<std::size_t>(size)) {}

  std::vector<std::vector<float>> swap(int64_t rank, std::vector<float> mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t generation = generation_;
    slots_[static_cast<std::size_t>(rank)] = std::move(mine);
    if (++arrived_ == size_) {
      results_[generation % 2] = slots_;  // the one after next cannot end before all took this
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    return results_[generation % 2];
  }

 private:
  int64_t size_;
  int64_t arrived_ = 0;
  int64_t generation_ = 0;
  std::vector<std::vector<float>> slots_;
  std::vector<std::vector<float>> results_[2];
  std::mutex mutex_;
  std::condition_variable changed_;
};

class ThreadComm : public TensorParallelComm {
 public:
  ThreadComm(Exchange& exchange, int64_t rank, int64_t size)
      : exchange_(exchange), rank_(rank), size_(size) {}

  Status all_reduce(float* data, std::size_t count) override {
    auto all = exchange_.swap(rank_, std::vector<float>(data, data + count));
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (const auto& other : all) sum += other[i];
      data[i] = sum;
    }
    return {};
  }
  Status all_gather(const float* input, float* output, std::size_t count) override {
    auto all = exchange_.swap(rank_, std::vector<float>(input, input + count));
    for (std::size_t r = 0; r < all.size(); ++r) std::copy(all[r].begin(), all[r].end(), output + r * count);
    return {};
  }
  Status reduce_scatter(const float* input, float* output, std::size_t count) override {
    const std::size_t total = count * static_cast<std::size_t>(size_);
    auto all = exchange_.swap(rank_, std::vector<float>(input, input + total));
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (const auto& other : all) sum += other[static_cast<std::size_t>(rank_) * count + i];
      output[i] = sum;
    }
    return {};
  }
  std::function<Status()> start_all_reduce(float* data, std::size_t count) override {
    Status done = all_reduce(data, count);
    return [done] { return done; };
  }
  std::function<Status()> start_reduce_scatter(const float* input, float* output,
                                               std::size_t count) override {
    Status done = reduce_scatter(input, output, count);
    return [done] { return done; };
  }

 private:
  Exchange& exchange_;
  int64_t rank_;
  int64_t size_;
};

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 256;
  m.seq_len = 8;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.d_ff = 64;
  m.tie_embeddings = true;
  return m;
}

struct Trained {
  double loss = 0;
  std::vector<torch::Tensor> gradients;  // model order
  std::vector<std::string> names;
};

Trained plain_run(const ModelConfig& model, const torch::Tensor& input, const torch::Tensor& target) {
  torch::manual_seed(7);
  auto layers = make_model(model);
  torch::Tensor loss = lm_loss(layers->forward(input), target);
  loss.backward();
  auto parameters = model_parameters(layers);
  Trained t;
  t.loss = loss.item<double>();
  for (auto& p : parameters->tensors) t.gradients.push_back(p.grad().clone());
  t.names = parameters->names;
  return t;
}

// tp ranks on threads; every gradient joined from the shards, in model order.
Trained parallel_run(const ModelConfig& model, int64_t tp, bool sequence, const torch::Tensor& input,
                     const torch::Tensor& target) {
  Exchange exchange(tp);
  std::vector<std::shared_ptr<TensorParallelGroup>> groups;
  std::vector<torch::nn::Sequential> models;
  for (int64_t r = 0; r < tp; ++r) {  // built in turn: they draw from the one global generator
    groups.push_back(std::make_shared<TensorParallelGroup>(tp, r, sequence));
    groups.back()->bind(std::make_shared<ThreadComm>(exchange, r, tp));
    torch::manual_seed(7);
    models.push_back(make_tensor_parallel_model(model, groups.back()));
  }
  std::vector<double> losses(static_cast<std::size_t>(tp));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      auto loss = tensor_parallel_gpt_loss(groups[static_cast<std::size_t>(r)])(
          models[static_cast<std::size_t>(r)]->forward(input), target);
      loss.backward();
      losses[static_cast<std::size_t>(r)] = loss.item<double>();
    });
  for (auto& t : threads) t.join();
  Trained t;
  t.loss = losses[0];
  for (double l : losses) EXPECT_EQ(l, losses[0]) << "every rank of the group has the same loss";
  std::vector<ModelParameters> shards;
  for (auto& m : models) shards.push_back(*model_parameters(m));
  for (std::size_t k = 0; k < shards[0].tensors.size(); ++k) {
    std::vector<torch::Tensor> pieces;
    for (auto& s : shards) pieces.push_back(s.tensors[k].grad());
    const TensorSplit split = groups[0]->split_of(shards[0].tensors[k].unsafeGetTensorImpl());
    if (split.replicated) {
      for (auto& p : pieces)
        EXPECT_TRUE(torch::equal(p, pieces[0])) << shards[0].names[k] << " differs between ranks";
    }
    t.gradients.push_back(tp::join_shards(pieces, split));
    t.names.push_back(shards[0].names[k]);
  }
  return t;
}

// The split model's loss and every gradient (joined from the shards) equal the plain model's.
void expect_same_step(const Trained& parallel, const Trained& plain) {
  EXPECT_NEAR(parallel.loss, plain.loss, 1e-6 * plain.loss);
  ASSERT_EQ(parallel.names, plain.names);
  for (std::size_t k = 0; k < plain.gradients.size(); ++k) {
    ASSERT_EQ(parallel.gradients[k].sizes(), plain.gradients[k].sizes()) << plain.names[k];
    const double scale = plain.gradients[k].norm().item<double>() + 1e-12;
    EXPECT_LT((parallel.gradients[k] - plain.gradients[k]).norm().item<double>() / scale, 1e-5)
        << plain.names[k];
  }
}

class TensorParallelModel : public ::testing::TestWithParam<std::tuple<std::string, int64_t, bool>> {};

TEST_P(TensorParallelModel, LossAndGradientsEqualThePlainModels) {
  const auto [family, tp, sequence] = GetParam();
  ModelConfig model = tiny_model();
  if (family == "llama") {  // 4 query heads over 4 key/value heads split 2 or 4 ways; vocabulary 320
    model.type = "llama";
    model.n_kv_heads = 4;
    model.vocab_size = 320;
  }
  torch::manual_seed(11);
  torch::Tensor input = torch::randint(0, model.vocab_size, {3, model.seq_len}, torch::kLong);
  torch::Tensor target = torch::randint(0, model.vocab_size, {3, model.seq_len}, torch::kLong);
  expect_same_step(parallel_run(model, tp, sequence, input, target), plain_run(model, input, target));
}

INSTANTIATE_TEST_SUITE_P(Groups, TensorParallelModel,
                         ::testing::Combine(::testing::Values("gpt", "llama"),
                                            ::testing::Values(int64_t{2}, int64_t{4}), ::testing::Bool()));

// Grouped-query attention split 2 ways: each rank's 2 query heads share its 1 key/value head.
TEST(TensorParallelLlama, GroupedQueryAttentionSplitsItsKeyValueHeads) {
  ModelConfig model = tiny_model();
  model.type = "llama";
  model.n_kv_heads = 2;
  model.vocab_size = 320;
  torch::manual_seed(12);
  torch::Tensor input = torch::randint(0, model.vocab_size, {2, model.seq_len}, torch::kLong);
  torch::Tensor target = torch::randint(0, model.vocab_size, {2, model.seq_len}, torch::kLong);
  expect_same_step(parallel_run(model, 2, true, input, target), plain_run(model, input, target));
}

TEST(TensorParallelShards, TakeAndJoinAreInverse) {
  torch::Tensor qkv = torch::arange(12 * 5, torch::kFloat32).view({12, 5});
  const TensorSplit blocks{false, 0, 3};
  std::vector<torch::Tensor> shards;
  for (int64_t t = 0; t < 2; ++t) shards.push_back(tp::take_shard(qkv, blocks, t, 2));
  // Rank 0 holds the first half of each of q, k and v: rows 0-1, 4-5, 8-9.
  EXPECT_TRUE(
      torch::equal(shards[0], torch::cat({qkv.narrow(0, 0, 2), qkv.narrow(0, 4, 2), qkv.narrow(0, 8, 2)})));
  EXPECT_TRUE(torch::equal(tp::join_shards(shards, blocks), qkv));
  const TensorSplit columns{false, 1, 1};
  torch::Tensor w = torch::arange(4 * 6, torch::kFloat32).view({4, 6});
  std::vector<torch::Tensor> thirds;
  for (int64_t t = 0; t < 3; ++t) thirds.push_back(tp::take_shard(w, columns, t, 3));
  EXPECT_TRUE(torch::equal(thirds[1], w.narrow(1, 2, 2)));
  EXPECT_TRUE(torch::equal(tp::join_shards(thirds, columns), w));
}

TEST(TensorParallelShards, ALayerRunBeforeTheEngineBindsItsGroupSaysSo) {
  auto group = std::make_shared<TensorParallelGroup>(2, 0, false);
  torch::manual_seed(1);
  tp::RowParallelLinear layer(group, 4, 3);
  try {
    layer(torch::ones({2, 2}));
    FAIL() << "ran without a group";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("before the engine bound its group"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe
