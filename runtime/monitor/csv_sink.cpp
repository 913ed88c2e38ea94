#include "runtime/monitor/csv_sink.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "actors/protocol/monitor.hpp"

namespace troupe {
namespace {

// The lines of an earlier run's file worth keeping: the header and the steps up to `kept`.
std::vector<std::string> kept_lines(const std::string& path, int64_t kept) {
  std::vector<std::string> lines;
  std::ifstream before(path);
  for (std::string line; std::getline(before, line);) {
    if (lines.empty()) {
      lines.push_back(line);  // the header
      continue;
    }
    char* end = nullptr;
    const long long step = std::strtoll(line.c_str(), &end, 10);
    if (end != line.c_str() && *end == ',' && step <= kept) lines.push_back(line);
  }
  return lines;
}

}  // namespace

CsvSink::~CsvSink() {
  for (auto& [tag, file] : files_) std::fclose(file);
}

std::string CsvSink::file_name(const std::string& tag) {
  std::string name = tag;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

Status CsvSink::open(int64_t kept_through) {
  kept_through_ = kept_through;
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  if (error) return make_error(fmt::format("cannot make the folder: {}", error.message()));
  return {};
}

Result<std::FILE*> CsvSink::file_of(const std::string& tag) {
  if (auto found = files_.find(tag); found != files_.end()) return found->second;
  const std::string path = folder_ + "/" + file_name(tag);
  std::vector<std::string> lines;
  if (kept_through_ > 0) lines = kept_lines(path, kept_through_);
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (!file) return make_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  files_[tag] = file;
  if (lines.empty()) lines.push_back(fmt::format("step,{}", tag.substr(tag.rfind('/') + 1)));
  for (const std::string& line : lines) std::fprintf(file, "%s\n", line.c_str());
  return file;
}

Status CsvSink::write(const MonitorRecord& record) {
  for (const MonitorScalar& scalar : record.scalars) {
    auto file = file_of(scalar.tag);
    if (!file) return file.error();
    // fmt's shortest form that reads back as the same double.
    const std::string line = fmt::format("{},{}\n", record.step, scalar.value);
    if (std::fputs(line.c_str(), *file) < 0 || std::fflush(*file) != 0)
      return make_error(
          fmt::format("cannot write {}/{}: {}", folder_, file_name(scalar.tag), std::strerror(errno)));
  }
  return {};
}

}  // namespace troupe
