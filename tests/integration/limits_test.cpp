// No input crashes troupe: each kind of value that once aborted a run, exhausted the
// machine's memory or hung it is refused before anything is allocated or started, with a
// sentence naming the key and its limit (or the memory needed and available), and a run
// that diverges stops at the step it did, on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

std::string tiny_gpt() {
  return std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-gpt.toml";
}

struct Case {
  std::string name;
  std::string settings;  ///< --set arguments
  std::string needle;    ///< in the refusal
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

class Refused : public ::testing::TestWithParam<Case> {};

// `troupe check` and `troupe run` both refuse, with the same sentence, before any rank.
TEST_P(Refused, ByCheckAndByRunBeforeAnyRankStarts) {
  const Case& c = GetParam();
  for (const char* command : {" check ", " run "}) {
    auto r = testing::run_command(std::string(TROUPE_BINARY) + command + tiny_gpt() + c.settings +
                                      " --set cluster.coordinator=" + testing::free_coordinator(),
                                  60);
    EXPECT_EQ(r.exit_code, 2) << command << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << command << "missing \"" << c.needle << "\" in\n"
                                                          << r.output;
    EXPECT_EQ(r.output.find("[rank"), std::string::npos) << "a rank started:\n" << r.output;
  }
}

const std::string kMemory = "need at least";

INSTANTIATE_TEST_SUITE_P(
    Limits, Refused,
    ::testing::Values(
        Case{"HugeDModel", " --set model.d_model=131072 --set model.n_heads=64", kMemory},
        Case{"DModelOverItsBound", " --set model.d_model=1000000",
             "[model] d_model must be a positive integer up to 2^17, got 1000000"},
        Case{"HugeVocabulary", " --set model.vocab_size=16777216 --set model.d_model=1024", kMemory},
        Case{"HugeDff", " --set model.d_ff=1048576 --set model.n_layers=64", kMemory},
        Case{"DffOverItsBound", " --set model.d_ff=99999999999",
             "[model] d_ff must be an integer from 0 to 2^20 (0 = the family's default), got 99999999999"},
        Case{"HugeSyntheticCorpus", " --set data.synthetic_bytes=68719476736", kMemory},
        Case{"SyntheticCorpusOverItsBound", " --set data.synthetic_bytes=999999999999999",
             "[data] synthetic_bytes must be an integer greater than seq_len + 1, up to 2^36 (64 GiB)"},
        Case{"HugePeerTimeout", " --set cluster.peer_timeout_s=1e300",
             "[cluster] peer_timeout_s must be a positive number of seconds up to 86400 (a day)"},
        Case{"HugeLayerCount", " --set model.n_layers=16384 --set model.d_model=1024 --set model.n_heads=8",
             kMemory},
        Case{"LayerCountOverItsBound", " --set model.n_layers=100000000",
             "[model] n_layers must be a positive integer up to 2^14"},
        Case{"HugeAccumulation",
             " --set batch.gradient_accumulation_steps=1000000000 --set batch.global_batch_size=0",
             "[batch] gradient_accumulation_steps must be a positive integer up to 2^20"},
        Case{"HugePrefetch", " --set data.prefetch_micro_batches=1000000000",
             "[data] prefetch_micro_batches must be an integer from 1 to 1024"},
        Case{"HugePrefetchBucket", " --set zero.prefetch_bucket_size=9000000000000000",
             "[zero] prefetch_bucket_size must be a positive integer up to 2^40"},
        Case{"ManyRanks",
             " --set cluster.world_size=1000 --set parallel.dp=1000 --set batch.global_batch_size=0",
             kMemory},
        Case{"TooManyRanksForOneMachine",
             " --set cluster.world_size=5000 --set parallel.dp=5000 --set batch.global_batch_size=0",
             "troupe run starts at most 1024 ranks on one machine"},
        Case{"TokenOverItsLimit", " --set cluster.token=" + std::string(1025, 't'),
             "[cluster] token is 1025 bytes; a token may have at most 1024"},
        Case{"HugeThreadCount", " --set train.threads=1000000",
             "[train] threads must be an integer from 0 to 1024 (0 = automatic)"},
        Case{
            "MissingNvmeParent",
            " --set offload.optimizer=nvme --set zero.stage=1 --set offload.nvme_path=/nonexistent/a/b",
            "[offload] nvme_path /nonexistent/a/b (to be made): the directory /nonexistent/a does not exist"},
        Case{"MetricsUnderAFile", " --set train.metrics_path=" + tiny_gpt() + "/metrics.jsonl",
             "[train] metrics_path " + tiny_gpt() + "/metrics.jsonl: " + tiny_gpt() + " is not a directory"},
        Case{"TraceInAMissingDirectory", " --set trace.path=/nonexistent/trace.json",
             "[trace] path /nonexistent/trace.json: the directory /nonexistent does not exist"}),
    [](const auto& info) { return info.param.name; });

// lr = 1e308 makes the first update overflow: the run stops at the step whose loss or
// gradient norm is not finite, on every rank, instead of training NaN to the end.
TEST(Limits, ADivergingRunStopsAtTheStepNamingIt) {
  auto r =
      testing::run_command(std::string(TROUPE_BINARY) + " run " + tiny_gpt() +
                               " --set optimizer.lr=1e308 --set train.steps=50 --set cluster.coordinator=" +
                               testing::free_coordinator(),
                           120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find("training diverged"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 50/50"), std::string::npos) << "ran to the end:\n" << r.output;
}

}  // namespace
}  // namespace troupe
