// The monitor actor and its sinks on their own: TFRecord framing, the bounded queue (what
// arrives while it is full is dropped, said once), a sink that fails (a real full disk,
// /dev/full) said once while the others go on, DeepSpeed's CSV layout and a resumed run's
// files, and which scalars a step gives.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actors/monitor.hpp"
#include "actors/protocol/monitor.hpp"
#include "runtime/monitor/append_file.hpp"
#include "runtime/monitor/csv_sink.hpp"
#include "runtime/monitor/tensorboard_sink.hpp"
#include "runtime/monitor/training_monitor.hpp"
#include "tests/integration/command.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

// What say() heard, from the monitor's thread.
struct Said {
  std::mutex mutex;
  std::vector<std::string> lines;
  void operator()(const std::string& line) {
    std::lock_guard lock(mutex);
    lines.push_back(line);
  }
  std::vector<std::string> all() {
    std::lock_guard lock(mutex);
    return lines;
  }
};

// A sink whose writes wait until released (a disk that stalls), recording the steps it took.
class StallingSink final : public MonitorSink {
 public:
  std::string where() const override { return "stalling sink"; }
  Status open(int64_t) override { return {}; }
  Status write(const MonitorRecord& record) override {
    std::unique_lock lock(mutex_);
    released_cv_.wait_for(lock, 20s, [&] { return released_; });
    steps_.push_back(record.step);
    return {};
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    released_cv_.notify_all();
  }
  std::vector<int64_t> steps() {
    std::lock_guard lock(mutex_);
    return steps_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
  std::vector<int64_t> steps_;
};

// TensorBoard's writer on a disk that is full: /dev/full answers every write with ENOSPC.
class FullDiskSink final : public MonitorSink {
 public:
  std::string where() const override { return "TensorBoard file /dev/full"; }
  Status open(int64_t kept) override { return inner_.open_file("/dev/full", kept); }
  Status write(const MonitorRecord& record) override { return inner_.write(record); }

 private:
  TensorBoardSink inner_{"unused"};
};

// A sink whose writes throw, as a library might (an allocation that fails).
class ThrowingSink final : public MonitorSink {
 public:
  std::string where() const override { return "throwing sink"; }
  Status open(int64_t) override { return {}; }
  Status write(const MonitorRecord&) override { throw std::runtime_error("out of luck"); }
};

MonitorRecord record_of(int64_t step) {
  return MonitorRecord{
      step, 1.0e9 + static_cast<double>(step), {{"train/loss", 2.0 + 0.5 * static_cast<double>(step)}}};
}

monitor_drained drain(caf::actor_system& system, const caf::actor& monitor) {
  monitor_drained out{-1, -1};
  caf::scoped_actor self{system};
  self->request(monitor, 20s, await_monitor{})
      .receive([&](const monitor_drained& d) { out = d; },
               [&](const caf::error& e) { ADD_FAILURE() << "no answer: " << system.render(e); });
  return out;
}

// A monitor in an actor system of its own for one test, saying into `said`; stopped after.
struct Monitored {
  caf::actor_system_config config;
  caf::actor_system system{config};
  Said said;
  caf::actor monitor;
  caf::actor start(MonitorOptions options) {
    options.say = [this](const std::string& line) { said(line); };
    monitor = spawn_monitor(system, std::move(options));
    return monitor;
  }
  ~Monitored() { caf::anon_send_exit(monitor, caf::exit_reason::user_shutdown); }
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Tfrecord, FrameIsLengthItsMaskedCrcPayloadItsMaskedCrc) {
  // TFRecord's masked CRC32C of "123456789" (whose CRC32C is 0xE3069283).
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
  const std::string frame = tfrecord_frame("abc");
  ASSERT_EQ(frame.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(frame.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  uint32_t length_crc = 0, payload_crc = 0;
  std::memcpy(&length_crc, frame.data() + 8, 4);
  std::memcpy(&payload_crc, frame.data() + 15, 4);
  EXPECT_EQ(length_crc, masked_crc32c(frame.data(), 8));
  EXPECT_EQ(frame.substr(12, 3), "abc");
  EXPECT_EQ(payload_crc, masked_crc32c("abc", 3));
}

TEST(MonitorActor, DropsWhatArrivesWhileTheQueueIsFullAndSaysItOnce) {
  Monitored m;
  auto stalling = std::make_shared<StallingSink>();
  MonitorOptions options;
  options.sinks = {stalling};
  options.queue = 3;
  caf::actor monitor = m.start(options);
  for (int64_t step = 1; step <= 10; ++step) caf::anon_send(monitor, record_of(step));
  // The fourth record finds three waiting for the stalled disk: the first drop is said.
  for (int i = 0; i < 2000 && m.said.all().empty(); ++i) std::this_thread::sleep_for(5ms);
  stalling->release();
  const monitor_drained d = drain(m.system, monitor);
  ASSERT_EQ(m.said.all().size(), 1u);
  EXPECT_NE(m.said.all()[0].find("writing is 3 records behind; the records of step 4 on are dropped"),
            std::string::npos)
      << m.said.all()[0];
  EXPECT_GE(d.dropped, 1);
  EXPECT_EQ(d.written + d.dropped, 10);
  const std::vector<int64_t> steps = stalling->steps();
  ASSERT_EQ(static_cast<int64_t>(steps.size()), d.written);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i) + 1);
  for (std::size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]);
}

