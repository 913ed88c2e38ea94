// The monitor under `troupe run`, held to TensorBoard's own reader: a dp 2 fp16 run with
// validation, saved at step 8 and resumed to step 12, leaves event files whose every
// scalar equals the metrics file at every step (as the 32-bit float TensorBoard keeps)
// (tests/python/tensorboard_events.py, with the tensorboard package) and DeepSpeed's CSV files holding the
// same values; the reference trainer's too. A monitor folder that cannot be made is said once, and the run
// trains on and exits 0.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe::testing {
namespace {

const std::string kPython = TROUPE_TORCH_PYTHON;
const std::string kScript = std::string(TROUPE_SOURCE_DIR) + "/tests/python/tensorboard_events.py";

bool python_has_tensorboard() {
  return !kPython.empty() && run_command(kPython + " -c \"import tensorboard\"", 120).exit_code == 0;
}

std::string job() {
  return std::string(TROUPE_BINARY) + " run " + TROUPE_SOURCE_DIR +
         "/configs/tiny-gpt.toml --set batch.micro_batch_size=4 --set precision.dtype=\\\"fp16\\\"" +
         " --set data.split=[90,10] --set train.eval_interval=4 --set train.eval_steps=1" +
         " --set cluster.coordinator=" + free_coordinator();
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(TensorBoard, EveryScalarEqualsTheMetricsFileAtEveryStepAcrossAResume) {
  if (!python_has_tensorboard())
    GTEST_SKIP() << "no Python with the tensorboard package (TROUPE_TORCH_PYTHON = '" << kPython
                 << "'; scripts/torch-env.sh install adds it)";
  const std::string dir = make_temp_dir();
  const std::string outputs = " --metrics " + dir + "/metrics.jsonl --set monitor.tensorboard=\\\"" + dir +
                              "/tb\\\" --set monitor.csv=\\\"" + dir + "/csv\\\" --set checkpoint.dir=\\\"" +
                              dir + "/ckpt\\\" --set checkpoint.every_steps=4";
  auto first = run_command(job() + " --set train.steps=10" + outputs, 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // On from step 8's checkpoint to 12: steps 9 and 10 are trained again.
  auto resumed = run_command(job() + " --set train.steps=12 --resume latest" + outputs, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto checked = run_command(
      kPython + " " + kScript + " check " + dir + "/tb " + dir + "/metrics.jsonl " + dir + "/csv", 120);
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("12 steps"), std::string::npos) << checked.output;
}

// `troupe run --reference` (plain LibTorch in one process, no engine) writes the same files.
TEST(TensorBoard, TheReferenceTrainerWritesEveryScalarOfTheMetricsFile) {
  if (!python_has_tensorboard())
    GTEST_SKIP() << "no Python with the tensorboard package (TROUPE_TORCH_PYTHON = '" << kPython
                 << "'; scripts/torch-env.sh install adds it)";
  const std::string dir = make_temp_dir();
  auto r = run_command(job() + " --reference --set train.steps=6 --metrics " + dir + "/metrics.jsonl" +
                           " --set monitor.tensorboard=\\\"" + dir + "/tb\\\" --set monitor.csv=\\\"" + dir +
                           "/csv\\\"",
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto checked = run_command(
      kPython + " " + kScript + " check " + dir + "/tb " + dir + "/metrics.jsonl " + dir + "/csv", 120);
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("6 steps"), std::string::npos) << checked.output;
}

TEST(TensorBoard, AFolderThatCannotBeMadeIsSaidOnceAndTheRunTrainsOn) {
  const std::string dir = make_temp_dir();
  write_file(dir + "/a-file", "not a folder");
  auto r = run_command(job() + " --set train.steps=6 --metrics " + dir + "/metrics.jsonl" +
                           " --set monitor.tensorboard=\\\"" + dir + "/a-file/tb\\\"",
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "TensorBoard folder " + dir + "/a-file/tb: cannot make the folder"), 1)
      << r.output;
  EXPECT_EQ(count(read_file(dir + "/metrics.jsonl"), "\"step\""), 6);
}

}  // namespace
}  // namespace troupe::testing
