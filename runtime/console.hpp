// The console side of a run: the live progress line and the final summary.
//
// A progress line is drawn in place on a terminal; under `troupe run`/`troupe launch`
// (TROUPE_PROGRESS=relay) it is marked so the launcher draws it; otherwise (a log
// file, CI) it is a plain line.
#pragma once

#include <string>

namespace troupe {

enum class ProgressStyle { terminal, relay, plain };

/// How this process should show progress (reads TROUPE_PROGRESS and whether stdout is a terminal).
ProgressStyle progress_style();

/// Shows one progress line in `style`.
void show_progress(ProgressStyle style, const std::string& line);

/// Ends the progress display (a newline after an in-place line) before normal output.
void end_progress(ProgressStyle style);

}  // namespace troupe
