// Where `troupe` finds `troupe-core`, the program that runs what needs LibTorch and the
// actors (a rank, the benchmarks, the reference trainer): beside `troupe` in the build tree,
// or in ../libexec/troupe/ once installed. The front stays LibTorch-free so that checking,
// estimating and launching start in a few MB.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

/// The path of this process's own program (/proc/self/exe).
std::string self_program_path();

/// The troupe-core beside this program or in ../libexec/troupe; an error naming both
/// places looked at when neither holds an executable one.
Result<std::string> core_program_path();

/// Replaces this process with troupe-core and `arguments` (argv[1...]); returns an exit code
/// only when that fails, after saying why on stderr.
int exec_core_program(const std::vector<std::string>& arguments);

}  // namespace troupe
