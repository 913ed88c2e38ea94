// The memory tiers of a GPU rank: the device arena (first fit, merging, a clear error when
// full, charged to the ledger) and pinned host pools copied to and from the device on the
// h2d and d2h streams, ordered by events; host memory pinned in place (pin_host). Skips, saying why, where
// there is no usable GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <numeric>

#include "actors/cuda_stream.hpp"
#include "memory/cuda/device_arena.hpp"
#include "memory/cuda/pinned.hpp"
#include "memory/host_buffer.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace troupe {
namespace {

TEST(DeviceArena, CarvesMergesAndSaysWhatIsLeftWhenFull) {
  TROUPE_SKIP_WITHOUT_GPU();
  auto ledger = std::make_shared<MemoryLedger>();
  auto arena = DeviceArena::make("test", 0, 4096, ledger, MemoryKind::parameters);
  ASSERT_TRUE(arena.ok()) << arena.error().message;
  EXPECT_EQ(ledger->current()[MemoryKind::parameters], 4096);
  DeviceArena& a = **arena;
  void* x = *a.allocate(1000);  // 1024 with alignment
  void* y = *a.allocate(1024);
  void* z = *a.allocate(2048);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x) % DeviceArena::alignment, 0u);
  EXPECT_EQ(a.free_bytes(), 0u);
  auto full = a.allocate(1);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().message,
            "device arena test on GPU 0: no free run of 256 bytes (0 of 4096 bytes free, the largest run 0)");
  a.free(x);
  a.free(z);
  EXPECT_EQ(a.largest_free(), 2048u) << "x and z are not neighbours";
  a.free(y);
  EXPECT_EQ(a.largest_free(), 4096u) << "freed neighbours merge into one run";
  void* all = *a.allocate(4096);
  a.free(all);
}

// Whether the CUDA runtime knows `p` as page-locked host memory.
bool page_locked(const void* p) {
  cudaPointerAttributes a{};
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost;
}

TEST(PinHost, PinsInPlaceUntilTheHandleGoes) {
  TROUPE_SKIP_WITHOUT_GPU();
  HostBuffer buffer(1 << 20);
  {
    auto pinned = pin_host(buffer.data(), buffer.bytes());
    ASSERT_TRUE(pinned.ok()) << pinned.error().message;
    EXPECT_TRUE(page_locked(buffer.data()));
  }
  EXPECT_FALSE(page_locked(buffer.data())) << "unpinned with the handle";
  cudaGetLastError();  // the query of unregistered memory may leave an error behind
}

TEST(PinnedPool, CopiesToTheDeviceAndBackInStreamOrder) {
  TROUPE_SKIP_WITHOUT_GPU();
  std::size_t bytes = 64 << 20;
  auto pool = PinnedPool::make(AlignedPoolOptions{bytes, 2, nullptr, MemoryKind::communication, "staging"});
  ASSERT_TRUE(pool.ok()) << pool.error().message;
  auto arena = DeviceArena::make("tier", 0, bytes);
  ASSERT_TRUE(arena.ok()) << arena.error().message;
  auto streams = CudaStreams::make(0, nullptr, [](const std::string& what) { ADD_FAILURE() << what; });
  ASSERT_TRUE(streams.ok()) << streams.error().message;
  auto* out = reinterpret_cast<float*>((*pool)->pool().try_acquire());
  auto* back = reinterpret_cast<float*>((*pool)->pool().try_acquire());
  EXPECT_TRUE(page_locked(out) && page_locked(back)) << "the pool's buffers are pinned";
  std::iota(out, out + bytes / 4, 0.0f);
  std::memset(back, 0, bytes);
  void* device = *(*arena)->allocate(bytes);
  streams->h2d->copy(device, out, bytes, "upload");
  streams->d2h->wait(streams->h2d->record());
  streams->d2h->copy(back, device, bytes, "download");
  auto done = std::make_shared<std::promise<void>>();
  streams->d2h->record().on_complete([done] { done->set_value(); });
  ASSERT_EQ(done->get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(std::memcmp(out, back, bytes), 0);
  (*arena)->free(device);
  (*pool)->pool().release(reinterpret_cast<std::byte*>(out));
  (*pool)->pool().release(reinterpret_cast<std::byte*>(back));
}

}  // namespace
}  // namespace troupe
