// The NVMe tier on its own: the aligned pool, CRC32C, and NvmeStore's round trips,
// checksums and errors, on whatever file system holds the test's temporary directory
// (O_DIRECT where it is allowed, buffered where not). The full-disk test mounts a small
// tmpfs, which needs root; elsewhere it is skipped and says why.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "memory/aligned_pool.hpp"
#include "memory/crc32c.hpp"
#include "memory/nvme_index.hpp"
#include "memory/nvme_store.hpp"
#include "tests/support/memory_mount.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kib = 1024;
constexpr std::size_t block = 64 * kib;  // small blocks: several per key without large files

// A fresh directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "nvme_store_test.XXXXXX";
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Waits for one callback; a missing one fails the test after a deadline instead of hanging it.
class Done {
 public:
  IoCallback callback() {
    return [p = promise_](Status s) { p->set_value(std::move(s)); };
  }
  Status wait(std::chrono::seconds deadline = 30s) {
    auto future = promise_->get_future();
    if (future.wait_for(deadline) != std::future_status::ready)
      return make_error("no callback within the deadline");
    return future.get();
  }

 private:
  std::shared_ptr<std::promise<Status>> promise_ = std::make_shared<std::promise<Status>>();
};

Status write_sync(NvmeStore& store, const std::string& key, const void* data, std::size_t bytes) {
  Done done;
  store.write(key, data, bytes, done.callback());
  return done.wait();
}

Status read_sync(NvmeStore& store, const std::string& key, void* data, std::size_t bytes) {
  Done done;
  store.read(key, data, bytes, done.callback());
  return done.wait();
}

std::string message(const Status& s) {
  return s.ok() ? "(success)" : s.error().message;
}

// Expects `text` to hold `part`, printing both when it does not.
#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << (text) << "\nlacks: " << (part)

// Page-aligned bytes for the tests, filled with a pattern that differs per seed.
std::unique_ptr<AlignedPool> pool_of(std::size_t bytes, std::size_t count) {
  auto pool = AlignedPool::make({bytes, count, nullptr, MemoryKind::communication, "test pool"});
  EXPECT_TRUE(pool.ok());
  return std::move(*pool);
}

// A buffer of `pool`, given back when it goes out of scope, an early ASSERT or skip included.
class Lease {
 public:
  explicit Lease(AlignedPool& pool) : pool_(pool), data_(pool.try_acquire()) {}
  ~Lease() {
    if (data_ != nullptr) pool_.release(data_);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  std::byte* get() const { return data_; }

 private:
  AlignedPool& pool_;
  std::byte* data_;
};

void fill(std::byte* data, std::size_t bytes, unsigned seed) {
  for (std::size_t i = 0; i < bytes; ++i)
    data[i] = static_cast<std::byte>((i * 131 + seed * 7 + i / 4096) & 0xFF);
}

NvmeStoreOptions small_blocks(unsigned queue_depth = 8) {
  NvmeStoreOptions o;
  o.block_size = block;
  o.queue_depth = queue_depth;
  return o;
}

std::unique_ptr<NvmeStore> open_store(const std::string& dir, NvmeStoreOptions options = small_blocks()) {
  auto store = NvmeStore::open(dir, std::move(options));
  EXPECT_TRUE(store.ok()) << (store ? "" : store.error().message);
  return store ? std::move(*store) : nullptr;
}

void flip_byte(const std::string& path, off_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  unsigned char b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
  b ^= 0x01;
  ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
  ::close(fd);
}

// Holds the inode lock of the file at `path` for as long as the test wants, from inside the
// kernel: a write(2) to it whose source page is registered with userfaultfd, its fault left
// unanswered until release(). ext4 and xfs take that lock for every write (and for direct
// reads), so io_uring parks such requests in its io-wq workers, where they wait on the
// lock: what a device that completes nothing looks like to the store. Needs userfaultfd for kernel faults
// (root, or vm.unprivileged_userfaultfd=1); held() says why not when it is unavailable.
class LockedFile {
 public:
  explicit LockedFile(const std::string& path) {
    uffd_ = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (uffd_ < 0) {
      why_not_ = std::string("userfaultfd is unavailable: ") + std::strerror(errno);
      return;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    if (::ioctl(uffd_, UFFDIO_API, &api) != 0) {
      why_not_ = std::string("setting up userfaultfd failed: ") + std::strerror(errno);
      return;
    }
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
      why_not_ = std::string("mapping a page failed: ") + std::strerror(errno);
      return;
    }
    page_ = page;
    uffdio_register reg{};
    reg.range = {reinterpret_cast<uintptr_t>(page_), 4096};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
      why_not_ = std::string("registering a page with userfaultfd failed: ") + std::strerror(errno);
      return;
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) {
      why_not_ = "opening " + path + " failed: " + std::strerror(errno);
      return;
    }
    writer_ = std::thread([this] {
      written_ = ::pwrite(fd_, page_, 4096, 0);
      written_errno_ = errno;
    });
  }
  ~LockedFile() { release(); }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  // Waits (at most `deadline`) until the write is stuck in its fault, inside the lock.
  // Returns "" then, or why it is not.
  std::string held(std::chrono::milliseconds deadline) {
    if (!why_not_.empty()) return why_not_;
    pollfd p{uffd_, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(deadline.count()));
    uffd_msg msg{};
    if (ready != 1 || ::read(uffd_, &msg, sizeof msg) != static_cast<ssize_t>(sizeof msg) ||
        msg.event != UFFD_EVENT_PAGEFAULT) {
      release();
      return "the blocking write did not fault within " + std::to_string(deadline.count()) +
             " ms (it returned " + std::to_string(written_) + ": " + std::strerror(written_errno_) + ")";
    }
    return "";
  }

