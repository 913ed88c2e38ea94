// The NVMe tier on its own: the aligned pool, CRC32C, and NvmeStore's round trips,
// checksums and errors, on whatever file system holds the test's temporary directory
// (O_DIRECT where it is allowed, buffered where not). The full-disk test mounts a small
// tmpfs, which needs root; elsewhere it is skipped and says why.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "memory/aligned_pool.hpp"
#include "memory/crc32c.hpp"
#include "memory/nvme_index.hpp"
#include "memory/nvme_store.hpp"

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

// A tmpfs of `size` mounted on `dir` (root only), unmounted when destroyed.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& dir, const std::string& options, unsigned long flags = 0) : dir_(dir) {
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", flags, options.c_str()) == 0;
    error_ = mounted_ ? "" : std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
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
  std::unique_ptr<TmpfsMount> mount;
  if (::geteuid() == 0) {
    mount = std::make_unique<TmpfsMount>(target, "size=1m", MS_RDONLY);
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

TEST(NvmeStore, AFullDiskGivesAClearErrorAndNothingHangs) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a 4 MiB tmpfs to fill needs root; not running as root";
  TempDir dir;
  TmpfsMount mount(dir.path(), "size=4m");
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
