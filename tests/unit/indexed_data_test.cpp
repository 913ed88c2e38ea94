// megatron-core indexed datasets as troupe reads them (runtime/data/): the index checked
// claim by claim, tokens read back, megatron's split and blend, samples cut across document
// boundaries and shuffled without a table, and [data]'s keys. Against megatron-core itself:
// tests/integration/megatron_data_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/config/load.hpp"
#include "runtime/data/blend.hpp"
#include "runtime/data/indexed_dataset.hpp"
#include "runtime/data/indexed_samples.hpp"
#include "runtime/data/permutation.hpp"
#include "tests/support/indexed_writer.hpp"

namespace troupe {
namespace {

std::string temp_prefix(const std::string& name) {
  return ::testing::TempDir() + "troupe_indexed_" + name;
}

// Documents of 5, 0, 7 and (two sequences) 3 + 4 tokens; token i of the stream is i.
std::string small_dataset(const std::string& name, uint8_t code = 8, int bytes = 2) {
  testing::IndexedWriter w(temp_prefix(name), code, bytes);
  int64_t next = 0;
  auto sequence = [&](int n) {
    std::vector<int64_t> tokens(static_cast<std::size_t>(n));
    for (auto& t : tokens) t = next++;
    w.add_sequence(tokens);
  };
  for (int n : {5, 0, 7}) {
    sequence(n);
    w.end_document();
  }
  sequence(3);
  sequence(4);
  w.end_document();
  w.finish();
  return w.prefix;
}

std::string open_error(const std::string& prefix) {
  auto opened = IndexedDataset::open(prefix);
  EXPECT_FALSE(opened.ok());
  return opened.ok() ? "<opened>" : opened.error().message;
}

TEST(IndexedDataset, ReadsWhatWasWritten) {
  auto dataset = IndexedDataset::open(small_dataset("good"));
  ASSERT_TRUE(dataset.ok()) << dataset.error().message;
  const IndexedDataset& d = **dataset;
  EXPECT_EQ(d.type(), TokenType::u16);
  EXPECT_EQ(d.sequence_count(), 5);
  EXPECT_EQ(d.document_count(), 4);
  EXPECT_EQ(d.token_count(), 19);
  EXPECT_EQ(d.sequence_start(2), 5);
  EXPECT_EQ(d.sequence_start(4), 15);
  EXPECT_EQ(d.sequence_start(5), 19);
  std::vector<int64_t> tokens(19);
  d.read(0, 19, tokens.data());
  for (int64_t i = 0; i < 19; ++i) EXPECT_EQ(tokens[static_cast<std::size_t>(i)], i);
  // Opened again unchanged: the same dataset, not checked a second time; rewritten: afresh.
  auto again = IndexedDataset::open(d.prefix());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), dataset->get());
  testing::IndexedWriter w(d.prefix());
  w.add_sequence({7, 8, 9});
  w.end_document();
  w.finish();
  auto rewritten = IndexedDataset::open(d.prefix());
  ASSERT_TRUE(rewritten.ok()) << rewritten.error().message;
  EXPECT_EQ((*rewritten)->token_count(), 3);
}

TEST(IndexedDataset, EveryIntegerDtypeReadsBack) {
  for (auto [code, bytes] : {std::pair<uint8_t, int>{1, 1}, {2, 1}, {3, 2}, {4, 4}, {5, 8}, {8, 2}}) {
    auto dataset = IndexedDataset::open(small_dataset("dtype" + std::to_string(code), code, bytes));
    ASSERT_TRUE(dataset.ok()) << dataset.error().message;
    std::vector<int64_t> tokens(3);
    (*dataset)->read(16, 3, tokens.data());
    EXPECT_EQ(tokens, (std::vector<int64_t>{16, 17, 18})) << "dtype code " << int{code};
  }
}