  // Answers the fault: the write finishes and lets go of the lock. Idempotent.
  void release() {
    if (page_ != nullptr) {
      uffdio_zeropage zero{};
      zero.range = {reinterpret_cast<uintptr_t>(page_), 4096};
      (void)::ioctl(uffd_, UFFDIO_ZEROPAGE, &zero);  // EEXIST when never faulted: fine
    }
    if (uffd_ >= 0) ::close(uffd_);  // wakes any fault still waiting, should the ioctl have failed
    uffd_ = -1;
    if (writer_.joinable()) writer_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (page_ != nullptr) ::munmap(page_, 4096);
    page_ = nullptr;
  }

 private:
  int uffd_ = -1;
  int fd_ = -1;
  void* page_ = nullptr;
  std::thread writer_;
  std::string why_not_;
  ssize_t written_ = -2;
  int written_errno_ = 0;
};

// Destroys `store` on another thread and says whether that returned within `deadline`. If it
// did not, calls `unblock` and waits again, so a hanging destructor fails the test instead of
// hanging it.
bool destroyed_within(std::unique_ptr<NvmeStore> store, std::chrono::milliseconds deadline,
                      const std::function<void()>& unblock) {
  auto returned = std::make_shared<std::promise<void>>();
  auto future = returned->get_future();
  std::thread destroyer([s = std::move(store), returned]() mutable {
    s.reset();
    returned->set_value();
  });
  bool in_time = future.wait_for(deadline) == std::future_status::ready;
  if (!in_time) {
    unblock();
    if (future.wait_for(30s) != std::future_status::ready) {
      destroyer.detach();
      ADD_FAILURE() << "the NvmeStore destructor did not return even after the stuck request was unblocked";
      return false;
    }
  }
  destroyer.join();
  return in_time;
}

