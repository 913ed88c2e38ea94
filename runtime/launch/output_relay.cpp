#include "runtime/launch/output_relay.hpp"

#include <utility>

#include <fmt/format.h>

#include "base/check.hpp"

namespace troupe {

OutputRelay::OutputRelay(int64_t ranks, ProgressMode mode, OutputSink sink, bool prefix_stdout)
    : mode_(mode), sink_(std::move(sink)), prefix_stdout_(prefix_stdout), pending_(static_cast<size_t>(ranks) * 2) {
  TROUPE_CHECK(ranks >= 0, "negative rank count");
  TROUPE_CHECK(static_cast<bool>(sink_), "OutputRelay needs a sink");
}

std::string& OutputRelay::pending(int64_t rank, OutputStream stream) {
  size_t index = static_cast<size_t>(rank) * 2 + (stream == OutputStream::err ? 1 : 0);
  TROUPE_CHECK(rank >= 0 && index < pending_.size(), "rank out of range");
  return pending_[index];
}

void OutputRelay::append(int64_t rank, OutputStream stream, std::string_view bytes) {
  std::string& buffer = pending(rank, stream);
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      buffer.append(bytes);
      bytes = {};
    } else {
      buffer.append(bytes.substr(0, newline));
      bytes.remove_prefix(newline + 1);
      relay_line(rank, stream, buffer);
      buffer.clear();
    }
    // A child that never writes a newline must not grow the buffer without bound.
    while (buffer.size() >= kLineBytesMax) {
      relay_line(rank, stream, std::string_view(buffer).substr(0, kLineBytesMax));
      buffer.erase(0, kLineBytesMax);
    }
  }
}

void OutputRelay::finish(int64_t rank, OutputStream stream) {
  std::string& buffer = pending(rank, stream);
  if (buffer.empty()) return;
  relay_line(rank, stream, buffer);
  buffer.clear();
}

void OutputRelay::note(std::string_view line) {
  end_progress_line();
  sink_(OutputStream::err, fmt::format("{}\n", line));
}

void OutputRelay::close() {
  end_progress_line();
}

void OutputRelay::relay_line(int64_t rank, OutputStream stream, std::string_view line) {
  bool progress = !line.empty() && line.front() == kProgressMarker;
  if (progress) line.remove_prefix(1);
  if (progress && mode_ == ProgressMode::in_place) {
    sink_(OutputStream::out, fmt::format("\r{}\x1b[K", line));
    progress_drawn_ = true;
    return;
  }
  end_progress_line();
  if (stream == OutputStream::out && !prefix_stdout_) sink_(stream, fmt::format("{}\n", line));
  else sink_(stream, fmt::format("[rank {}] {}\n", rank, line));
}

void OutputRelay::end_progress_line() {
  if (!progress_drawn_) return;
  sink_(OutputStream::out, "\n");
  progress_drawn_ = false;
}

}  // namespace troupe
