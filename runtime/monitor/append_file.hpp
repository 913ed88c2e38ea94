// Appending to a monitor's file so that a failed write leaves no torn record behind: what a
// short write did put down (a full disk) is cut off again, so the file ends at its last
// whole record (a CSV line, a TFRecord frame) and a resumed run keeps only whole ones.
// Thread safety: one thread per file descriptor.
#pragma once

#include <string>

#include "base/result.hpp"

namespace troupe {

/// Writes all of `bytes` at the end of `fd`; on failure truncates `fd` back to where it
/// was and fails naming `path` and why.
Status append_whole(int fd, const std::string& bytes, const std::string& path);

}  // namespace troupe
