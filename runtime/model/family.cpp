#include "runtime/model/family.hpp"

#include "runtime/model/gpt.hpp"
#include "runtime/model/gpt_tensor_parallel.hpp"
#include "runtime/model/llama.hpp"
#include "runtime/model/llama_tensor_parallel.hpp"

namespace troupe {

torch::nn::Sequential make_model(const ModelConfig& model) {
  return model.type == "llama" ? make_llama(model) : make_gpt(model);
}

torch::nn::Sequential make_tensor_parallel_model(const ModelConfig& model,
                                                 const std::shared_ptr<TensorParallelGroup>& group) {
  return model.type == "llama" ? make_tensor_parallel_llama(model, group)
                               : make_tensor_parallel_gpt(model, group);
}

torch::nn::Sequential split_tensor_parallel_model(const torch::nn::Sequential& full, const ModelConfig& model,
                                                  const std::shared_ptr<TensorParallelGroup>& group) {
  return model.type == "llama" ? split_tensor_parallel_llama(full, model, group)
                               : split_tensor_parallel_gpt(full, model, group);
}

}  // namespace troupe
