// Helpers for integration tests that run real programs: a shell command with its
// combined output and exit status, bounded in time; fresh temporary directories come from
// tests/support/temp_dir.hpp, removed when the test program ends.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.hpp"

namespace troupe::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

/// Runs `command` through /bin/sh, killed after `timeout_s`; stdout and stderr together.
inline CommandResult run_command(const std::string& command, int timeout_s = 120) {
  std::string dir = make_temp_dir();
  std::string out = dir + "/output";
  std::string line =
      "timeout -s KILL " + std::to_string(timeout_s) + " /bin/sh -c '" + command + "' > " + out + " 2>&1";
  int status = std::system(line.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = read_file(out);
  std::remove(out.c_str());
  rmdir(dir.c_str());
  return r;
}

}  // namespace troupe::testing