TEST(Crc32c, MatchesTheStandardCheckValueAndExtends) {
  const char* text = "123456789";
  EXPECT_EQ(crc32c(text, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(text + 4, 5, crc32c(text, 4)), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(AlignedPool, BuffersArePageAlignedAndChargedWhileThePoolLives) {
  auto ledger = std::make_shared<MemoryLedger>();
  {
    auto pool = AlignedPool::make({5000, 3, ledger, MemoryKind::communication, "test pool"});
    ASSERT_TRUE(pool.ok());
    EXPECT_EQ((*pool)->buffer_bytes(), 8192u);
    EXPECT_EQ(ledger->current()[MemoryKind::communication], 3 * 8192);
    std::vector<std::byte*> taken;
    for (int i = 0; i < 3; ++i) taken.push_back((*pool)->try_acquire());
    for (auto* b : taken) EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % AlignedPool::alignment, 0u);
    EXPECT_EQ((*pool)->try_acquire(), nullptr);
    for (auto* b : taken) (*pool)->release(b);
    EXPECT_EQ((*pool)->available(), 3u);
  }
  EXPECT_EQ(ledger->current()[MemoryKind::communication], 0);
}

TEST(AlignedPool, AcquireWhenAllAreOutFailsAtItsDeadlineNamingThePool) {
  auto pool = pool_of(4096, 1);
  std::byte* held = pool->try_acquire();
  auto start = std::chrono::steady_clock::now();
  auto second = pool->acquire(50ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  ASSERT_FALSE(second.ok());
  EXPECT_CONTAINS(second.error().message, "waited 50 ms for a buffer of the test pool");
  pool->release(held);
}

TEST(AlignedPool, ReleaseWakesAWaitingAcquire) {
  auto pool = pool_of(4096, 1);
  std::byte* held = pool->try_acquire();
  auto waiter = std::async(std::launch::async, [&] { return pool->acquire(10s); });
  std::this_thread::sleep_for(20ms);
  pool->release(held);
  auto got = waiter.get();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, held);
  pool->release(*got);
}

TEST(AlignedPool, ZeroSizeOrCountIsAnError) {
  EXPECT_FALSE(AlignedPool::make({0, 2, nullptr, MemoryKind::communication, "p"}).ok());
  EXPECT_FALSE(AlignedPool::make({4096, 0, nullptr, MemoryKind::communication, "p"}).ok());
}

TEST(NvmeStore, RoundTripsKeysWhoseSizesAreAndAreNotWholeBlocks) {
  TempDir dir;
  auto ledger = std::make_shared<MemoryLedger>();
  auto options = small_blocks();
  options.ledger = ledger;
  auto store = open_store(dir.path(), options);
  ASSERT_TRUE(store);
  EXPECT_EQ(ledger->current()[MemoryKind::communication], 8 * 4096);  // the bounce pages
  const std::vector<std::size_t> sizes = {block, 3 * block, 3 * block + 4096, 3 * block + 100, 4096, 100,
                                          1,     0,         block - 1};
  std::size_t largest = 3 * block + 4096;
  auto source = pool_of(largest, sizes.size());
  auto target = pool_of(largest, sizes.size());
  std::vector<std::byte*> in, out;
  std::vector<Done> writes(sizes.size()), reads(sizes.size());
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    in.push_back(source->try_acquire());
    out.push_back(target->try_acquire());
    fill(in[k], sizes[k], static_cast<unsigned>(k));
    std::memset(out[k], 0xEE, largest);
    store->write("key-" + std::to_string(k), in[k], sizes[k], writes[k].callback());
  }
  for (auto& w : writes) ASSERT_TRUE(w.wait().ok());
  for (std::size_t k = 0; k < sizes.size(); ++k)
    store->read("key-" + std::to_string(k), out[k], sizes[k], reads[k].callback());
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    Status s = reads[k].wait();
    ASSERT_TRUE(s.ok()) << message(s);
    EXPECT_EQ(std::memcmp(in[k], out[k], sizes[k]), 0) << "size " << sizes[k];
    // The caller's buffer past `bytes` is left alone: the partial page went through the bounce page.
    if (sizes[k] < largest) {
      EXPECT_EQ(out[k][sizes[k]], std::byte{0xEE}) << "size " << sizes[k];
    }
    EXPECT_EQ(std::filesystem::file_size(store->path_of("key-" + std::to_string(k))),
              (sizes[k] + 4095) / 4096 * 4096);
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    source->release(in[k]);
    target->release(out[k]);
  }
}

