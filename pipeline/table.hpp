// Schedules as tables ([pipeline] schedule_file): a CSV text with one row per pipeline rank,
// rank 0 first, and one compute action per cell in the order the rank runs them, named as
// pictures name them (action.hpp: F3, I3, W3, B3, and F3.1 for chunk 1 with virtual
// stages). Blank lines and lines starting with '#' are skipped. The messages around each
// action, the loads and the step's reduction and update are added as the built-ins add
// them (schedule.hpp: surround), and the whole is checked by the simulated executor before
// a job starts, so an error names the file, the line and the action.
// `troupe schedule show --csv` writes any built-in schedule in this form, to start from.
// Thread safety: pure functions (load_schedule_table reads a file).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "pipeline/action.hpp"
#include "pipeline/layout.hpp"

namespace troupe::pipeline {

/// The programs table `text` (read from `file`, for messages) gives a pipeline of `layout`
/// running `micro_batches`, checked by the simulated executor.
Result<std::vector<Program>> parse_schedule_table(std::string_view text, const std::string& file,
                                                  const Layout& layout, int64_t micro_batches);

/// parse_schedule_table() of the file at `path`; an unreadable file is an error naming it.
Result<std::vector<Program>> load_schedule_table(const std::string& path, const Layout& layout,
                                                 int64_t micro_batches);

/// `programs`' compute actions as a table parse_schedule_table() reads back.
std::string schedule_table(const std::vector<Program>& programs, int64_t chunks);

}  // namespace troupe::pipeline
