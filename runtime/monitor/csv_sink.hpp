// DeepSpeed's csv_monitor files: one CSV file per metric in the folder, named by its tag
// with '/' and ' ' made '_' ("train/loss" → train_loss.csv), whose first line is
// "step,<the tag's last part>" and then "<step>,<value>" a step, the value written so that
// it reads back as the same double.
// A fresh run starts each file anew; a run resumed after step K keeps the lines of steps up
// to K. Thread safety: one thread at a time (the monitor's stream).
#pragma once

#include <cstdint>
#include <cstdio>
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
  Result<std::FILE*> file_of(const std::string& tag);

  std::string folder_;
  int64_t kept_through_ = 0;
  std::map<std::string, std::FILE*> files_;  // by tag, opened at its first value
};

}  // namespace troupe
