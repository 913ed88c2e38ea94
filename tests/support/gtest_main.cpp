// The main of every test program: GoogleTest's, plus an exit status ctest can tell a skip
// by. When every test that ran was skipped (no GPU, not root, a CPU without AVX-512) the
// program prints each reason and exits kSkippedExitCode, which tests/CMakeLists.txt names
// as SKIP_RETURN_CODE, so ctest's summary lists it as "Skipped" rather than "Passed".
// Programs whose tests only partly depend on the machine have those tests registered as
// ctest entries of their own (troupe_test's CONDITIONAL), so no skip hides behind a pass.
// Everything a test program and the programs it starts write to the temporary folder
// ($TMPDIR, GoogleTest's TEST_TMPDIR) goes into one folder of its own, removed at exit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace {

constexpr int kSkippedExitCode = 77;

// Collects the message of every skipped test, to say why it did not run.
class SkipReasons : public ::testing::EmptyTestEventListener {
 public:
  // The name comes from OnTestStart: asking the UnitTest for the current test here would
  // take the lock it holds while it reports a result.
  void OnTestStart(const ::testing::TestInfo& test) override {
    current_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.skipped()) reasons_.push_back(current_ + ": " + result.message());
  }
  const std::vector<std::string>& reasons() const { return reasons_; }

 private:
  std::string current_;
  std::vector<std::string> reasons_;
};

}  // namespace

// Points $TMPDIR and TEST_TMPDIR at a folder of this program's, removed when it ends
// (tests/support/temp_dir.hpp); torchrun's, Python's and troupe's own temporary files too.
void use_own_temp_folder() {
  const std::string folder = troupe::testing::make_temp_dir("troupe-test-");
  if (folder.empty()) return;  // the tests that need one say so
  ::setenv("TMPDIR", folder.c_str(), 1);
  ::setenv("TEST_TMPDIR", folder.c_str(), 1);
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  use_own_temp_folder();
  auto* reasons = new SkipReasons;  // owned by the listener list
  ::testing::UnitTest::GetInstance()->listeners().Append(reasons);
  int status = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  for (const auto& reason : reasons->reasons()) std::printf("troupe-skip: %s\n", reason.c_str());
  bool all_skipped = unit->test_to_run_count() > 0 && unit->skipped_test_count() == unit->test_to_run_count();
  if (status == 0 && all_skipped) {
    std::printf("troupe-skip: all %d tests skipped\n", unit->skipped_test_count());
    std::fflush(stdout);
    return kSkippedExitCode;
  }
  return status;
}
