// The arguments every job subcommand takes (run, rank, check, estimate), defined once so
// that `troupe` and `troupe-core` parse a command line the same way.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace troupe {

/// Exit code of a command line or configuration the program refuses.
inline constexpr int kUsageExitCode = 2;

struct JobArguments {
  std::string file;
  std::vector<std::string> overrides;
  std::string metrics_path;
  std::string parameters_path;
  bool reference = false;
};

inline void add_config_arguments(CLI::App* command, JobArguments& a) {
  command->add_option("FILE", a.file, "job configuration (TOML)")->required();
  command->add_option("--set", a.overrides, "override a key: section.key=value (repeatable)");
}

inline void add_job_arguments(CLI::App* command, JobArguments& a) {
  add_config_arguments(command, a);
  command->add_option("--metrics", a.metrics_path, "write one JSON line per step to PATH");
  command->add_option("--parameters-out", a.parameters_path,
                      "write the final parameters to PATH as raw float32");
}

/// The arguments again as a command line: FILE, then each --set, --metrics and
/// --parameters-out given (not --reference).
inline std::vector<std::string> job_argv(const JobArguments& a) {
  std::vector<std::string> argv{a.file};
  for (const auto& o : a.overrides) argv.insert(argv.end(), {"--set", o});
  if (!a.metrics_path.empty()) argv.insert(argv.end(), {"--metrics", a.metrics_path});
  if (!a.parameters_path.empty()) argv.insert(argv.end(), {"--parameters-out", a.parameters_path});
  return argv;
}

}  // namespace troupe
