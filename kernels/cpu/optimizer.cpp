#include "kernels/cpu/optimizer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/optimizer_simd.hpp"
#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels {
namespace {

using detail::adam_coefficients;
using detail::AdamCoefficients;
using detail::SgdCoefficients;
using detail::WeightDecay;

// ---- Coefficients: LibTorch keeps the options in double and rounds each scalar to float where
// it meets a float tensor; doing the same here is what makes the results match.

SgdCoefficients sgd_coefficients(const SgdParams& s) {
  SgdCoefficients c;
  c.has_weight_decay = s.weight_decay != 0;
  c.has_momentum = s.momentum != 0;
  c.nesterov = s.nesterov;
  c.first_step = s.first_step;
  c.weight_decay = static_cast<float>(s.weight_decay);
  c.momentum = static_cast<float>(s.momentum);
  c.one_minus_dampening = static_cast<float>(1 - s.dampening);
  c.neg_lr = static_cast<float>(-1 * s.lr);
  return c;
}

// ---- The scalar path: LibTorch's baseline kernels, which have no fused multiply-add (this file
// is compiled with -ffp-contract=off, so the compiler fuses nothing either).

// The arrays do not overlap (the header's contract), which lets the compiler vectorize this
// with the baseline's SSE: the same operations element by element, so the same results.
template <WeightDecay mode>
void adam_scalar_block(float* __restrict p, const float* __restrict g, float* __restrict m,
                       float* __restrict v, std::size_t n, const AdamCoefficients& c) {
  for (std::size_t i = 0; i < n; ++i) {
    float pi = p[i], gi = g[i];
    if constexpr (mode == WeightDecay::decoupled) pi = pi * c.decay;
    if constexpr (mode == WeightDecay::l2) gi = gi + c.weight_decay * pi;
    float mi = m[i] * c.beta1 + gi * c.one_minus_beta1;
    float vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;
    float denom = std::sqrt(vi) / c.sqrt_bias_correction2 + c.eps;
    p[i] = pi + c.neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

// Blocks of 4 KiB of p: each is converted for the copy while it is still in L1, so the step
// stays one pass over memory.
template <WeightDecay mode>
void adam_scalar(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
                 Precision16 copy, void* copy_out) {
  constexpr std::size_t block = 1024;
  auto* out = static_cast<uint16_t*>(copy_out);
  for (std::size_t i = 0; i < n; i += block) {
    std::size_t count = std::min(block, n - i);
    adam_scalar_block<mode>(p + i, g + i, m + i, v + i, count, c);
    if (copy == Precision16::bf16)
      for (std::size_t k = i; k < i + count; ++k) out[k] = float_to_bf16(p[k]);
    if (copy == Precision16::f16)
      for (std::size_t k = i; k < i + count; ++k) out[k] = float_to_f16(p[k]);
  }
}

void adam_scalar(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
                 Precision16 copy, void* copy_out) {
  switch (c.weight_decay_mode) {
    case WeightDecay::none:
      return adam_scalar<WeightDecay::none>(p, g, m, v, n, c, copy, copy_out);
    case WeightDecay::decoupled:
      return adam_scalar<WeightDecay::decoupled>(p, g, m, v, n, c, copy, copy_out);
    case WeightDecay::l2:
      return adam_scalar<WeightDecay::l2>(p, g, m, v, n, c, copy, copy_out);
  }
}

void sgd_scalar(float* __restrict p, const float* __restrict g, float* __restrict buffer, std::size_t n,
                const SgdCoefficients& c) {
  for (std::size_t i = 0; i < n; ++i) {
    float d = g[i];
    if (c.has_weight_decay) d = d + c.weight_decay * p[i];
    if (c.has_momentum) {
      float b = c.first_step ? d : buffer[i] * c.momentum + c.one_minus_dampening * d;
      buffer[i] = b;
      d = c.nesterov ? d + c.momentum * b : b;
    }
    p[i] = p[i] + c.neg_lr * d;
  }
}

// ---- Choosing the path.

enum class Isa : int { scalar = 0, avx2 = 1, avx512 = 2 };
constexpr const char* isa_names[] = {"scalar", "avx2", "avx512"};
constexpr int unresolved = -1;
std::atomic<int> active_isa{unresolved};

bool parse_isa(std::string_view name, Isa& isa) {
  for (int i = 0; i < 3; ++i)
    if (name == isa_names[i]) {
      isa = static_cast<Isa>(i);
      return true;
    }
  return false;
}

// Each path's compile flags (kernels/CMakeLists.txt) are exactly what it asks the CPU for.
bool cpu_runs(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
  }
  return false;
}

Isa best_isa() {
  return cpu_runs(Isa::avx512) ? Isa::avx512 : cpu_runs(Isa::avx2) ? Isa::avx2 : Isa::scalar;
}

Isa current_isa() {
  int isa = active_isa.load(std::memory_order_acquire);
  if (isa != unresolved) return static_cast<Isa>(isa);
  Status selected = select_optimizer_isa();
  if (!selected) {
    std::fprintf(stderr, "troupe: %s\n", selected.error().message.c_str());
    std::abort();
  }
  return static_cast<Isa>(active_isa.load(std::memory_order_acquire));
}

void run_adam(Isa isa, float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
              Precision16 copy, void* copy_out) {
  TROUPE_CHECK(copy == Precision16::none || copy_out != nullptr || n == 0, "adam_step: copy_out is null");
  switch (isa) {
    case Isa::avx512:
      return detail::adam_avx512(p, g, m, v, n, c, copy, copy_out);
    case Isa::avx2:
      return detail::adam_avx2(p, g, m, v, n, c, copy, copy_out);
    case Isa::scalar:
      return adam_scalar(p, g, m, v, n, c, copy, copy_out);
  }
}

// ---- Threads.

// Elements per chunk: 1 MiB of each fp32 array, a multiple of 64 KiB so chunk boundaries keep
// the arrays' alignment. Measured on the 2-vCPU CI VM (AdamW, 2^26 params, 2 threads, the second
// vCPU idle): 64 KiB chunks reach 3.8 Gparam/s, 256 KiB 4.2, 1 MiB 4.3 — every chunk restarts
// the hardware prefetchers' streams, so fewer, longer ones do better.
constexpr std::size_t chunk_elements = std::size_t{1} << 18;
constexpr int max_threads = 64;

// Worker threads that outlive the calls, so a step creates no threads. One run at a time; the
// caller works too, and every thread takes the next chunk until none are left (chunks are
// independent, so which thread does one never changes the result).
// Thread safety: run() may be called from any thread; concurrent calls take turns.
class ChunkPool {
 public:
  using Body = void (*)(const void* context, std::size_t chunk);

  ~ChunkPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void run(std::size_t chunks, int threads, Body body, const void* context) {
    std::lock_guard<std::mutex> one_run(run_mutex_);
    int helpers = std::min(threads, max_threads) - 1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < helpers) {
        int index = static_cast<int>(workers_.size());
        workers_.emplace_back([this, index] { work(index); });
      }
      body_ = body;
      context_ = context;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = helpers;
      busy_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
  }

 private:
  void drain() {
    for (std::size_t c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < chunks_;) body_(context_, c);
  }

  void work(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= helpers_) continue;  // a smaller run than the pool
      lock.unlock();
      drain();
      lock.lock();
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;  // guards what follows but next_
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Body body_ = nullptr;
  const void* context_ = nullptr;
  std::size_t chunks_ = 0;
  std::atomic<std::size_t> next_{0};
  int helpers_ = 0;
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

ChunkPool& shared_pool() {
  static ChunkPool pool;
  return pool;
}

struct AdamJob {
  Isa isa;
  float* p;
  const float* g;
  float* m;
  float* v;
  std::size_t n;
  AdamCoefficients c;
  Precision16 copy;
  void* copy_out;
};

void adam_chunk(const void* context, std::size_t chunk) {
  const auto& job = *static_cast<const AdamJob*>(context);
  std::size_t begin = chunk * chunk_elements;
  std::size_t count = std::min(chunk_elements, job.n - begin);
  void* out = job.copy == Precision16::none ? nullptr : static_cast<uint16_t*>(job.copy_out) + begin;
  run_adam(job.isa, job.p + begin, job.g + begin, job.m + begin, job.v + begin, count, job.c, job.copy, out);
}

}  // namespace

void adam_step(float* p, const float* g, float* m, float* v, std::size_t n, const AdamParams& params,
               Precision16 copy, void* copy_out) {
  run_adam(current_isa(), p, g, m, v, n, adam_coefficients(params), copy, copy_out);
}

void adam_step_parallel(float* p, const float* g, float* m, float* v, std::size_t n, const AdamParams& params,
                        Precision16 copy, void* copy_out, int threads) {
  std::size_t chunks = (n + chunk_elements - 1) / chunk_elements;
  if (threads <= 1 || chunks < 2) return adam_step(p, g, m, v, n, params, copy, copy_out);
  AdamJob job{current_isa(), p, g, m, v, n, adam_coefficients(params), copy, copy_out};
  int used = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), chunks));
  shared_pool().run(chunks, used, adam_chunk, &job);
}

