#include "runtime/monitor/csv_sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "actors/protocol/monitor.hpp"
#include "runtime/monitor/append_file.hpp"

namespace troupe {
namespace {

// An earlier run's file, cut to its header and the steps up to `kept`.
std::string kept_text(const std::string& path, int64_t kept) {
  std::string text;
  std::ifstream before(path);
  for (std::string line; std::getline(before, line);) {
    char* end = nullptr;
    const long long step = std::strtoll(line.c_str(), &end, 10);
    const bool header = text.empty();
    if (header || (end != line.c_str() && *end == ',' && step <= kept)) text += line + "\n";
  }
  return text;
}

// `path` becomes `text`: written beside it, then renamed over it.
Status replace_file(const std::string& path, const std::string& text) {
  const std::string fresh = path + ".troupe-new";
  const int fd = ::open(fresh.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(fmt::format("cannot open {}: {}", fresh, std::strerror(errno)));
  Status written = append_whole(fd, text, fresh);
  ::close(fd);
  if (written && std::rename(fresh.c_str(), path.c_str()) != 0)
    written = make_error(fmt::format("cannot rename {} to {}: {}", fresh, path, std::strerror(errno)));
  if (!written) std::remove(fresh.c_str());
  return written;
}

}  // namespace

CsvSink::~CsvSink() {
  for (auto& [tag, file] : files_) ::close(file.fd);
}

std::string CsvSink::file_name(const std::string& tag) {
  std::string name = tag;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

Status CsvSink::open(int64_t kept_through) {
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  if (error) return make_error(fmt::format("cannot make the folder: {}", error.message()));
  for (const auto& entry : std::filesystem::directory_iterator(folder_, error)) {
    if (entry.path().extension() != ".csv" || !entry.is_regular_file()) continue;
    const std::string path = entry.path().string();
    TROUPE_TRY(replace_file(path, kept_text(path, kept_through)));
  }
  if (error) return make_error(fmt::format("cannot list the folder: {}", error.message()));
  return {};
}

Result<const CsvSink::File*> CsvSink::file_of(const std::string& tag) {
  if (auto found = files_.find(tag); found != files_.end()) return &found->second;
  const std::string path = folder_ + "/" + file_name(tag);
  const bool exists = std::filesystem::exists(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  const File& file = files_[tag] = File{fd, path};
  if (!exists) TROUPE_TRY(append_whole(fd, fmt::format("step,{}\n", tag.substr(tag.rfind('/') + 1)), path));
  return &file;
}

Status CsvSink::write(const MonitorRecord& record) {
  for (const MonitorScalar& scalar : record.scalars) {
    auto file = file_of(scalar.tag);
    if (!file) return file.error();
    // fmt's shortest form that reads back as the same double.
    TROUPE_TRY(append_whole((*file)->fd, fmt::format("{},{}\n", record.step, scalar.value), (*file)->path));
  }
  return {};
}

}  // namespace troupe