TEST(MonitorActor, ASinkOnAFullDiskIsSaidOnceAndTheOthersGoOn) {
  Monitored m;
  const std::string dir = testing::make_temp_dir();
  MonitorOptions options;
  options.sinks = {std::make_shared<FullDiskSink>(), std::make_shared<CsvSink>(dir + "/csv")};
  caf::actor monitor = m.start(options);
  for (int64_t step = 1; step <= 5; ++step) caf::anon_send(monitor, record_of(step));
  const monitor_drained d = drain(m.system, monitor);
  EXPECT_EQ(d.written, 5);
  EXPECT_EQ(d.dropped, 0);
  ASSERT_EQ(m.said.all().size(), 1u);
  EXPECT_NE(
      m.said.all()[0].find("TensorBoard file /dev/full: cannot write /dev/full: No space left on device"),
      std::string::npos)
      << m.said.all()[0];
  EXPECT_EQ(lines_of(dir + "/csv/train_loss.csv"),
            (std::vector<std::string>{"step,loss", "1,2.5", "2,3", "3,3.5", "4,4", "5,4.5"}));
}

TEST(MonitorActor, ASinkThatThrowsIsSaidOnceAndTheOthersGoOn) {
  Monitored m;
  const std::string dir = testing::make_temp_dir();
  MonitorOptions options;
  options.sinks = {std::make_shared<ThrowingSink>(), std::make_shared<CsvSink>(dir + "/csv")};
  caf::actor monitor = m.start(options);
  for (int64_t step = 1; step <= 3; ++step) caf::anon_send(monitor, record_of(step));
  EXPECT_EQ(drain(m.system, monitor).written, 3);
  ASSERT_EQ(m.said.all().size(), 1u);
  EXPECT_NE(m.said.all()[0].find("throwing sink: out of luck; it is not written from here on"),
            std::string::npos)
      << m.said.all()[0];
  EXPECT_EQ(lines_of(dir + "/csv/train_loss.csv").size(), 4u);
}

// The owner gives up on a disk that does not answer: what is still queued is not written.
TEST(MonitorActor, CancelledRecordsStillQueuedAreGivenUpOn) {
  Monitored m;
  auto stalling = std::make_shared<StallingSink>();
  MonitorOptions options;
  options.sinks = {stalling};
  options.cancelled = std::make_shared<std::atomic<bool>>(false);
  caf::actor monitor = m.start(options);
  for (int64_t step = 1; step <= 5; ++step) caf::anon_send(monitor, record_of(step));
  std::this_thread::sleep_for(50ms);  // the first write is under way, stalled
  options.cancelled->store(true);
  stalling->release();
  drain(m.system, monitor);
  EXPECT_LE(stalling->steps().size(), 1u) << "records queued behind the stalled one were written";
}

// A write the file system stops halfway (here the process's file-size limit, which answers
// EFBIG after a short write) is cut off again: the file ends at its last whole record.
TEST(AppendWhole, AShortWriteIsCutOffLeavingTheWholeRecordsBefore) {
  const std::string path = testing::make_temp_dir() + "/records";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(append_whole(fd, "1,2.5\n", path).ok());
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  auto* const old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = before;
  small.rlim_cur = 10;  // room for 4 more bytes of the next 12
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status torn = append_whole(fd, "2,3.0000001\n", path);
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  ::close(fd);
  ASSERT_FALSE(torn.ok());
  EXPECT_NE(torn.error().message.find("cannot write " + path), std::string::npos) << torn.error().message;
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"1,2.5"}));
}

