// OutputRelay: whole prefixed lines, partial lines, and live progress lines.
#include "runtime/launch/output_relay.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace troupe {
namespace {

/// Records every sink call; `calls` shows that each line arrives in one piece.
struct Recorder {
  std::string out;
  std::string err;
  std::vector<std::string> calls;

  OutputSink sink() {
    return [this](OutputStream stream, std::string_view bytes) {
      (stream == OutputStream::out ? out : err).append(bytes);
      calls.emplace_back(bytes);
    };
  }
};

TEST(OutputRelay, CompleteLinesArePrefixedWithRank) {
  Recorder recorder;
  OutputRelay relay(2, ProgressMode::as_lines, recorder.sink());
  relay.append(1, OutputStream::out, "hello\nworld\n");
  EXPECT_EQ(recorder.out, "[rank 1] hello\n[rank 1] world\n");
  EXPECT_EQ(recorder.err, "");
}

TEST(OutputRelay, StderrLinesGoToStderr) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::err, "oops\n");
  EXPECT_EQ(recorder.err, "[rank 0] oops\n");
  EXPECT_EQ(recorder.out, "");
}

TEST(OutputRelay, PartialLineWaitsForItsNewline) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::out, "hel");
  EXPECT_EQ(recorder.out, "");
  relay.append(0, OutputStream::out, "lo\n");
  EXPECT_EQ(recorder.out, "[rank 0] hello\n");
}

TEST(OutputRelay, FinalLineWithoutNewlineIsCompletedAtFinish) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::out, "last words");
  relay.finish(0, OutputStream::out);
  relay.finish(0, OutputStream::out);  // a second finish adds nothing
  EXPECT_EQ(recorder.out, "[rank 0] last words\n");
}

TEST(OutputRelay, PartialLinesOfTwoRanksNeverInterleave) {
  Recorder recorder;
  OutputRelay relay(2, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::out, "aaa");
  relay.append(1, OutputStream::out, "bbb");
  relay.append(0, OutputStream::out, "AAA\n");
  relay.append(1, OutputStream::out, "BBB\n");
  EXPECT_EQ(recorder.out, "[rank 0] aaaAAA\n[rank 1] bbbBBB\n");
  EXPECT_EQ(recorder.calls.size(), 2u);
}

TEST(OutputRelay, EmptyLineIsKept) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::out, "\n");
  EXPECT_EQ(recorder.out, "[rank 0] \n");
}

TEST(OutputRelay, OverlongLineIsRelayedInPieces) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::out, std::string(kLineBytesMax + 10, 'x'));
  ASSERT_EQ(recorder.calls.size(), 1u);
  EXPECT_EQ(recorder.calls[0].size(), std::string("[rank 0] \n").size() + kLineBytesMax);
  relay.finish(0, OutputStream::out);
  EXPECT_EQ(recorder.calls.back(), "[rank 0] xxxxxxxxxx\n");
}

TEST(OutputRelay, ProgressLineIsAPlainLineWhenNotATerminal) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::as_lines, recorder.sink());
  relay.append(0, OutputStream::out, "\x1estep 1/10\n");
  EXPECT_EQ(recorder.out, "[rank 0] step 1/10\n");
}

TEST(OutputRelay, ProgressLineIsDrawnInPlaceOnATerminal) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::in_place, recorder.sink());
  relay.append(0, OutputStream::out, "\x1estep 1\n\x1estep 2\n");
  EXPECT_EQ(recorder.out, "\rstep 1\x1b[K\rstep 2\x1b[K");
}

TEST(OutputRelay, LineAfterProgressStartsOnAFreshLine) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::in_place, recorder.sink());
  relay.append(0, OutputStream::out, "\x1estep 1\n");
  relay.append(0, OutputStream::err, "warning\n");
  relay.append(0, OutputStream::out, "done\n");
  EXPECT_EQ(recorder.out, "\rstep 1\x1b[K\n[rank 0] done\n");
  EXPECT_EQ(recorder.err, "[rank 0] warning\n");
  ASSERT_GE(recorder.calls.size(), 3u);
  EXPECT_EQ(recorder.calls[1], "\n");  // the newline comes before the stderr line
}

TEST(OutputRelay, NoteAndCloseEndTheProgressLine) {
  Recorder recorder;
  OutputRelay relay(1, ProgressMode::in_place, recorder.sink());
  relay.append(0, OutputStream::out, "\x1estep 1\n");
  relay.note("troupe: stopping");
  EXPECT_EQ(recorder.out, "\rstep 1\x1b[K\n");
  EXPECT_EQ(recorder.err, "troupe: stopping\n");
  relay.append(0, OutputStream::out, "\x1estep 2\n");
  relay.close();
  relay.close();  // only one newline
  EXPECT_EQ(recorder.out, "\rstep 1\x1b[K\n\rstep 2\x1b[K\n");
}

}  // namespace
}  // namespace troupe
