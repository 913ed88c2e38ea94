// The AVX2 path of the fused optimizer steps: 8 floats a vector. Compiled with -mavx2 -mfma
// -mf16c -ffp-contract=off, so the only fused multiply-adds are the explicit ones in the loops
// (optimizer_loops.hpp), and with nothing but intrinsics and memcpy (see optimizer_simd.hpp).
#include <immintrin.h>

#include "kernels/cpu/optimizer_loops.hpp"

namespace troupe::kernels::detail {
namespace {

struct Avx2 {
  using vec = __m256;
  static constexpr std::size_t lanes = 8;
  static vec load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* x, vec a) { _mm256_storeu_ps(x, a); }
  static vec set1(float x) { return _mm256_set1_ps(x); }
  static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
  static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
  static vec div(vec a, vec b) { return _mm256_div_ps(a, b); }
  static vec sqrt(vec a) { return _mm256_sqrt_ps(a); }
  static vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }

  // Integer rounding exactly like float_to_bf16 (reduce.cpp), then the 32-bit lanes (each
  // ≤ 0xffff, so saturation never applies) packed to 16 bits.
  static void store_bf16(uint16_t* out, vec x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
  }

  // The F16C conversion rounds to nearest even like float_to_f16; only NaNs differ (it keeps
  // the payload), so they become the canonical sign|0x7e00.
  static void store_f16(uint16_t* out, vec x) {
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    __m128i sign = _mm_and_si128(h, _mm_set1_epi16(static_cast<int16_t>(0x8000)));
    __m128i canonical = _mm_or_si128(sign, _mm_set1_epi16(0x7e00));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_blendv_epi8(h, canonical, nan));
  }
};

}  // namespace

void adam_avx2(float* p, const float* g, float* m, float* v, std::size_t n, const AdamCoefficients& c,
               Precision16 copy, void* copy_out) {
  adam<Avx2>(p, g, m, v, n, c, copy, copy_out);
}

void sgd_avx2(float* p, const float* g, float* buffer, std::size_t n, const SgdCoefficients& c) {
  sgd<Avx2>(p, g, buffer, n, c);
}

}  // namespace troupe::kernels::detail
