#include "memory/checkpoint_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "memory/crc32c.hpp"
#include "memory/uring_file.hpp"

namespace troupe {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifest = "manifest.json";
constexpr const char* kPartial = ".partial";
constexpr const char* kFormat = "troupe-checkpoint";
constexpr int kVersion = 1;
constexpr std::size_t kReadChunk = std::size_t{1} << 20;

Error system_error(const std::string& what, const std::string& path) {
  return make_error(fmt::format("{} {} failed: {}", what, path, std::strerror(errno)));
}

// Makes `path`'s entries (a rename into it, a new file) durable.
Status fsync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return system_error("opening", path);
  int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) return system_error("syncing", path);
  return {};
}

Status write_all(const std::string& path, const void* data, std::size_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return system_error("creating", path);
  const auto* at = static_cast<const char*>(data);
  std::size_t left = bytes;
  while (left > 0) {
    ssize_t n = ::write(fd, at, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      Error error = system_error("writing", path);
      ::close(fd);
      return error;
    }
    at += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Error error = system_error("syncing", path);
    ::close(fd);
    return error;
  }
  if (::close(fd) != 0) return system_error("closing", path);
  return {};
}

// The size and CRC32C of the file at `path`, read in 1 MiB pieces.
Result<CheckpointFile> read_back(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("{} is missing", path));
  CheckpointFile file;
  std::vector<char> chunk(kReadChunk);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    auto got = static_cast<std::size_t>(in.gcount());
    file.crc32c = crc32c(chunk.data(), got, file.crc32c);
    file.bytes += got;
  }
  if (in.bad()) return make_error(fmt::format("reading {} failed", path));
  return file;
}

std::string manifest_text(const CheckpointManifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const CheckpointFile& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  nlohmann::json meta = nlohmann::json::parse(m.meta, nullptr, false);
  nlohmann::json j = {{"format", kFormat},
                      {"version", kVersion},
                      {"step", m.step},
                      {"files", files},
                      {"meta", meta.is_discarded() ? nlohmann::json::object() : meta}};
  return j.dump(1) + "\n";
}

Result<CheckpointManifest> parse_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return make_error(
        fmt::format("{} is missing: the checkpoint was not completed (its save was interrupted), "
                    "so it is never loaded",
                    path));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat || !j.contains("files"))
    return make_error(fmt::format("{} is not a troupe checkpoint manifest", path));
  if (j.value("version", 0) != kVersion)
    return make_error(fmt::format("{} has version {}; this troupe reads version {}", path,
                                  j.value("version", 0), kVersion));
  CheckpointManifest m;
  try {
    m.step = j.at("step").get<int64_t>();
    for (const auto& f : j.at("files"))
      m.files.push_back(CheckpointFile{f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                                       f.at("crc32c").get<uint32_t>()});
    m.meta = j.value("meta", nlohmann::json::object()).dump();
  } catch (const nlohmann::json::exception& e) {
    return make_error(fmt::format("{} is malformed: {}", path, e.what()));
  }
  return m;
}

// The step of a folder named checkpoint_name(step) (complete) or that plus ".partial".
std::optional<int64_t> step_of(const std::string& name, bool partial) {
  const std::string prefix = "step-";
  std::string body = name;
  if (partial) {
    if (body.size() <= std::strlen(kPartial) || body.substr(body.size() - std::strlen(kPartial)) != kPartial)
      return std::nullopt;
    body = body.substr(0, body.size() - std::strlen(kPartial));
  }
  if (body.rfind(prefix, 0) != 0 || body.size() == prefix.size()) return std::nullopt;
  const std::string digits = body.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

struct Listing {
  std::vector<std::pair<int64_t, std::string>> complete, partial;  // by step, ascending
};

Result<Listing> list(const std::string& root) {
  Listing l;
  std::error_code ec;
  if (!fs::exists(root, ec)) return l;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (auto step = step_of(name, false); step && fs::exists(entry.path() / kManifest))
      l.complete.emplace_back(*step, entry.path().string());
    else if (auto staged = step_of(name, true))
      l.partial.emplace_back(*staged, entry.path().string());
  }
  if (ec) return make_error(fmt::format("listing {} failed: {}", root, ec.message()));
  std::sort(l.complete.begin(), l.complete.end());
  std::sort(l.partial.begin(), l.partial.end());
  return l;
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  return fmt::format("step-{:08}", step);
}

Result<std::string> begin_checkpoint(const std::string& root, int64_t step) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return make_error(fmt::format("creating {} failed: {}", root, ec.message()));
  const std::string staging = (fs::path(root) / (checkpoint_name(step) + kPartial)).string();
  fs::remove_all(staging, ec);  // an interrupted save of the same step
  if (!fs::create_directory(staging, ec) || ec)
    return make_error(fmt::format("creating {} failed: {}", staging, ec ? ec.message() : "it exists"));
  return staging;
}

Result<std::string> join_checkpoint(const std::string& root, int64_t step) {
  const std::string staging = (fs::path(root) / (checkpoint_name(step) + kPartial)).string();
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) return make_error(fmt::format("creating {} failed: {}", staging, ec.message()));
  return staging;
}

Result<CheckpointFile> write_checkpoint_file(const std::string& dir, const std::string& name,
                                             const void* data, std::size_t bytes) {
  if (name.empty() || name.find('/') != std::string::npos || name == kManifest)
    return make_error(fmt::format("'{}' cannot name a checkpoint file", name));
  const std::string path = (fs::path(dir) / name).string();
  TROUPE_TRY(write_file_uring(path, data, bytes));
  return CheckpointFile{name, bytes, crc32c(data, bytes)};
}