TEST(IndexedDataset, BadIndexesAreRefusedNamingTheFileAndWhat) {
  const std::string prefix = small_dataset("bad");
  const std::string idx = prefix + ".idx";
  auto bad_copy = [&](const std::string& name, long offset, const void* bytes, std::size_t count) {
    const std::string copy = temp_prefix(name);
    std::system(("cp " + prefix + ".bin " + copy + ".bin && cp " + idx + " " + copy + ".idx").c_str());
    testing::patch_file(copy + ".idx", offset, bytes, count);
    return copy;
  };
  const std::string magic = open_error(bad_copy("magic", 0, "XXIDIDX", 7));
  EXPECT_NE(magic.find("indexed_magic.idx' is not a megatron-core index"), std::string::npos) << magic;
  const uint64_t two = 2;
  EXPECT_NE(open_error(bad_copy("version", 9, &two, 8)).find("is version 2 of the format"),
            std::string::npos);
  const uint8_t float32 = 7, unknown = 9;
  EXPECT_NE(open_error(bad_copy("float", 17, &float32, 1)).find("token dtype code 7 (float32)"),
            std::string::npos);
  EXPECT_NE(open_error(bad_copy("code", 17, &unknown, 1)).find("token dtype code 9"), std::string::npos);
  const uint64_t more = 6;
  EXPECT_NE(open_error(bad_copy("count", 18, &more, 8)).find("claims 6 sequences and 5 document indices"),
            std::string::npos);
  const int64_t moved = 2;  // sequence 1's pointer: 10 bytes after sequence 0's start, not 2
  EXPECT_NE(open_error(bad_copy("pointer", 34 + 5 * 4 + 8, &moved, 8))
                .find("sequence 1 starts at byte 2 of the .bin, but the sequences before it end at byte 10"),
            std::string::npos);
  const int64_t zero = 0;  // document index 2 (was 2) below document index 1
  EXPECT_NE(open_error(bad_copy("documents", 34 + 5 * 12 + 16, &zero, 8)).find("document index 2 is 0"),
            std::string::npos);
  const int32_t negative = -1;
  EXPECT_NE(open_error(bad_copy("length", 34 + 4, &negative, 4)).find("sequence 1 has length -1"),
            std::string::npos);
  EXPECT_NE(open_error(temp_prefix("missing")).find("cannot open '" + temp_prefix("missing") + ".idx'"),
            std::string::npos);
}

TEST(IndexedDataset, ABinOfAnotherLengthIsRefused) {
  const std::string prefix = small_dataset("short");
  std::system(("truncate -s 30 " + prefix + ".bin").c_str());
  const std::string shorter = open_error(prefix);
  EXPECT_NE(shorter.find("short.bin' holds 30 bytes, but its index"), std::string::npos) << shorter;
  EXPECT_NE(shorter.find("describes 38 (19 tokens of uint16)"), std::string::npos) << shorter;
  std::system(("truncate -s 40 " + prefix + ".bin").c_str());
  EXPECT_NE(open_error(prefix).find("holds 40 bytes"), std::string::npos);
  std::system(("truncate -s 50 " + prefix + ".idx").c_str());
  EXPECT_NE(open_error(prefix).find("which take"), std::string::npos);
}

