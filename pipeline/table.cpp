#include "pipeline/table.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "pipeline/schedule.hpp"
#include "pipeline/simulate.hpp"

namespace troupe::pipeline {
namespace {

std::string_view trimmed(std::string_view text) {
  const char* space = " \t\r";
  const auto begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(space) - begin + 1);
}

struct Row {
  int64_t line = 0;
  std::vector<Action> order;
};

// One row's cells as compute actions; an error names the line, the cell and why.
Result<Row> parse_row(std::string_view text, int64_t line, int64_t rank, const std::string& file,
                      const Layout& layout, int64_t m) {
  Row row{line, {}};
  int64_t cell = 0;
  while (true) {
    const auto comma = text.find(',');
    const std::string_view name = trimmed(text.substr(0, comma));
    ++cell;
    if (!name.empty()) {
      auto fail = [&](const std::string& why) {
        return make_error(fmt::format("{}: line {} (stage {}), cell {}: {}", file, line, rank, cell, why));
      };
      auto action = parse_short_name(name);
      if (!action) return fail(action.error().message);
      if (action->micro >= m)
        return fail(fmt::format("{} names micro-batch {}, but a step has {} (0 to {})", name, action->micro,
                                m, m - 1));
      if (action->chunk >= layout.chunks)
        return fail(
            fmt::format("{} names chunk {}, but each rank holds {} (0 to {}); [pipeline] "
                        "virtual_stages sets how many",
                        name, action->chunk, layout.chunks, layout.chunks - 1));
      row.order.push_back(*action);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return row;
}

}  // namespace

Result<std::vector<Program>> parse_schedule_table(std::string_view text, const std::string& file,
                                                  const Layout& layout, int64_t micro_batches) {
  TROUPE_TRY(check_layout(layout));
  std::vector<Row> rows;
  int64_t line = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view content = trimmed(text.substr(0, end));
    ++line;
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (content.empty() || content.front() == '#') continue;
    const auto rank = static_cast<int64_t>(rows.size());
    if (rank == layout.ranks)
      return make_error(
          fmt::format("{}: line {} is a row for stage {}, but the pipeline has {} stages "
                      "(one row each)",
                      file, line, rank, layout.ranks));
    auto row = parse_row(content, line, rank, file, layout, micro_batches);
    if (!row) return row.error();
    rows.push_back(std::move(*row));
  }
  if (static_cast<int64_t>(rows.size()) != layout.ranks)
    return make_error(fmt::format("{} has {} rows of actions, but the pipeline has {} stages (one row each)",
                                  file, rows.size(), layout.ranks));
  std::vector<Program> programs;
  for (int64_t rank = 0; rank < layout.ranks; ++rank)
    programs.push_back(surround(layout, rank, rows[static_cast<std::size_t>(rank)].order));
  if (auto checked = simulate(programs, layout, micro_batches); !checked) {
    std::vector<std::string> lines;
    for (std::size_t rank = 0; rank < rows.size(); ++rank)
      lines.push_back(fmt::format("stage {} is line {}", rank, rows[rank].line));
    return make_error(fmt::format("{}: {} ({})", file, checked.error().message, fmt::join(lines, ", ")));
  }
  return programs;
}

Result<std::vector<Program>> load_schedule_table(const std::string& path, const Layout& layout,
                                                 int64_t micro_batches) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("cannot read the schedule table {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_schedule_table(text.str(), path, layout, micro_batches);
}

std::string schedule_table(const std::vector<Program>& programs, int64_t chunks) {
  std::string out;
  for (const Program& program : programs) {
    std::vector<std::string> cells;
    for (const Action& a : program)
      if (is_compute(a.op)) cells.push_back(short_name(a, chunks > 1));
    out += fmt::format("{}\n", fmt::join(cells, ","));
  }
  return out;
}

}  // namespace troupe::pipeline
