#include "runtime/model/gpt_shape.hpp"

#include <fmt/format.h>

#include "runtime/config/resolve.hpp"

namespace troupe {

GptShape gpt_shape(const ModelConfig& model, int64_t tp) {
  auto d = static_cast<std::size_t>(model.d_model);
  auto ff = static_cast<std::size_t>(model.d_ff > 0 ? model.d_ff : 4 * model.d_model);
  auto vocab = static_cast<std::size_t>(model.vocab_size);
  auto t = static_cast<std::size_t>(tp);  // split tensors hold 1/tp of their rows or columns
  GptShape shape;
  shape.layers.push_back({vocab / t * d, static_cast<std::size_t>(model.seq_len) * d});  // token, position
  // As GptBlock registers them: LayerNorm (weight, bias), qkv, attention projection,
  // LayerNorm, MLP in, MLP out (each Linear weight, bias); under tensor parallelism the
  // LayerNorms and the row-parallel biases (projection, MLP out) are whole.
  std::vector<std::size_t> block{d, d, 3 * d / t * d, 3 * d / t, d * d / t,  d,
                                 d, d, ff / t * d,    ff / t,    d * ff / t, d};
  for (int64_t i = 0; i < model.n_layers; ++i) shape.layers.push_back(block);
  if (model.tie_embeddings)
    shape.layers.push_back({d, d});  // the final LayerNorm; the projection is the token embedding
  else
    shape.layers.push_back({d, d, vocab / t * d});
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