TEST(NvmeStore, KeepsManyRequestsInFlightAcrossManyKeys) {
  TempDir dir;
  auto store = open_store(dir.path(), small_blocks(4));
  ASSERT_TRUE(store);
  constexpr std::size_t keys = 64;
  constexpr std::size_t bytes = 5 * block + 12345;  // 6 requests each, the last with a partial page
  auto source = pool_of(bytes, keys);
  auto target = pool_of(bytes, keys);
  std::vector<std::byte*> in(keys), out(keys);
  std::vector<Done> writes(keys), reads(keys);
  for (std::size_t k = 0; k < keys; ++k) {
    in[k] = source->try_acquire();
    out[k] = target->try_acquire();
    fill(in[k], bytes, static_cast<unsigned>(k));
    store->write("many-" + std::to_string(k), in[k], bytes, writes[k].callback());
  }
  for (auto& w : writes) ASSERT_TRUE(w.wait().ok());
  for (std::size_t k = 0; k < keys; ++k)
    store->read("many-" + std::to_string(k), out[k], bytes, reads[k].callback());
  for (std::size_t k = 0; k < keys; ++k) {
    Status s = reads[k].wait();
    ASSERT_TRUE(s.ok()) << message(s);
    EXPECT_EQ(std::memcmp(in[k], out[k], bytes), 0) << "key " << k;
    source->release(in[k]);
    target->release(out[k]);
  }
}

TEST(NvmeStore, ACallbackMayStartTheNextOperation) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(2 * block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, 2 * block, 1);
  Done read_done;
  store->write("chain", in, 2 * block, [&](Status s) {
    ASSERT_TRUE(s.ok()) << message(s);
    store->read("chain", out, 2 * block, read_done.callback());
  });
  ASSERT_TRUE(read_done.wait().ok());
  EXPECT_EQ(std::memcmp(in, out, 2 * block), 0);
  pool->release(in);
  pool->release(out);
}

TEST(NvmeStore, DestroyingTheStoreFinishesWhatWasSubmitted) {
  TempDir dir;
  auto pool = pool_of(4 * block, 8);
  std::vector<std::byte*> buffers;
  std::vector<Done> writes(8);
  {
    auto store = open_store(dir.path(), small_blocks(2));
    ASSERT_TRUE(store);
    for (std::size_t k = 0; k < 8; ++k) {
      buffers.push_back(pool->try_acquire());
      fill(buffers[k], 4 * block, static_cast<unsigned>(k));
      store->write("late-" + std::to_string(k), buffers[k], 4 * block, writes[k].callback());
    }
  }
  for (auto& w : writes) EXPECT_TRUE(w.wait(0s).ok());
  for (auto* b : buffers) pool->release(b);
}

TEST(NvmeStore, DestroyingTheStoreAlsoFinishesWhatItsCallbacksChain) {
  TempDir dir;
  auto pool = pool_of(2 * block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, 2 * block, 6);
  Done read_done;
  {
    auto store = open_store(dir.path());
    ASSERT_TRUE(store);
    NvmeStore* s = store.get();
    store->write("chained", in, 2 * block, [s, out, cb = read_done.callback()](Status w) {
      if (!w) return cb(w);
      s->read("chained", out, 2 * block, cb);
    });
  }
  Status s = read_done.wait(0s);
  ASSERT_TRUE(s.ok()) << message(s);
  EXPECT_EQ(std::memcmp(in, out, 2 * block), 0);
  pool->release(in);
  pool->release(out);
}