TEST(Permutation, IsABijectionAndDependsOnTheKey) {
  for (uint64_t n : {1, 2, 3, 5, 64, 100, 1000, 4097}) {
    Permutation p(n, 42);
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(p(i));
    EXPECT_EQ(seen.size(), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  Permutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  EXPECT_LT(same, 20);
}

// megatron-core's build_blending_indices, written out: the table a Blend never builds.
std::vector<int> greedy_table(const std::vector<double>& weights, int64_t n) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> counts(weights.size(), 0);
  std::vector<int> picks;
  for (int64_t i = 0; i < n; ++i) {
    const double at = std::max<double>(static_cast<double>(i), 1.0);
    std::size_t best = 0;
    for (std::size_t k = 1; k < weights.size(); ++k)
      if (weights[k] / sum * at - counts[k] > weights[best] / sum * at - counts[best]) best = k;
    picks.push_back(static_cast<int>(best));
    ++counts[best];
  }
  return picks;
}

TEST(Blend, PicksAsMegatronInAnyOrderOfQuestions) {
  const std::vector<double> weights = {5, 3, 2};
  const std::vector<int> table = greedy_table(weights, 20000);
  Blend blend(weights);
  std::vector<int64_t> order(20000);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.begin() + 9000);  // far jumps back, then forward again
  std::vector<int64_t> counts(3, 0), index_of(20000);
  for (int64_t i : order) EXPECT_EQ(blend.at(i).dataset, table[static_cast<std::size_t>(i)]) << i;
  for (int64_t i = 0; i < 20000; ++i) {
    const Blend::Pick pick = blend.at(i);
    EXPECT_EQ(pick.index, counts[static_cast<std::size_t>(pick.dataset)]++);
  }
  for (std::size_t k = 0; k < 3; ++k) EXPECT_NEAR(counts[k] / 20000.0, weights[k] / 10.0, 0.01);
}

TEST(Split, IsMegatronsBookEndsRoundedHalfToEven) {
  auto parts = split_sequences({969, 30, 1}, 1000);
  EXPECT_EQ(parts[0], (std::pair<int64_t, int64_t>{0, 969}));
  EXPECT_EQ(parts[1], (std::pair<int64_t, int64_t>{969, 999}));
  EXPECT_EQ(parts[2], (std::pair<int64_t, int64_t>{999, 1000}));
  auto halves = split_sequences({1, 1}, 5);  // 2.5 rounds to 2, as Python's round()
  EXPECT_EQ(halves[0], (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(halves[1], (std::pair<int64_t, int64_t>{2, 5}));
  EXPECT_EQ(halves[2], (std::pair<int64_t, int64_t>{5, 5}));
}

// One dataset whose token i is i (int32), documents of varied lengths.
std::shared_ptr<const IndexedDataset> counting_dataset(const std::string& name, int64_t tokens) {
  testing::IndexedWriter w(temp_prefix(name), 4, 4);
  int64_t next = 0;
  for (int64_t length = 1; next < tokens; length = length % 37 + 3) {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < length && next < tokens; ++i) t.push_back(next++);
    w.add_sequence(t);
    w.end_document();
  }
  w.finish();
  auto opened = IndexedDataset::open(w.prefix);
  EXPECT_TRUE(opened.ok()) << opened.error().message;
  return *opened;
}

TEST(IndexedSamples, EachEpochVisitsEveryWindowOnceAcrossDocuments) {
  IndexedSamplesOptions o;
  o.datasets = {counting_dataset("windows", 1001)};
  o.split = {1};
  o.seq_len = 8;
  o.seed = 5;
  o.vocab_size = 1 << 20;
  auto samples = IndexedSamples::make(o);
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  ASSERT_EQ(samples->sources()[0].samples, 125);  // (1001 - 1) / 8
  std::vector<int64_t> tokens(9 * 250);
  samples->fill(0, 250, tokens.data());
  std::set<int64_t> first_epoch, second_epoch;
  std::vector<int64_t> order[2];
  for (int64_t j = 0; j < 250; ++j) {
    const int64_t* t = tokens.data() + j * 9;
    for (int k = 1; k < 9; ++k) ASSERT_EQ(t[k], t[0] + k);  // consecutive, across documents
    EXPECT_EQ(t[0] % 8, 0);
    (j < 125 ? first_epoch : second_epoch).insert(t[0]);
    order[j / 125].push_back(t[0]);
  }
  EXPECT_EQ(first_epoch.size(), 125u);
  EXPECT_EQ(second_epoch, first_epoch);
  EXPECT_NE(order[0], order[1]);
  std::vector<int64_t> again(9 * 3);
  samples->fill(100, 3, again.data());  // any sample on its own, as any rank asks
  EXPECT_TRUE(std::equal(again.begin(), again.end(), tokens.begin() + 100 * 9));
}

TEST(IndexedSamples, ATokenOutsideTheVocabularyIsNamed) {
  IndexedSamplesOptions o;
  o.datasets = {counting_dataset("vocab", 400)};
  o.split = {1};
  o.seq_len = 16;
  o.vocab_size = 256;
  auto samples = IndexedSamples::make(o);
  ASSERT_TRUE(samples.ok());
  std::vector<int64_t> tokens(17 * 24);
  try {
    samples->fill(0, 24, tokens.data());
    FAIL() << "no error for tokens up to 399 in a vocabulary of 256";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary (vocab_size = 256)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("troupe_indexed_vocab'"), std::string::npos) << e.what();
  }
}