void sgd_step(float* p, const float* g, float* momentum_buffer, std::size_t n, const SgdParams& params) {
  SgdCoefficients c = sgd_coefficients(params);
  TROUPE_CHECK(!c.has_momentum || momentum_buffer != nullptr || n == 0,
               "sgd_step: momentum without a buffer");
  switch (current_isa()) {
    case Isa::avx512:
      return detail::sgd_avx512(p, g, momentum_buffer, n, c);
    case Isa::avx2:
      return detail::sgd_avx2(p, g, momentum_buffer, n, c);
    case Isa::scalar:
      return sgd_scalar(p, g, momentum_buffer, n, c);
  }
}

const char* optimizer_isa() {
  return isa_names[static_cast<int>(current_isa())];
}

bool optimizer_isa_supported(std::string_view name) {
  Isa isa;
  return parse_isa(name, isa) && cpu_runs(isa);
}

Status select_optimizer_isa(std::string_view name) {
  Isa isa;
  if (!parse_isa(name, isa))
    return make_error("unknown kernel ISA '" + std::string(name) + "': choose scalar, avx2 or avx512");
  if (!cpu_runs(isa))
    return make_error("this CPU cannot run the " + std::string(name) +
                      " kernels (best here: " + isa_names[static_cast<int>(best_isa())] + ")");
  active_isa.store(static_cast<int>(isa), std::memory_order_release);
  return {};
}

