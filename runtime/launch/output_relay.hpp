// OutputRelay: turns the byte streams of many ranks into whole, rank-prefixed lines.
//
// The launcher reads each child's stdout and stderr in arbitrary chunks. The relay keeps a
// partial-line buffer per (rank, stream), and hands the sink one complete line at a time as
// `[rank N] text\n`, in a single sink call, so lines of two ranks never interleave. A line
// with no newline before end of stream is completed when finish() is called.
//
// Live progress: a line that starts with kProgressMarker (ASCII record separator, 0x1e) is
// a progress line. With ProgressMode::in_place (the launcher's stdout is a terminal) it is
// drawn over the previous one on stdout as `\r` text `\x1b[K` without a newline, and the
// next ordinary line first ends it with a newline. With ProgressMode::as_lines it is relayed
// like any other line, without the marker.
//
// Thread safety: none; one thread (the launcher's loop) owns a relay.
// Invariants: a pending buffer never holds a newline and never exceeds kLineBytesMax.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// The first byte of a live progress line.
inline constexpr char kProgressMarker = '\x1e';

/// A line longer than this is relayed in pieces of this size.
inline constexpr size_t kLineBytesMax = 64 * 1024;

enum class OutputStream { out, err };

/// How progress lines are shown.
enum class ProgressMode { in_place, as_lines };

/// Receives bytes for the launcher's own stdout or stderr.
using OutputSink = std::function<void(OutputStream, std::string_view)>;

class OutputRelay {
 public:
  /// `prefix_stdout` false: standard output lines pass unchanged (machine-readable
  /// output such as `troupe bench --json`); standard error keeps its prefix.
  OutputRelay(int64_t ranks, ProgressMode mode, OutputSink sink, bool prefix_stdout = true);

  /// Adds bytes read from `rank`'s `stream`; relays every line they complete.
  void append(int64_t rank, OutputStream stream, std::string_view bytes);

  /// Marks the end of `rank`'s `stream`: relays a final line that lacked a newline.
  void finish(int64_t rank, OutputStream stream);

  /// Writes one of the launcher's own lines (no prefix) to stderr.
  void note(std::string_view line);

  /// Ends a progress line still drawn in place, so the shell prompt starts on a fresh line.
  void close();

 private:
  std::string& pending(int64_t rank, OutputStream stream);
  void relay_line(int64_t rank, OutputStream stream, std::string_view line);
  void end_progress_line();

  ProgressMode mode_;
  OutputSink sink_;
  bool prefix_stdout_;
  std::vector<std::string> pending_;  // two per rank: stdout, stderr
  bool progress_drawn_ = false;       // a progress line is on screen without a newline
};

}  // namespace troupe
