// TensorBoard's event files: what `tensorboard --logdir DIR` reads.
//
// A file events.out.tfevents.<seconds>.<host>.<pid>.troupe in the folder: TFRecord framing
// (a little-endian 64-bit length, its masked CRC32C, the bytes, their masked CRC32C) around
// Event messages encoded by protobuf (event.proto). The first record names the file
// version; then one Event a step whose summary holds every scalar of the step as a 32-bit
// float (`simple_value`, what TensorBoard's server loads: the metrics file keeps doubles). Each run's file
// starts with a SessionLog START at its first step; TensorBoard takes a later one (a resumed run's) as a
// restart and hides what earlier files hold from that step on. Thread safety: one thread at a time (the
// monitor's stream).
#pragma once

#include <cstdint>
#include <string>

#include "actors/monitor.hpp"

namespace troupe {

class TensorBoardSink final : public MonitorSink {
 public:
  /// Writes into `folder` (made if missing when opened).
  explicit TensorBoardSink(std::string folder) : folder_(std::move(folder)) {}
  ~TensorBoardSink() override;

  std::string where() const override { return "TensorBoard folder " + folder_; }
  Status open(int64_t kept_through) override;
  Status write(const MonitorRecord& record) override;

  /// The event file, once opened.
  const std::string& path() const { return path_; }

  /// Writes to `path` itself instead of a new file in the folder (tests: /dev/full).
  Status open_file(const std::string& path, int64_t kept_through);

 private:
  Status append(const std::string& bytes);

  std::string folder_;
  std::string path_;
  int fd_ = -1;
};

/// The TFRecord frame around `payload`: length, masked CRC32C of the length, payload,
/// masked CRC32C of the payload.
std::string tfrecord_frame(const std::string& payload);

/// TFRecord's masking of a CRC32C (rotate right 15, add a constant), so that a CRC of
/// bytes that embed CRCs stays well distributed.
uint32_t masked_crc32c(const void* data, std::size_t bytes);

}  // namespace troupe