TEST(NvmeStore, AReopenedStoreVerifiesWithTheIndexFileBesideTheData) {
  TempDir dir;
  auto pool = pool_of(3 * block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, 3 * block - 10, 5);
  {
    auto store = open_store(dir.path());
    ASSERT_TRUE(store);
    ASSERT_TRUE(write_sync(*store, "kept", in, 3 * block - 10).ok());
  }
  auto reopened = open_store(dir.path(), small_blocks(2));
  ASSERT_TRUE(reopened);
  Status s = read_sync(*reopened, "kept", out, 3 * block - 10);
  ASSERT_TRUE(s.ok()) << message(s);
  EXPECT_EQ(std::memcmp(in, out, 3 * block - 10), 0);
  // Now corrupt it: the reopened store finds out from the index file alone.
  reopened.reset();
  flip_byte(dir.path() + "/kept", 2 * block + 7);
  reopened = open_store(dir.path());
  s = read_sync(*reopened, "kept", out, 3 * block - 10);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.error().message, dir.path() + "/kept is corrupt: the block at offset 131072");
  pool->release(in);
  pool->release(out);
}

TEST(NvmeStore, ACorruptedBlockFailsTheReadNamingThePathTheBlockAndTheChecksums) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(3 * block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, 3 * block, 2);
  ASSERT_TRUE(write_sync(*store, "opt-3.bin", in, 3 * block).ok());
  flip_byte(store->path_of("opt-3.bin"), block + 10);
  Status s = read_sync(*store, "opt-3.bin", out, 3 * block);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.error().message, store->path_of("opt-3.bin") +
                                         " is corrupt: the block at offset 65536 (65536 bytes) has CRC32C");
  EXPECT_CONTAINS(s.error().message, "was written");
  pool->release(in);
  pool->release(out);
}

TEST(NvmeStore, ATruncatedFileFailsTheRead) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(3 * block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, 3 * block, 3);
  ASSERT_TRUE(write_sync(*store, "short", in, 3 * block).ok());
  ASSERT_EQ(::truncate(store->path_of("short").c_str(), 2 * block), 0);
  Status s = read_sync(*store, "short", out, 3 * block);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.error().message, store->path_of("short") + " is truncated: it holds 131072 bytes");
  pool->release(in);
  pool->release(out);
}

TEST(NvmeStore, ReadingAKeyNeverWrittenOrWithTheWrongSizeFails) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(block, 1);
  std::byte* buffer = pool->try_acquire();
  Status missing = read_sync(*store, "never", buffer, block);
  ASSERT_FALSE(missing.ok());
  EXPECT_CONTAINS(missing.error().message, store->path_of("never") + ".index does not exist");
  ASSERT_TRUE(write_sync(*store, "sized", buffer, block).ok());
  Status wrong = read_sync(*store, "sized", buffer, block - 4096);
  ASSERT_FALSE(wrong.ok());
  EXPECT_CONTAINS(wrong.error().message, "but 65536 bytes were written there");
  pool->release(buffer);
}

TEST(NvmeStore, UnalignedBuffersAndKeysThatAreNotFileNamesFail) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(2 * 4096, 1);
  std::byte* buffer = pool->try_acquire();
  Status unaligned = write_sync(*store, "k", buffer + 512, 4096);
  ASSERT_FALSE(unaligned.ok());
  EXPECT_CONTAINS(unaligned.error().message, "is not 4096-byte aligned");
  for (const char* key : {"a/b", "..", "", "x.index"}) {
    Status bad = write_sync(*store, key, buffer, 4096);
    ASSERT_FALSE(bad.ok()) << key;
    EXPECT_CONTAINS(bad.error().message, "a key is a file name") << key;
  }
  pool->release(buffer);
}

TEST(NvmeStore, OpenFailsNamingAMissingDirectory) {
  TempDir dir;
  auto store = NvmeStore::open(dir.path() + "/absent");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().message, "the NVMe directory " + dir.path() + "/absent does not exist");
}