// The one place TROUPE_KERNEL_ISA is read.
Status select_optimizer_isa() {
  const char* forced = std::getenv("TROUPE_KERNEL_ISA");
  if (forced == nullptr || *forced == '\0') {
    active_isa.store(static_cast<int>(best_isa()), std::memory_order_release);
    return {};
  }
  Status selected = select_optimizer_isa(forced);
  if (!selected)
    return make_error("TROUPE_KERNEL_ISA=" + std::string(forced) + ": " + selected.error().message);
  return {};
}

}  // namespace troupe::kernels

namespace troupe::kernels::detail {

AdamCoefficients adam_coefficients(const AdamParams& a) {
  TROUPE_CHECK(a.step >= 1, "adam_step: the step is 1-based and already incremented");
  double lr = a.lr, wd = a.weight_decay, beta1 = a.beta1, beta2 = a.beta2;
  double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(a.step));
  double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(a.step));
  AdamCoefficients c;
  c.weight_decay_mode = wd == 0 ? WeightDecay::none : a.decoupled ? WeightDecay::decoupled : WeightDecay::l2;
  c.decay = static_cast<float>(1 - lr * wd);
  c.weight_decay = static_cast<float>(a.weight_decay);
  c.beta1 = static_cast<float>(a.beta1);
  c.one_minus_beta1 = static_cast<float>(1 - beta1);
  c.beta2 = static_cast<float>(a.beta2);
  c.one_minus_beta2 = static_cast<float>(1 - beta2);
  c.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(a.eps);
  c.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return c;
}

}  // namespace troupe::kernels::detail
