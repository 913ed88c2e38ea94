// How a file tier opens its files: O_DIRECT where the file system allows it, else buffered
// I/O (prefer); O_DIRECT or an error naming the directory (require); buffered I/O through
// the page cache (never). Its own header: the job config ([offload] direct_io) names it too.
#pragma once

namespace troupe {

enum class DirectIo { prefer, require, never };

}  // namespace troupe
