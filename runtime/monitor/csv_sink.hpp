// DeepSpeed's csv_monitor files: one CSV file per metric in the folder, named by its tag
// with '/' and ' ' made '_' ("train/loss" → train_loss.csv), whose first line is
// "step,<the tag's last part>" and then "<step>,<value>" a step, the value written so that
// it reads back as the same double.
// Opening the folder trims every CSV file already there to its header and the steps up to
// the run's start (a fresh run: none; a run resumed after step K: up to K), each by a new
// file renamed over the old, so no earlier run's steps remain past where this one begins.
// Thread safety: one thread at a time (the monitor's stream).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "actors/monitor.hpp"

namespace troupe {

class CsvSink final : public MonitorSink {
 public:
  explicit CsvSink(std::string folder) : folder_(std::move(folder)) {}
  ~CsvSink() override;

  std::string where() const override { return "CSV folder " + folder_; }
  Status open(int64_t kept_through) override;
  Status write(const MonitorRecord& record) override;

  /// The file of `tag` in the folder.
  static std::string file_name(const std::string& tag);

 private:
  struct File {
    int fd = -1;
    std::string path;
  };
  Result<const File*> file_of(const std::string& tag);

  std::string folder_;
  std::map<std::string, File> files_;  // by tag, opened at its first value
};

}  // namespace troupe
