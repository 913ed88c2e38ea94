// troupe's own commands run as children (its benchmarks for `troupe profile-device`, its
// layer profiles for `troupe simulate`), read back as the JSON objects they print, one
// per line.
// Thread safety: functions of the calling thread; each waits for its children.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe {

/// `word` as one argument of a shell command line, quoted.
std::string shell_quoted(const std::string& word);
/// Starts every command at once, so their runs overlap, then reads each one's output: the
/// JSON objects it printed, a line each (other lines skipped), by command.
std::vector<std::vector<nlohmann::json>> json_lines_of_all(const std::vector<std::string>& commands);
/// One command's.
std::vector<nlohmann::json> json_lines_of(const std::string& command);

}  // namespace troupe
