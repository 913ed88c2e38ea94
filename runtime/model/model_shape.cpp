#include "runtime/model/model_shape.hpp"

#include <fmt/format.h>

#include "runtime/config/resolve.hpp"

namespace troupe {

namespace {

using Counts = std::vector<std::size_t>;

// As GptBlock registers them: LayerNorm (weight, bias), qkv, attention projection,
// LayerNorm, MLP in, MLP out (each Linear weight, bias); under tensor parallelism the
// LayerNorms and the row-parallel biases (projection, MLP out) are whole.
Counts gpt_block(std::size_t d, std::size_t ff, std::size_t t) {
  return {d, d, 3 * d / t * d, 3 * d / t, d * d / t, d, d, d, ff / t * d, ff / t, d * ff / t, d};
}

// As LlamaBlock registers them: RMSNorm, q, k, v, o, RMSNorm, gate, up, down (no biases);
// the RMSNorms whole under tensor parallelism.
Counts llama_block(const ModelConfig& model, std::size_t d, std::size_t ff, std::size_t t) {
  const auto width = d / static_cast<std::size_t>(model.n_heads);
  const auto q = static_cast<std::size_t>(model.n_heads) * width / t * d;
  const auto kv =
      static_cast<std::size_t>(model.n_kv_heads > 0 ? model.n_kv_heads : model.n_heads) * width / t * d;
  return {d, q, kv, kv, q, d, ff / t * d, ff / t * d, d * ff / t};
}

}  // namespace

ModelShape model_shape(const ModelConfig& model, int64_t tp) {
  const bool gpt = model.type != "llama";
  auto d = static_cast<std::size_t>(model.d_model);
  auto ff = static_cast<std::size_t>(model.d_ff > 0 ? model.d_ff : 4 * model.d_model);
  auto vocab = static_cast<std::size_t>(model.vocab_size);
  auto t = static_cast<std::size_t>(tp);  // split tensors hold 1/tp of their rows or columns
  ModelShape shape;
  if (gpt)
    shape.layers.push_back({vocab / t * d, static_cast<std::size_t>(model.seq_len) * d});  // token, position
  else
    shape.layers.push_back({vocab / t * d});  // token; the positions are rotary
  const Counts block = gpt ? gpt_block(d, ff, t) : llama_block(model, d, ff, t);
  for (int64_t i = 0; i < model.n_layers; ++i) shape.layers.push_back(block);
  const Counts norm = gpt ? Counts{d, d} : Counts{d};  // LayerNorm (weight, bias) or RMSNorm
  shape.layers.push_back(norm);
  if (!model.tie_embeddings) shape.layers.back().push_back(vocab / t * d);  // else the token embedding
  shape.borrowed.resize(shape.layers.size());
  if (model.tie_embeddings) shape.borrowed.back().push_back(0);
  for (const auto& layer : shape.layers)
    for (std::size_t count : layer) shape.parameters += static_cast<int64_t>(count);
  return shape;
}

Status check_model_pipeline(const JobConfig& job) {
  TROUPE_TRY(check_pipeline_layers(job, job.model.n_layers + 2,
                                   job.model.type == "llama" ? "the [model] LLaMA" : "the [model] GPT"));
  return {};
}

}  // namespace troupe
