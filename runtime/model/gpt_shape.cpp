#include "runtime/model/gpt_shape.hpp"

#include <fmt/format.h>

#include "runtime/config/resolve.hpp"

namespace troupe {

GptShape gpt_shape(const ModelConfig& model) {
  auto d = static_cast<std::size_t>(model.d_model);
  auto ff = static_cast<std::size_t>(model.d_ff > 0 ? model.d_ff : 4 * model.d_model);
  auto vocab = static_cast<std::size_t>(model.vocab_size);
  GptShape shape;
  shape.layers.push_back({vocab * d, static_cast<std::size_t>(model.seq_len) * d});  // token, position
  // As GptBlock registers them: LayerNorm (weight, bias), qkv, attention projection,
  // LayerNorm, MLP in, MLP out (each Linear weight, bias).
  std::vector<std::size_t> block{d, d, 3 * d * d, 3 * d, d * d, d, d, d, ff * d, ff, d * ff, d};
  for (int64_t i = 0; i < model.n_layers; ++i) shape.layers.push_back(block);
  if (model.tie_embeddings)
    shape.layers.push_back({d, d});  // the final LayerNorm; the projection is the token embedding
  else
    shape.layers.push_back({d, d, vocab * d});
  shape.borrowed.resize(shape.layers.size());
  if (model.tie_embeddings) shape.borrowed.back().push_back(0);
  for (const auto& layer : shape.layers)
    for (std::size_t count : layer) shape.parameters += static_cast<int64_t>(count);
  return shape;
}

Status check_gpt_pipeline(const JobConfig& job) {
  TROUPE_TRY(check_pipeline_layers(job, job.model.n_layers + 2, "the [model] GPT"));
  return {};
}

}  // namespace troupe
