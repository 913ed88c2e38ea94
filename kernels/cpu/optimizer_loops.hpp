// The fused optimizer loops, written once over a vector type's traits and instantiated by each
// per-ISA file (optimizer_avx2.cpp, optimizer_avx512.cpp) for its own registers, so the order of
// operations — which is what makes the results match LibTorch — cannot differ between paths.
//
// Include only from a per-ISA file, after defining the traits. Everything here has internal
// linkage (an unnamed namespace), so each file gets its own copy compiled for its instructions.
// A traits type V provides: `vec`, `lanes`, load/store/set1/mul/add/div/sqrt/fmadd (fmadd(a, b, c)
// = a·b + c rounded once), and store_bf16/store_f16 (round to nearest even, canonical NaN).
#pragma once

#include <cstring>

#include "kernels/cpu/optimizer_simd.hpp"

namespace troupe::kernels::detail {
namespace {

// Vectors of each array loaded before any is stored, so 4 × 4 loads are in flight (with
// AVX-512 and the nine coefficients, 25 of the 32 registers).
constexpr std::size_t unroll = 4;

template <class V>
struct AdamVectors {
  typename V::vec decay, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bias_correction2,
      eps, neg_step_size;
  explicit AdamVectors(const AdamCoefficients& c)
      : decay(V::set1(c.decay)),
        weight_decay(V::set1(c.weight_decay)),
        beta1(V::set1(c.beta1)),
        one_minus_beta1(V::set1(c.one_minus_beta1)),
        beta2(V::set1(c.beta2)),
        one_minus_beta2(V::set1(c.one_minus_beta2)),
        sqrt_bias_correction2(V::set1(c.sqrt_bias_correction2)),
        eps(V::set1(c.eps)),
        neg_step_size(V::set1(c.neg_step_size)) {}
};

// `count` vectors from element i: all loads, then LibTorch 1.13's operations in its order, then
// the stores. Per element (a fused multiply-add exactly where LibTorch's AVX2/AVX-512 kernels
// have one: add with alpha is vec::fmadd, and addcmul's a + s·b·c is contracted by its compiler):
//   AdamW: p = p·decay                          (p.mul_(1 − lr·wd))
//   Adam:  g = fma(p, wd, g)                    (grad.add(p, wd))
//   m = fma(g, 1−β1, m·β1)                      (exp_avg.mul_(β1).add_(g, 1−β1))
//   v = fma((1−β2)·g, g, v·β2)                  (exp_avg_sq.mul_(β2).addcmul_(g, g, 1−β2))
//   p = p + (−step·m) / (sqrt(v)/sqrt(bc2) + eps)  (p.addcdiv_(m, denom, −step))
template <class V, WeightDecay mode, Precision16 copy, std::size_t count>
inline void adam_vectors(float* p, const float* g, float* m, float* v, std::size_t i, const AdamVectors<V>& k,
                         void* copy_out) {
  typename V::vec pv[count], gv[count], mv[count], vv[count];
  for (std::size_t u = 0; u < count; ++u) {
    pv[u] = V::load(p + i + u * V::lanes);
    gv[u] = V::load(g + i + u * V::lanes);
    mv[u] = V::load(m + i + u * V::lanes);
    vv[u] = V::load(v + i + u * V::lanes);
  }
  for (std::size_t u = 0; u < count; ++u) {
    if constexpr (mode == WeightDecay::decoupled) pv[u] = V::mul(pv[u], k.decay);
    if constexpr (mode == WeightDecay::l2) gv[u] = V::fmadd(pv[u], k.weight_decay, gv[u]);
    mv[u] = V::fmadd(gv[u], k.one_minus_beta1, V::mul(mv[u], k.beta1));
    vv[u] = V::fmadd(V::mul(k.one_minus_beta2, gv[u]), gv[u], V::mul(vv[u], k.beta2));
    auto denom = V::add(V::div(V::sqrt(vv[u]), k.sqrt_bias_correction2), k.eps);
    pv[u] = V::add(pv[u], V::div(V::mul(k.neg_step_size, mv[u]), denom));
  }
  for (std::size_t u = 0; u < count; ++u) {
    std::size_t at = i + u * V::lanes;
    V::store(p + at, pv[u]);
    V::store(m + at, mv[u]);
    V::store(v + at, vv[u]);
    if constexpr (copy == Precision16::bf16) V::store_bf16(static_cast<uint16_t*>(copy_out) + at, pv[u]);
    if constexpr (copy == Precision16::f16) V::store_f16(static_cast<uint16_t*>(copy_out) + at, pv[u]);
  }
}

template <class V, WeightDecay mode, Precision16 copy>
void adam_loop(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
               void* copy_out) {
  constexpr std::size_t lanes = V::lanes;
  const AdamVectors<V> k(c);
  std::size_t i = 0;
  for (; i + unroll * lanes <= n; i += unroll * lanes)
    adam_vectors<V, mode, copy, unroll>(p, g, m, v, i, k, copy_out);
  for (; i + lanes <= n; i += lanes) adam_vectors<V, mode, copy, 1>(p, g, m, v, i, k, copy_out);
  if (i == n) return;
  // The last partial vector goes through the same code on padded copies, so every element gets
  // the same arithmetic whatever its position (and nothing past n is touched).
  std::size_t rest = n - i;
  float tp[lanes] = {}, tg[lanes] = {}, tm[lanes] = {}, tv[lanes] = {};
  uint16_t tcopy[lanes];
  std::memcpy(tp, p + i, rest * sizeof(float));
  std::memcpy(tg, g + i, rest * sizeof(float));
  std::memcpy(tm, m + i, rest * sizeof(float));
  std::memcpy(tv, v + i, rest * sizeof(float));
  adam_vectors<V, mode, copy, 1>(tp, tg, tm, tv, 0, k, tcopy);
  std::memcpy(p + i, tp, rest * sizeof(float));
  std::memcpy(m + i, tm, rest * sizeof(float));
  std::memcpy(v + i, tv, rest * sizeof(float));
  if constexpr (copy != Precision16::none)
    std::memcpy(static_cast<uint16_t*>(copy_out) + i, tcopy, rest * sizeof(uint16_t));
}

template <class V, WeightDecay mode>
void adam_with_copy(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
                    Precision16 copy, void* copy_out) {
  switch (copy) {
    case Precision16::none:
      return adam_loop<V, mode, Precision16::none>(p, g, m, v, n, c, copy_out);
    case Precision16::bf16:
      return adam_loop<V, mode, Precision16::bf16>(p, g, m, v, n, c, copy_out);
    case Precision16::f16:
      return adam_loop<V, mode, Precision16::f16>(p, g, m, v, n, c, copy_out);
  }
}

template <class V>
void adam(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
          Precision16 copy, void* copy_out) {
  switch (c.weight_decay_mode) {
    case WeightDecay::none:
      return adam_with_copy<V, WeightDecay::none>(p, g, m, v, n, c, copy, copy_out);
    case WeightDecay::decoupled:
      return adam_with_copy<V, WeightDecay::decoupled>(p, g, m, v, n, c, copy, copy_out);
    case WeightDecay::l2:
      return adam_with_copy<V, WeightDecay::l2>(p, g, m, v, n, c, copy, copy_out);
  }
}

template <class V>
struct SgdVectors {
  typename V::vec weight_decay, momentum, one_minus_dampening, neg_lr;
  explicit SgdVectors(const SgdCoefficients& c)
      : weight_decay(V::set1(c.weight_decay)),
        momentum(V::set1(c.momentum)),
        one_minus_dampening(V::set1(c.one_minus_dampening)),
        neg_lr(V::set1(c.neg_lr)) {}
};

// LibTorch 1.13's SGD per element: d = fma(p, wd, g); buffer = d on the first step, else
// fma(d, 1−dampening, buffer·momentum); d = nesterov ? fma(buffer, momentum, d) : buffer;
// p = fma(d, −lr, p). The flags are the same for every element, so the branches predict.
template <class V>
inline void sgd_vector(float* p, const float* g, float* buffer, std::size_t i, const SgdCoefficients& c,
                       const SgdVectors<V>& k) {
  auto pv = V::load(p + i);
  auto d = V::load(g + i);
  if (c.has_weight_decay) d = V::fmadd(pv, k.weight_decay, d);
  if (c.has_momentum) {
    auto b = c.first_step ? d : V::fmadd(d, k.one_minus_dampening, V::mul(V::load(buffer + i), k.momentum));
    V::store(buffer + i, b);
    d = c.nesterov ? V::fmadd(b, k.momentum, d) : b;
  }
  V::store(p + i, V::fmadd(d, k.neg_lr, pv));
}

template <class V>
void sgd(float* p, const float* g, float* buffer, std::size_t n, const SgdCoefficients& c) {
  constexpr std::size_t lanes = V::lanes;
  const SgdVectors<V> k(c);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) sgd_vector(p, g, buffer, i, c, k);
  if (i == n) return;
  std::size_t rest = n - i;
  float tp[lanes] = {}, tg[lanes] = {}, tb[lanes] = {};
  std::memcpy(tp, p + i, rest * sizeof(float));
  std::memcpy(tg, g + i, rest * sizeof(float));
  if (c.has_momentum) std::memcpy(tb, buffer + i, rest * sizeof(float));
  sgd_vector(tp, tg, tb, 0, c, k);
  std::memcpy(p + i, tp, rest * sizeof(float));
  if (c.has_momentum) std::memcpy(buffer + i, tb, rest * sizeof(float));
}

}  // namespace
}  // namespace troupe::kernels::detail
