// The AVX-512 path of the fused optimizer steps: 16 floats a vector. Compiled with -mavx512f
// -ffp-contract=off, so the only fused multiply-adds are the explicit ones in the loops
// (optimizer_loops.hpp), and with nothing but intrinsics and memcpy (see optimizer_simd.hpp).

// GCC 12's AVX-512 intrinsics pass a self-initialised "undefined" vector as the unused merge
// source and then warn about it once inlined (GCC bug 105593, fixed in 13); the warning must be
// off where the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/optimizer_loops.hpp"

namespace troupe::kernels::detail {
namespace {

struct Avx512 {
  using vec = __m512;
  static constexpr std::size_t lanes = 16;
  static vec load(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* x, vec a) { _mm512_storeu_ps(x, a); }
  static vec set1(float x) { return _mm512_set1_ps(x); }
  static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
  static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
  static vec div(vec a, vec b) { return _mm512_div_ps(a, b); }
  static vec sqrt(vec a) { return _mm512_sqrt_ps(a); }
  static vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }

  // Integer rounding exactly like float_to_bf16 (reduce.cpp); the AVX512-BF16 instruction
  // would flush subnormals to zero.
  static void store_bf16(uint16_t* out, vec x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    __m256i h = _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  }

  // The hardware conversion rounds to nearest even like float_to_f16; only NaNs differ (it keeps
  // the payload), so they become the canonical sign|0x7e00.
  static void store_f16(uint16_t* out, vec x) {
    __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i nan =
        _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
    __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<int16_t>(0x8000)));
    __m256i canonical = _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_blendv_epi8(h, canonical, nan));
  }
};

}  // namespace

void adam_avx512(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
                 Precision16 copy, void* copy_out) {
  adam<Avx512>(p, g, m, v, n, c, copy, copy_out);
}

void sgd_avx512(float* p, const float* g, float* buffer, std::size_t n, const SgdCoefficients& c) {
  sgd<Avx512>(p, g, buffer, n, c);
}

}  // namespace troupe::kernels::detail
