// The on-disk contract of a checkpoint: what makes one complete, and what loading checks.
//
//   ROOT/step-00000010/            complete: it holds manifest.json
//          manifest.json           {"format":"troupe-checkpoint","version":1,"step":10,
//                                   "files":[{"name":..,"bytes":..,"crc32c":..}],"meta":{..}}
//          <the files it lists>
//   ROOT/step-00000020.partial/    being written: never loaded, never counted
//
// Files are written into the staging folder and fsynced; the manifest is written last,
// fsynced, and the folder is renamed into place (then the root is fsynced). A crash at any
// point leaves either the previous checkpoints as they were or the new one whole: a folder
// without a manifest is never a checkpoint. Loading checks every listed file's size and
// CRC32C and names the first that differs.
// Thread safety: functions on the file system; one writer per checkpoint folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

struct CheckpointFile {
  std::string name;  ///< relative to the checkpoint's folder, no '/'
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct CheckpointManifest {
  int64_t step = 0;  ///< the training steps done when it was taken
  std::vector<CheckpointFile> files;
  std::string meta = "{}";  ///< a JSON object the runtime adds (layout, dtype, ranks, ...)
};

/// "step-00000010": the folder of the checkpoint taken after `step` steps.
std::string checkpoint_name(int64_t step);

/// Makes ROOT (if missing) and an empty staging folder for `step` (a stale one from an
/// interrupted save is removed); returns its path.
Result<std::string> begin_checkpoint(const std::string& root, int64_t step);

/// Every rank's way into the staging folder of `step`: made (with ROOT) if missing, never
/// emptied, since other ranks write into it too (a file left by an interrupted save of the
/// same step is overwritten or, unlisted, ignored). Returns its path.
Result<std::string> join_checkpoint(const std::string& root, int64_t step);

/// Writes `bytes` at `data` to `dir`/`name` through io_uring, fsyncs it, and describes it. A short write
/// (a full disk) is an error naming the path and what the system said.
Result<CheckpointFile> write_checkpoint_file(const std::string& dir, const std::string& name,
                                             const void* data, std::size_t bytes);

/// Writes the manifest into the staging folder of `manifest.step`, fsyncs it and the
/// folder, renames the folder into place and fsyncs ROOT: from here on it is complete.
Status commit_checkpoint(const std::string& root, const CheckpointManifest& manifest);

/// The manifest of the checkpoint in `dir`, after checking that every file it lists is
/// there with its size and CRC32C; an error names the folder and the first file that is
/// missing, short or corrupted (or that the folder has no manifest: it is incomplete).
Result<CheckpointManifest> open_checkpoint(const std::string& dir);

/// The manifest of the checkpoint in `dir` without reading its files (each reader checks
/// the files it reads with read_checkpoint_file).
Result<CheckpointManifest> read_manifest(const std::string& dir);

/// The whole of file `file` of the checkpoint in `dir`, after checking its size and CRC32C
/// against the manifest's; an error names the path.
Result<std::vector<char>> read_checkpoint_file(const std::string& dir, const CheckpointFile& file);

/// A list of files as JSON (what a rank tells rank 0), and back.
std::string checkpoint_files_json(const std::vector<CheckpointFile>& files);
Result<std::vector<CheckpointFile>> parse_checkpoint_files_json(const std::string& json);

/// The newest complete checkpoint under ROOT (the highest step with a manifest), or none.
Result<std::optional<std::string>> latest_checkpoint(const std::string& root);

/// Removes complete checkpoints older than the newest `keep_last` (at least 1 is kept,
/// whatever `keep_last` says), and staging folders older than the newest complete one.
Status prune_checkpoints(const std::string& root, int64_t keep_last);

}  // namespace troupe