Status commit_checkpoint(const std::string& root, const CheckpointManifest& manifest) {
  const fs::path staging = fs::path(root) / (checkpoint_name(manifest.step) + kPartial);
  const fs::path final_dir = fs::path(root) / checkpoint_name(manifest.step);
  const std::string text = manifest_text(manifest);
  TROUPE_TRY(write_all((staging / kManifest).string(), text.data(), text.size()));
  TROUPE_TRY(fsync_directory(staging.string()));
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // the same step saved again: the new one replaces it
  if (::rename(staging.c_str(), final_dir.c_str()) != 0)
    return system_error("renaming into", final_dir.string());
  return fsync_directory(root);
}

Result<CheckpointManifest> open_checkpoint(const std::string& dir) {
  auto manifest = parse_manifest((fs::path(dir) / kManifest).string());
  if (!manifest) return manifest.error();
  for (const CheckpointFile& f : manifest->files) {
    const std::string path = (fs::path(dir) / f.name).string();
    auto found = read_back(path);
    if (!found) return make_error(fmt::format("checkpoint {}: {}", dir, found.error().message));
    if (found->bytes != f.bytes)
      return make_error(fmt::format("checkpoint {}: {} has {} bytes, its manifest says {}", dir, path,
                                    found->bytes, f.bytes));
    if (found->crc32c != f.crc32c)
      return make_error(
          fmt::format("checkpoint {}: {} is corrupted (CRC32C {:08x}, its manifest says {:08x})", dir, path,
                      found->crc32c, f.crc32c));
  }
  return manifest;
}

Result<CheckpointManifest> read_manifest(const std::string& dir) {
  return parse_manifest((fs::path(dir) / kManifest).string());
}

Result<std::vector<char>> read_checkpoint_file(const std::string& dir, const CheckpointFile& file) {
  const std::string path = (fs::path(dir) / file.name).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("checkpoint {}: {} is missing", dir, path));
  std::vector<char> bytes(file.bytes + 1);  // one more: a longer file shows as one
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const auto got = static_cast<std::size_t>(in.gcount());
  if (in.bad()) return make_error(fmt::format("checkpoint {}: reading {} failed", dir, path));
  if (got != file.bytes)
    return make_error(fmt::format("checkpoint {}: {} has {}{} bytes, its manifest says {}", dir, path,
                                  got > file.bytes ? "more than " : "", got > file.bytes ? file.bytes : got,
                                  file.bytes));
  bytes.resize(got);
  if (uint32_t crc = crc32c(bytes.data(), bytes.size()); crc != file.crc32c)
    return make_error(fmt::format("checkpoint {}: {} is corrupted (CRC32C {:08x}, its manifest says {:08x})",
                                  dir, path, crc, file.crc32c));
  return bytes;
}

std::string checkpoint_files_json(const std::vector<CheckpointFile>& files) {
  nlohmann::json list = nlohmann::json::array();
  for (const CheckpointFile& f : files)
    list.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  return list.dump();
}

Result<std::vector<CheckpointFile>> parse_checkpoint_files_json(const std::string& json) {
  nlohmann::json list = nlohmann::json::parse(json, nullptr, false);
  if (list.is_discarded() || !list.is_array()) return make_error("not a JSON list of files");
  std::vector<CheckpointFile> files;
  try {
    for (const auto& f : list)
      files.push_back(CheckpointFile{f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                                     f.at("crc32c").get<uint32_t>()});
  } catch (const nlohmann::json::exception& e) {
    return make_error(fmt::format("a malformed list of files: {}", e.what()));
  }
  return files;
}

Result<std::optional<std::string>> latest_checkpoint(const std::string& root) {
  auto listed = list(root);
  if (!listed) return listed.error();
  if (listed->complete.empty()) return std::optional<std::string>();
  return std::optional<std::string>(listed->complete.back().second);
}

Status prune_checkpoints(const std::string& root, int64_t keep_last) {
  auto listed = list(root);
  if (!listed) return listed.error();
  const auto& complete = listed->complete;
  const std::size_t keep = static_cast<std::size_t>(std::max<int64_t>(1, keep_last));
  std::error_code ec;
  // Renamed out of the complete ones first: a process killed while removing one leaves a
  // staging folder (removed by the next prune), never a checkpoint missing some files
  // under a complete name.
  for (std::size_t i = 0; i + keep < complete.size(); ++i) {
    const std::string& path = complete[i].second;
    const std::string doomed = path + kPartial;
    fs::remove_all(doomed, ec);
    if (!ec && ::rename(path.c_str(), doomed.c_str()) != 0)
      ec = std::error_code(errno, std::generic_category());
    if (!ec) TROUPE_TRY(fsync_directory(root));  // the rename is durable before any file goes
    if (!ec) fs::remove_all(doomed, ec);
    if (ec) return make_error(fmt::format("removing {} failed: {}", path, ec.message()));
  }
  if (complete.empty()) return {};
  for (const auto& [step, path] : listed->partial)
    if (step < complete.back().first) fs::remove_all(path, ec);  // an interrupted save, superseded
  if (ec)
    return make_error(fmt::format("removing a stale staging folder under {} failed: {}", root, ec.message()));
  return {};
}

}  // namespace troupe
