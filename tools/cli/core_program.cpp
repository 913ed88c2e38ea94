#include "tools/cli/core_program.hpp"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "runtime/launch/launcher.hpp"

namespace troupe {
namespace {

std::string directory_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::string self_program_path() {
  char buffer[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "troupe";
}

Result<std::string> core_program_path() {
  const std::string here = directory_of(self_program_path());
  const std::string beside = here + "/troupe-core";
  const std::string installed = here + "/../libexec/troupe/troupe-core";
  for (const auto& candidate : {beside, installed})
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  return Error{
      fmt::format("cannot find troupe-core, the program that runs ranks and benchmarks: "
                  "looked for {} and {} (reinstall troupe, or build the troupe-core target)",
                  beside, installed)};
}

int exec_core_program(const std::vector<std::string>& arguments) {
  auto program = core_program_path();
  if (!program) {
    std::fprintf(stderr, "troupe: %s\n", program.error().message.c_str());
    return kCannotStartExitCode;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program->c_str()));
  for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(program->c_str(), argv.data());
  std::fprintf(stderr, "troupe: cannot start %s: %s\n", program->c_str(), std::strerror(errno));
  return kCannotStartExitCode;
}

}  // namespace troupe