TEST(NvmeStore, OpenFailsNamingADirectoryItCannotWrite) {
  TempDir dir;
  std::string target = dir.path() + "/ro";
  ASSERT_EQ(::mkdir(target.c_str(), 0555), 0);
  // Root writes through permission bits, so for root the directory is a read-only mount.
  std::unique_ptr<testing::MemoryMount> mount;
  if (::geteuid() == 0) {
    mount = std::make_unique<testing::MemoryMount>(target, "size=1m", MS_RDONLY);
    if (!mount->mounted())
      GTEST_SKIP() << "running as root and cannot mount a read-only tmpfs: " << mount->error();
  }
  auto store = NvmeStore::open(target);
  ASSERT_FALSE(store.ok());
  EXPECT_CONTAINS(store.error().message, "cannot write to the NVMe directory " + target + ": creating");
  EXPECT_CONTAINS(store.error().message, ::geteuid() == 0 ? "Read-only file system" : "Permission denied");
}

TEST(NvmeStore, OpenRejectsBlockSizesThatAreNotWholePages) {
  TempDir dir;
  NvmeStoreOptions o;
  o.block_size = 1000;
  auto store = NvmeStore::open(dir.path(), o);
  ASSERT_FALSE(store.ok());
  EXPECT_CONTAINS(store.error().message, "NVMe block size 1000 must be a positive multiple of 4096");
}

TEST(NvmeStore, BufferedIoWorksTheSameWhenDirectIoIsOff) {
  TempDir dir;
  auto options = small_blocks();
  options.direct_io = DirectIo::never;
  auto store = open_store(dir.path(), options);
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->direct());
  EXPECT_EQ(store->buffered_reason(),
            dir.path() + ": direct I/O is turned off, so I/O goes through the page cache");
  auto pool = pool_of(2 * block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, 2 * block - 3, 9);
  ASSERT_TRUE(write_sync(*store, "buffered", in, 2 * block - 3).ok());
  ASSERT_TRUE(read_sync(*store, "buffered", out, 2 * block - 3).ok());
  EXPECT_EQ(std::memcmp(in, out, 2 * block - 3), 0);
  pool->release(in);
  pool->release(out);
}

// Where O_DIRECT works the store uses it and gives no reason; where not, it says why.
TEST(NvmeStore, DirectOrNotTheStoreSaysWhichAndWhy) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  EXPECT_EQ(store->direct(), store->buffered_reason().empty()) << store->buffered_reason();
}

// ramfs refuses O_DIRECT (EINVAL at open): the store falls back and names the directory
// and the reason, or, when direct I/O is required, refuses to open.
TEST(NvmeStore, AFileSystemThatRefusesDirectIoIsNamedOrRefusedWhenDirectIoIsRequired) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a ramfs needs root; not running as root";
  TempDir dir;
  testing::MemoryMount mount(dir.path(), "", 0, "ramfs");
  if (!mount.mounted()) GTEST_SKIP() << "cannot mount a ramfs on " << dir.path() << ": " << mount.error();
  auto store = open_store(dir.path(), small_blocks());
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->direct());
  EXPECT_EQ(store->buffered_reason(), dir.path() +
                                          ": the file system there refuses O_DIRECT (EINVAL), so I/O goes "
                                          "through the page cache");
  auto pool = pool_of(block, 2);
  std::byte* in = pool->try_acquire();
  std::byte* out = pool->try_acquire();
  fill(in, block, 3);
  ASSERT_TRUE(write_sync(*store, "on-ramfs", in, block).ok());
  ASSERT_TRUE(read_sync(*store, "on-ramfs", out, block).ok());
  EXPECT_EQ(std::memcmp(in, out, block), 0);
  pool->release(in);
  pool->release(out);

  auto required = small_blocks();
  required.direct_io = DirectIo::require;
  auto refused = NvmeStore::open(dir.path(), required);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "direct I/O is required, but " + dir.path() +
                                         ": the file system there refuses O_DIRECT (EINVAL), so I/O goes "
                                         "through the page cache");
}