TEST(IndexedSamples, APartShorterThanOneSampleIsNamed) {
  IndexedSamplesOptions o;
  o.datasets = {counting_dataset("tiny_part", 300)};
  o.split = {99, 1};
  o.part = DataPart::validation;
  o.seq_len = 64;
  o.vocab_size = 1 << 20;
  auto samples = IndexedSamples::make(o);
  ASSERT_FALSE(samples.ok());
  EXPECT_NE(samples.error().message.find("its validation part"), std::string::npos)
      << samples.error().message;
  EXPECT_NE(samples.error().message.find("shorter than one sample of seq_len + 1 = 65 tokens"),
            std::string::npos);
}

std::string config_error(const std::string& text) {
  auto loaded = load_config_string("[batch]\nmicro_batch_size = 4\n" + text, "job.toml", {});
  EXPECT_FALSE(loaded.ok());
  return loaded.ok() ? "<loaded>" : loaded.error().message;
}

TEST(DataConfig, TheKeysAreCheckedBeforeAnyRankStarts) {
  const std::string prefix = small_dataset("config");
  const std::string paths = "paths = [\"" + prefix + "\"]\n";
  EXPECT_NE(config_error("[data]\npath = \"x\"\n" + paths).find("paths (indexed datasets) and path = \"x\""),
            std::string::npos);
  EXPECT_NE(config_error("[data]\n" + paths + "weights = [1, 2]\n").find("weights has 2 entries for 1 paths"),
            std::string::npos);
  EXPECT_NE(config_error("[data]\n" + paths + "weights = [0]\n").find("weights[0]"), std::string::npos);
  EXPECT_NE(config_error("[data]\nweights = [1]\n").find("weights blend [data] paths, which is empty"),
            std::string::npos);
  EXPECT_NE(config_error("[data]\nsplit = [0, 1]\n").find("with a train share above 0, got [0.0, 1.0]"),
            std::string::npos);
  EXPECT_NE(config_error("[data]\nsplit = \"9,x\"\n").find("[data] split must be"), std::string::npos);
  EXPECT_NE(config_error("[data]\nsplit = [1, 1, 1, 1]\n").find("split must be"), std::string::npos);
  EXPECT_NE(config_error("[train]\neval_interval = 5\n").find("gives it no share"), std::string::npos);
  const std::string too_short = config_error("[model]\nseq_len = 32\n[data]\n" + paths);
  EXPECT_NE(too_short.find("job.toml:"), std::string::npos) << too_short;
  EXPECT_NE(too_short.find("its train part"), std::string::npos) << too_short;
  auto synthetic = load_config_string(
      "[batch]\nmicro_batch_size = 4\n[data]\nsplit = \"98,2\"\n[train]\neval_interval = 5\n", "job.toml",
      {});
  ASSERT_TRUE(synthetic.ok()) << synthetic.error().message;
  EXPECT_EQ(synthetic->data.split, (std::vector<double>{98, 2}));
}

}  // namespace
}  // namespace troupe
