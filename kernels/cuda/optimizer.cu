#include "kernels/cuda/optimizer.cuh"

#include <cstdint>

#include "kernels/cpu/optimizer_simd.hpp"
#include "kernels/cuda/rounding.cuh"

namespace troupe::kernels::cuda {
namespace {

using detail::AdamCoefficients;
using detail::WeightDecay;

constexpr int kThreads = 256;
constexpr std::size_t kTile = 16384;  // elements per block
// The launch's table travels as kernel parameters: up to 32 KiB on Volta and later with
// CUDA 12.1+ (about 13 KiB here), enough tiles per launch to fill an H200's 132 SMs.
constexpr int kChunksPerLaunch = 64;
constexpr int kTilesPerLaunch = 2048;

struct LaunchTable {
  AdamChunk chunks[kChunksPerLaunch];
  uint8_t chunk_of[kTilesPerLaunch];
  uint32_t tile_of[kTilesPerLaunch];
};
static_assert(sizeof(LaunchTable) + sizeof(detail::AdamCoefficients) < 32000, "kernel parameters fit 32 KiB");

// Per element, the CPU's order: p·decay (AdamW) or g + wd·p (Adam); m = fma(g, 1−β1, m·β1);
// v = fma((1−β2)·g, g, v·β2); p = p + (−step·m) / (sqrt(v)/sqrt(bc2) + eps).
template <WeightDecay mode, Precision16 copy>
__global__ void adam_kernel(LaunchTable table, AdamCoefficients c) {
  const AdamChunk& chunk = table.chunks[table.chunk_of[blockIdx.x]];
  std::size_t begin = static_cast<std::size_t>(table.tile_of[blockIdx.x]) * kTile;
  std::size_t end = begin + kTile < chunk.count ? begin + kTile : chunk.count;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float p = chunk.parameters[i], g = chunk.gradients[i], m = chunk.exp_avg[i], v = chunk.exp_avg_sq[i];
    if constexpr (mode == WeightDecay::decoupled) p = __fmul_rn(p, c.decay);
    if constexpr (mode == WeightDecay::l2) g = __fmaf_rn(p, c.weight_decay, g);
    m = __fmaf_rn(g, c.one_minus_beta1, __fmul_rn(m, c.beta1));
    v = __fmaf_rn(__fmul_rn(c.one_minus_beta2, g), g, __fmul_rn(v, c.beta2));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.sqrt_bias_correction2), c.eps);
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(c.neg_step_size, m), denom));
    chunk.parameters[i] = p;
    chunk.exp_avg[i] = m;
    chunk.exp_avg_sq[i] = v;
    if constexpr (copy == Precision16::bf16) static_cast<uint16_t*>(chunk.copy_out)[i] = narrow_bf16(p);
    if constexpr (copy == Precision16::f16) static_cast<uint16_t*>(chunk.copy_out)[i] = to_f16_bits(p);
  }
}

template <WeightDecay mode>
void launch(const LaunchTable& table, int tiles, const AdamCoefficients& c, Precision16 copy,
            cudaStream_t s) {
  switch (copy) {
    case Precision16::none:
      return adam_kernel<mode, Precision16::none><<<tiles, kThreads, 0, s>>>(table, c);
    case Precision16::bf16:
      return adam_kernel<mode, Precision16::bf16><<<tiles, kThreads, 0, s>>>(table, c);
    case Precision16::f16:
      return adam_kernel<mode, Precision16::f16><<<tiles, kThreads, 0, s>>>(table, c);
  }
}

void launch(const LaunchTable& table, int tiles, const AdamCoefficients& c, Precision16 copy,
            cudaStream_t s) {
  switch (c.weight_decay_mode) {
    case WeightDecay::none:
      return launch<WeightDecay::none>(table, tiles, c, copy, s);
    case WeightDecay::decoupled:
      return launch<WeightDecay::decoupled>(table, tiles, c, copy, s);
    case WeightDecay::l2:
      return launch<WeightDecay::l2>(table, tiles, c, copy, s);
  }
}

}  // namespace

cudaError_t adam_step(const AdamChunk* chunks, std::size_t chunk_count, const AdamParams& params,
                      Precision16 copy, cudaStream_t stream) {
  AdamCoefficients c = detail::adam_coefficients(params);
  LaunchTable table{};
  int used = 0, tiles = 0;
  auto flush = [&] {
    if (tiles > 0) launch(table, tiles, c, copy, stream);
    used = tiles = 0;
  };
  for (std::size_t k = 0; k < chunk_count; ++k) {
    if (chunks[k].count == 0) continue;
    if (used == kChunksPerLaunch) flush();
    table.chunks[used] = chunks[k];
    std::size_t chunk_tiles = (chunks[k].count + kTile - 1) / kTile;
    for (std::size_t t = 0; t < chunk_tiles; ++t) {
      if (tiles == kTilesPerLaunch) {  // the chunk continues in the next launch
        flush();                       // (used = 0)
        table.chunks[0] = chunks[k];
      }
      table.chunk_of[tiles] = static_cast<uint8_t>(used);
      table.tile_of[tiles] = static_cast<uint32_t>(t);
      ++tiles;
    }
    ++used;
  }
  flush();
  return cudaGetLastError();
}

}  // namespace troupe::kernels::cuda
