// The safetensors format (Hugging Face's): an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and [begin, end) byte offsets into the data that
// follows, then the data. Read with every claim checked against the file (a truncated file,
// offsets that overlap, leave gaps or run past the end, a size that is not the shape's, an
// unknown dtype: each an error naming the file, the tensor and the offset); written with
// the tensors in the order given.
// Thread safety: pure functions; a SafetensorsFile is read-only once made.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "base/result.hpp"

namespace troupe {

struct SafetensorsEntry {
  std::string dtype;  ///< "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< byte offsets into the data section
};

struct SafetensorsFile {
  std::string path;
  uint64_t data_start = 0;  ///< 8 + the header's length
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;  ///< the header's __metadata__
};

/// The header of `path`, checked against the file's size.
Result<SafetensorsFile> read_safetensors_header(const std::string& path);

/// Tensor `name` of `file`, read from disk in its own dtype.
Result<torch::Tensor> read_safetensors_tensor(const SafetensorsFile& file, const std::string& name);

/// Writes `tensors` (contiguous after .contiguous(); F32, BF16 or F16) to `path`, with
/// `metadata` in the header (Hugging Face's save_pretrained writes {"format": "pt"}).
Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace troupe
