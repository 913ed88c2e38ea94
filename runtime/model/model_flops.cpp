#include "runtime/model/model_flops.hpp"

#include <numeric>

#include "runtime/model/model_shape.hpp"

namespace troupe {

std::vector<LayerFlops> model_layer_flops(const ModelConfig& model, int64_t batch, int64_t seq, int64_t tp) {
  const ModelShape shape = model_shape(model, tp);
  const double tokens = static_cast<double>(batch * seq);
  const double d = static_cast<double>(model.d_model);
  const double ff = static_cast<double>(model.d_ff > 0 ? model.d_ff : 4 * model.d_model);
  const double vocab = static_cast<double>(model.vocab_size);
  const double t = static_cast<double>(tp);
  auto product = [&](double in, double out) { return 2 * tokens * in * out; };  // [tokens, in]·[in, out]
  std::vector<LayerFlops> layers;
  auto owned = [&](std::size_t layer) {
    const auto& counts = shape.layers[layer];
    return static_cast<int64_t>(std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
  };
  // The embedding looks rows up: no product, and no input gradient to compute.
  layers.push_back(LayerFlops{"embedding", owned(0), 0, 0});
  // A block: q/k/v (LLaMA's k and v n_kv_heads wide), scores q·kᵀ and their weighted sum
  // of v (each 2·s·d per token over the heads), the output projection, and the MLP (GPT's
  // in and out; LLaMA's gate, up and down).
  const double kv = d * static_cast<double>(model.n_kv_heads > 0 ? model.n_kv_heads : model.n_heads) /
                    static_cast<double>(model.n_heads);
  const bool llama = model.type == "llama";
  const double block = product(d, (d + 2 * kv) / t) + 2 * 2 * tokens * static_cast<double>(seq) * d / t +
                       product(d / t, d) + (llama ? 2 : 1) * product(d, ff / t) + product(ff / t, d);
  for (int64_t i = 0; i < model.n_layers; ++i)
    layers.push_back(
        LayerFlops{"block" + std::to_string(i), owned(static_cast<std::size_t>(i + 1)), block, 2 * block});
  const double head = product(d, vocab / t);
  layers.push_back(LayerFlops{"head", owned(shape.layers.size() - 1), head, 2 * head});
  return layers;
}

std::vector<double> model_layer_costs(const JobConfig& job) {
  std::vector<double> costs;
  for (const LayerFlops& l :
       model_layer_flops(job.model, job.batch.micro_batch_size, job.model.seq_len, job.parallel.tp))
    costs.push_back(l.forward + l.backward);
  return costs;
}

}  // namespace troupe
