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
  std::string resume;
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
  command
      ->add_option("--resume", a.resume,
                   "continue from checkpoint folder DIR, or from the newest under [checkpoint] dir (latest)")
      ->type_name("DIR|latest");
}

/// The --set overrides, and --resume X as [checkpoint] resume = X (a TOML string).
inline std::vector<std::string> overrides_of(const JobArguments& a) {
  std::vector<std::string> out = a.overrides;
  if (a.resume.empty()) return out;
  std::string quoted;
  for (char c : a.resume) quoted += (c == '"' || c == '\\') ? std::string{'\\', c} : std::string{c};
  out.push_back("checkpoint.resume=\"" + quoted + "\"");
  return out;
}

/// The arguments again as a command line: FILE, then each --set, --metrics,
/// --parameters-out and --resume given (not --reference).
inline std::vector<std::string> job_argv(const JobArguments& a) {
  std::vector<std::string> argv{a.file};
  for (const auto& o : a.overrides) argv.insert(argv.end(), {"--set", o});
  if (!a.metrics_path.empty()) argv.insert(argv.end(), {"--metrics", a.metrics_path});
  if (!a.parameters_path.empty()) argv.insert(argv.end(), {"--parameters-out", a.parameters_path});
  if (!a.resume.empty()) argv.insert(argv.end(), {"--resume", a.resume});
  return argv;
}

}  // namespace troupe