TEST(NvmeStore, AFullDiskGivesAClearErrorAndNothingHangs) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a 4 MiB tmpfs to fill needs root; not running as root";
  TempDir dir;
  testing::MemoryMount mount(dir.path(), "size=4m");
  if (!mount.mounted())
    GTEST_SKIP() << "cannot mount a 4 MiB tmpfs on " << dir.path() << ": " << mount.error();
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(8 << 20, 1);
  std::byte* buffer = pool->try_acquire();
  fill(buffer, 8 << 20, 4);
  auto start = std::chrono::steady_clock::now();
  Status full = write_sync(*store, "opt-3.bin", buffer, 8 << 20);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  ASSERT_FALSE(full.ok());
  EXPECT_CONTAINS(full.error().message, store->path_of("opt-3.bin"));
  EXPECT_CONTAINS(full.error().message, "No space left on device");
  // The store is still usable for what fits.
  Status small = write_sync(*store, "small", buffer, 1 << 20);
  EXPECT_TRUE(small.ok()) << message(small);
  pool->release(buffer);
}

TEST(NvmeStore, ARequestTheKernelNeverCompletesFailsAtTheTimeoutAndTheStoreRefusesMore) {
  TempDir dir;
  auto options = small_blocks();
  options.io_timeout = 300ms;
  auto store = open_store(dir.path(), options);
  ASSERT_TRUE(store);
  // The kernel may read `in` for the abandoned write after the store is gone: a write only
  // reads the buffer, so giving it back to the pool at the end is harmless.
  auto pool = pool_of(block, 2);
  Lease in_lease(*pool), out_lease(*pool);
  std::byte* in = in_lease.get();
  std::byte* out = out_lease.get();
  fill(in, block, 12);
  // Written once first, so that writing it again needs no fallocate (which would wait for
  // the lock on the completion thread, outside the deadline's reach).
  ASSERT_TRUE(write_sync(*store, "stuck", in, block).ok());
  std::string path = store->path_of("stuck");
  LockedFile lock(path);
  std::string why_not = lock.held(10s);
  if (!why_not.empty()) GTEST_SKIP() << "cannot hold the lock of " << path << " in the kernel: " << why_not;

  auto start = std::chrono::steady_clock::now();
  Done stuck;
  store->write("stuck", in, block, stuck.callback());
  Status timed_out = stuck.wait(10s);
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(timed_out.ok()) << "the write went through although " << path << " was locked";
  ASSERT_NE(timed_out.error().message, "no callback within the deadline")
      << "the store never reported the write the kernel held";
  EXPECT_CONTAINS(timed_out.error().message, "no NVMe request completed within 300 ms");
  EXPECT_CONTAINS(timed_out.error().message, "writing 65536 bytes at offset 0 of " + path);
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 5s);

  // The store refuses further work at once, naming the new operation and the cause.
  start = std::chrono::steady_clock::now();
  Status write_after = write_sync(*store, "after", in, block);
  Status read_after = read_sync(*store, "stuck", out, block);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  ASSERT_FALSE(write_after.ok());
  ASSERT_FALSE(read_after.ok());
  EXPECT_CONTAINS(write_after.error().message,
                  "writing 65536 bytes of " + store->path_of("after") + " was refused: the NVMe store in " +
                      dir.path() + " has stopped, because no NVMe request completed within 300 ms");
  EXPECT_CONTAINS(write_after.error().message, "no NVMe request completed within 300 ms");
  EXPECT_CONTAINS(read_after.error().message, "reading 65536 bytes of " + path + " was refused");
  EXPECT_CONTAINS(read_after.error().message, "no NVMe request completed within 300 ms");
  EXPECT_FALSE(std::filesystem::exists(store->path_of("after")));

  // Destroying the store returns while the kernel still holds the request.
  EXPECT_TRUE(destroyed_within(std::move(store), 5s, [&] { lock.release(); }))
      << "the destructor waited for the request the kernel never completed";
  lock.release();
}