TEST(CsvSink, AFreshRunStartsEveryFileOfTheFolderAnew) {
  const std::string dir = testing::make_temp_dir() + "/csv";
  {
    CsvSink earlier(dir);
    ASSERT_TRUE(earlier.open(0).ok());
    MonitorRecord r = record_of(1);
    r.scalars.push_back({"train/loss_scale", 65536});
    ASSERT_TRUE(earlier.write(r).ok());
  }
  CsvSink fresh(dir);
  ASSERT_TRUE(fresh.open(0).ok());
  ASSERT_TRUE(fresh.write(record_of(1)).ok());
  EXPECT_EQ(lines_of(dir + "/train_loss.csv"), (std::vector<std::string>{"step,loss", "1,2.5"}));
  EXPECT_EQ(lines_of(dir + "/train_loss_scale.csv"), (std::vector<std::string>{"step,loss_scale"}))
      << "an earlier run's steps of a metric this run does not write";
}

TEST(CsvSink, AResumedRunKeepsTheStepsUpToItsCheckpointAndWritesOnFromThere) {
  const std::string dir = testing::make_temp_dir() + "/csv";
  {
    CsvSink first(dir);
    ASSERT_TRUE(first.open(0).ok());
    for (int64_t step = 1; step <= 6; ++step) ASSERT_TRUE(first.write(record_of(step)).ok());
  }
  CsvSink resumed(dir);
  ASSERT_TRUE(resumed.open(4).ok());
  for (int64_t step = 5; step <= 6; ++step) {
    MonitorRecord r = record_of(step);
    r.scalars[0].value = 0.1 * static_cast<double>(step);
    ASSERT_TRUE(resumed.write(r).ok());
  }
  EXPECT_EQ(lines_of(dir + "/train_loss.csv"),
            (std::vector<std::string>{"step,loss", "1,2.5", "2,3", "3,3.5", "4,4", "5,0.5",
                                      "6,0.6000000000000001"}));
  EXPECT_EQ(CsvSink::file_name("memory/parameter bytes"), "memory_parameter_bytes.csv");
}

TEST(TensorBoardSink, AFolderThatCannotBeMadeIsAnErrorNamingWhy) {
  const std::string file = testing::make_temp_dir() + "/a-file";
  std::ofstream(file) << "x";
  TensorBoardSink sink(file + "/runs");
  Status opened = sink.open(0);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find("cannot make the folder"), std::string::npos)
      << opened.error().message;
}

TEST(MonitorScalars, EachStepGivesItsScalarsAndOnlyTheOnesThatMeanSomething) {
  StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.grad_norm = 1.25;
  m.lr = 1e-3;
  m.parameter_bytes = 4096;
  auto tags = [](const std::vector<MonitorScalar>& scalars) {
    std::vector<std::string> out;
    for (const auto& s : scalars) out.push_back(s.tag);
    return out;
  };
  auto has = [&](const std::vector<MonitorScalar>& scalars, const std::string& tag) {
    auto t = tags(scalars);
    return std::find(t.begin(), t.end(), tag) != t.end();
  };
  auto plain = monitor_scalars(m);
  EXPECT_TRUE(has(plain, "train/grad_norm"));
  EXPECT_FALSE(has(plain, "train/loss_scale"));  // no loss scaling
  EXPECT_FALSE(has(plain, "val/val_loss"));      // no validation this step
  EXPECT_TRUE(has(plain, "memory/parameter_bytes"));
  EXPECT_FALSE(has(plain, "perf/mfu"));  // the model's FLOPs are not known
  m.step_flops = 1e9;
  m.mfu = 0.25;
  m.loss_scale = 65536;
  m.skipped = true;
  m.val_loss = 2.0;
  auto scaled = monitor_scalars(m);
  EXPECT_FALSE(has(scaled, "train/grad_norm"));  // an overflowed step has none
  EXPECT_TRUE(has(scaled, "train/loss_scale"));
  EXPECT_TRUE(has(scaled, "val/val_perplexity"));
  EXPECT_TRUE(has(scaled, "perf/mfu"));
  auto value_of = [](const std::vector<MonitorScalar>& scalars, const std::string& tag) {
    for (const auto& s : scalars)
      if (s.tag == tag) return s.value;
    ADD_FAILURE() << tag << " is missing";
    return std::nan("");
  };
  EXPECT_EQ(value_of(plain, "train/skipped"), 0.0);
  EXPECT_EQ(value_of(scaled, "train/skipped"), 1.0);
  EXPECT_EQ(value_of(scaled, "val/val_perplexity"), std::exp(2.0));
  EXPECT_EQ(value_of(scaled, "memory/parameter_bytes"), 4096.0);
}

}  // namespace
}  // namespace troupe
