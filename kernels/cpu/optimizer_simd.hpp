// Internal to optimizer.cpp, its per-ISA files and the CUDA twin (kernels/cuda): the steps' coefficients,
// rounded to float once, and the entry points of the AVX2 and AVX-512 paths.
//
// The per-ISA files are compiled with -mavx2/-mavx512f; they must not odr-use inline library
// code (std:: templates, inline functions), whose out-of-line copy the linker could then pick
// for callers on CPUs without those instructions. They use intrinsics, memcpy and this header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/optimizer.hpp"

namespace troupe::kernels::detail {

enum class WeightDecay : uint8_t { none, decoupled, l2 };

/// Adam's scalars as LibTorch computes them: in double from the options, then rounded to
/// float when they meet a float tensor.
struct AdamCoefficients {
  WeightDecay weight_decay_mode = WeightDecay::none;
  float decay = 1;         ///< AdamW: p *= 1 − lr·wd
  float weight_decay = 0;  ///< Adam: g += wd·p
  float beta1 = 0, one_minus_beta1 = 0;
  float beta2 = 0, one_minus_beta2 = 0;
  float sqrt_bias_correction2 = 1;  ///< denom = sqrt(v) / sqrt(1 − β2^t) + eps
  float eps = 0;
  float neg_step_size = 0;  ///< −lr / (1 − β1^t)
};

struct SgdCoefficients {
  bool has_weight_decay = false, has_momentum = false, nesterov = false, first_step = false;
  float weight_decay = 0, momentum = 0, one_minus_dampening = 1, neg_lr = 0;
};

/// The coefficients of `params`' step (shared by the CPU paths and the CUDA kernel).
AdamCoefficients adam_coefficients(const AdamParams& params);

void adam_avx2(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
               Precision16 copy, void* copy_out);
void adam_avx512(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
                 Precision16 copy, void* copy_out);
void sgd_avx2(float* p, const float* g, float* buffer, std::size_t n, const SgdCoefficients& c);
void sgd_avx512(float* p, const float* g, float* buffer, std::size_t n, const SgdCoefficients& c);

}  // namespace troupe::kernels::detail