TEST(NvmeStore, ARequestTheKernelFailsNamesTheOperationAndThePathAndTheStoreGoesOn) {
  TempDir dir;
  auto store = open_store(dir.path());
  ASSERT_TRUE(store);
  auto pool = pool_of(2 * block, 2);
  Lease in_lease(*pool), out_lease(*pool);
  std::byte* in = in_lease.get();
  std::byte* out = out_lease.get();
  fill(in, 2 * block, 13);
  ASSERT_TRUE(write_sync(*store, "fault", in, 2 * block).ok());
  // Page-aligned memory the kernel may not write: each read request into it fails with EFAULT.
  // (Not a write from unreadable memory: the store itself reads the caller's bytes for the checksums.)
  void* mapped = ::mmap(nullptr, 2 * block, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  Status read = read_sync(*store, "fault", mapped, 2 * block);
  ::munmap(mapped, 2 * block);
  ASSERT_FALSE(read.ok());
  EXPECT_CONTAINS(read.error().message, "reading 65536 bytes at offset ");
  EXPECT_CONTAINS(read.error().message, " of " + store->path_of("fault") + " failed: Bad address");

  // One failed request breaks nothing else: the key reads back whole.
  Status again = read_sync(*store, "fault", out, 2 * block);
  ASSERT_TRUE(again.ok()) << message(again);
  EXPECT_EQ(std::memcmp(in, out, 2 * block), 0);

  // A data file deleted behind the store's back: its index is there, its data is not.
  ASSERT_EQ(::unlink(store->path_of("fault").c_str()), 0);
  Status deleted = read_sync(*store, "fault", out, 2 * block);
  ASSERT_FALSE(deleted.ok());
  EXPECT_EQ(deleted.error().message,
            "opening " + store->path_of("fault") + " for reading failed: No such file or directory");
}

TEST(NvmeStore, AWriteIntoADirectoryMadeReadOnlyAfterOpenFailsNamingThePath) {
  TempDir dir;
  std::string target = dir.path() + "/tier";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  // Root writes through permission bits, so for root the directory is a tmpfs remounted read-only.
  std::unique_ptr<testing::MemoryMount> mount;
  if (::geteuid() == 0) {
    mount = std::make_unique<testing::MemoryMount>(target, "size=4m");
    if (!mount->mounted()) GTEST_SKIP() << "running as root and cannot mount a tmpfs: " << mount->error();
  }
  auto store = open_store(target);
  ASSERT_TRUE(store);
  auto pool = pool_of(block, 1);
  Lease lease(*pool);
  std::byte* buffer = lease.get();
  fill(buffer, block, 14);
  ASSERT_TRUE(write_sync(*store, "before", buffer, block).ok());
  if (::geteuid() == 0) {
    if (::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0)
      GTEST_SKIP() << "running as root and cannot remount " << target
                   << " read-only: " << std::strerror(errno);
  } else {
    ASSERT_EQ(::chmod(target.c_str(), 0555), 0);
  }
  for (const char* key : {"before", "new"}) {
    Status s = write_sync(*store, key, buffer, block);
    ASSERT_FALSE(s.ok()) << key;
    EXPECT_CONTAINS(s.error().message, "writing");
    EXPECT_CONTAINS(s.error().message, store->path_of(key));
    EXPECT_CONTAINS(s.error().message, ::geteuid() == 0 ? "Read-only file system" : "Permission denied");
  }
  // What was written before still reads back, and the store did not stop.
  Status read = read_sync(*store, "before", buffer, block);
  EXPECT_TRUE(read.ok()) << message(read);
  if (::geteuid() != 0) ::chmod(target.c_str(), 0755);
}

TEST(NvmeStore, TheIndexFileRejectsDamage) {
  TempDir dir;
  KeyIndex index{3 * block + 5, static_cast<uint32_t>(block), {1, 2, 3, 4}};
  std::string path = dir.path() + "/k.index";
  ASSERT_TRUE(save_index(path, index).ok());
  auto loaded = load_index(path);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->checksums, index.checksums);
  flip_byte(path, 40);
  auto damaged = load_index(path);
  ASSERT_FALSE(damaged.ok());
  EXPECT_CONTAINS(damaged.error().message, "the index " + path + " is damaged");
}

}  // namespace
}  // namespace troupe
