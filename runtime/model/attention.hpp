// Causal self-attention as one call, shared by every model family and the tensor-parallel
// layers: LibTorch 2's scaled_dot_product_attention, which picks the flash or
// memory-efficient kernel on a GPU and the fused flash kernel on a CPU, so the [B,H,T,T]
// score matrix is never materialized (nor saved for backward).
#pragma once

#include <torch/types.h>

namespace troupe {

/// softmax(q·kᵀ/√D + causal mask)·v per head. q [B,H,T,D]; k and v [B,Hkv,T,D] where Hkv
/// divides H (grouped-query attention: each key/value head serves H/Hkv query heads) ->
/// [B,H,T,D].
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

/// The same function written out as matrix products, a mask and a softmax: the definition
/// causal_attention is tested against.
torch::Tensor causal_attention_explicit(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v);

}  // namespace troupe
