#include "runtime/monitor/tensorboard_sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "actors/protocol/monitor.hpp"
#include "memory/crc32c.hpp"
#include "monitor/event.pb.h"  // generated (build/generated) from runtime/monitor/event.proto
#include "runtime/monitor/append_file.hpp"

namespace troupe {
namespace {

namespace tb = troupe::tensorboard;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t masked_crc32c(const void* data, std::size_t bytes) {
  const uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(const std::string& payload) {
  std::string frame;
  put_le(frame, payload.size(), 8);
  put_le(frame, masked_crc32c(frame.data(), 8), 4);
  frame += payload;
  put_le(frame, masked_crc32c(payload.data(), payload.size()), 4);
  return frame;
}

TensorBoardSink::~TensorBoardSink() {
  if (fd_ >= 0) ::close(fd_);
}

Status TensorBoardSink::open(int64_t kept_through) {
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  if (error) return make_error(fmt::format("cannot make the folder: {}", error.message()));
  const double now = now_seconds();
  return open_file(fmt::format("{}/events.out.tfevents.{}.{}.{}.troupe", folder_, static_cast<int64_t>(now),
                               host_name(), ::getpid()),
                   kept_through);
}

Status TensorBoardSink::open_file(const std::string& path, int64_t kept_through) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return make_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  tb::Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  TROUPE_TRY(append(version.SerializeAsString()));
  // Every run's file starts a session: TensorBoard takes the second START of a folder as a
  // restart, and hides what earlier files hold from its step on.
  tb::Event restart;
  restart.set_wall_time(now_seconds());
  restart.set_step(kept_through + 1);
  restart.mutable_session_log()->set_status(tb::SessionLog::START);
  return append(restart.SerializeAsString());
}

Status TensorBoardSink::write(const MonitorRecord& record) {
  tb::Event event;
  event.set_wall_time(record.wall_time);
  event.set_step(record.step);
  for (const MonitorScalar& scalar : record.scalars) {
    tb::Summary::Value* value = event.mutable_summary()->add_value();
    value->set_tag(scalar.tag);
    value->set_simple_value(static_cast<float>(scalar.value));
  }
  return append(event.SerializeAsString());
}

Status TensorBoardSink::append(const std::string& bytes) {
  return append_whole(fd_, tfrecord_frame(bytes), path_);
}

}  // namespace troupe
