// Fused CPU optimizer steps (Adam, AdamW, SGD) on flat fp32 buffers: one pass per element.
//
// Each step reads and writes every array once (Adam: p, g, m, v in, p, m, v out — 28 bytes
// per parameter), where LibTorch's single-tensor optimizers make about eight elementwise
// passes; the step is memory-bound, so the fused pass is what makes it fast. The arithmetic is
// LibTorch 1.13's, operation for operation and in the same order: the scalar coefficients in
// double, rounded to float once, and on the AVX2 and AVX-512 paths a fused multiply-add
// exactly where LibTorch's own vectorized kernels for those ISAs use one. So those paths match
// torch::optim::Adam/AdamW/SGD bit for bit when LibTorch runs its AVX2/AVX-512 kernels (its
// choice on such CPUs), and the scalar path matches LibTorch's baseline kernels, which have no
// FMA (ATEN_CPU_CAPABILITY=default); across the two the results differ by a few ulp.
//
// The path is chosen on first use: the best the CPU has (AVX-512F, then AVX2+FMA+F16C, then
// scalar), or the one TROUPE_KERNEL_ISA names (scalar | avx2 | avx512), for tests and
// comparisons.
// Thread safety: the steps are pure functions on caller-owned memory; distinct ranges may be
// stepped concurrently. The *_parallel steps share one process-wide pool of worker threads:
// concurrent calls take turns on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/result.hpp"

namespace troupe::kernels {

/// A 16-bit copy of the updated parameters written in the same pass (for the GPU's copy).
enum class Precision16 : uint8_t { none = 0, bf16 = 1, f16 = 2 };

/// One Adam or AdamW step. The fields are LibTorch's AdamOptions/AdamWOptions, in double as
/// there: the same values give the same coefficients, hence bit-identical results.
struct AdamParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  ///< AdamW: decay the parameter; otherwise Adam: add wd·p to the gradient
  int64_t step = 1;        ///< 1-based, already incremented for this step (bias corrections)
};

/// One SGD step with LibTorch's semantics (buffer = g on the first step, then
/// buffer = momentum·buffer + (1 − dampening)·g).
struct SgdParams {
  double lr = 0.01;
  double momentum = 0;  ///< 0: no buffer (it may be null)
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  ///< initialise the momentum buffer to the gradient
};

/// One flat run of a partition: parameters, gradients, both moments, and (with a 16-bit
/// copy) where the copy of the updated parameters goes. Host memory for the CPU kernels,
/// device memory for the CUDA ones (kernels/cuda/optimizer.cuh), which take a table of them.
struct AdamChunk {
  float* parameters = nullptr;
  const float* gradients = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* copy_out = nullptr;
  std::size_t count = 0;
};

/// Updates p, m and v in place for n elements with gradient g; with copy ≠ none also writes the
/// updated p, rounded to nearest even, to copy_out (n 16-bit values). Arrays must not overlap.
void adam_step(float* p, const float* g, float* m, float* v, std::size_t n, const AdamParams& params,
               Precision16 copy = Precision16::none, void* copy_out = nullptr);

/// adam_step over `threads` threads (the caller and threads − 1 pooled workers that outlive the
/// call), each taking 1 MiB-per-array chunks in turn. Results are bit-identical to adam_step
/// for any thread count; threads ≤ 1, or n under two chunks (512 Ki elements), runs inline.
void adam_step_parallel(float* p, const float* g, float* m, float* v, std::size_t n, const AdamParams& params,
                        Precision16 copy, void* copy_out, int threads);

/// Updates p (and momentum_buffer when momentum ≠ 0) in place for n elements with gradient g.
void sgd_step(float* p, const float* g, float* momentum_buffer, std::size_t n, const SgdParams& params);

/// The path the steps use: "avx512", "avx2" or "scalar". On first use it is TROUPE_KERNEL_ISA
/// if set — a name this CPU cannot run aborts with a message (call select_optimizer_isa first to
/// get that as an error instead) — else the best the CPU has.
const char* optimizer_isa();

/// Resolves TROUPE_KERNEL_ISA (or the best path when unset) for this process now; an unknown
/// name or a path the CPU lacks is an error naming what the CPU has.
Status select_optimizer_isa();

/// Uses path `name` (scalar | avx2 | avx512) from now on; an error if unknown or unsupported.
Status select_optimizer_isa(std::string_view name);

/// Whether this CPU can run path `name`.
bool optimizer_isa_supported(std::string_view name);

}  // namespace troupe::kernels
