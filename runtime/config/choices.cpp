#include "runtime/config/choices.hpp"

namespace troupe {

// Each table lists the spellings in the order of the enum's values.
template <>
const std::vector<std::string>& choice_names<DeviceKind>() {
  static const std::vector<std::string> names = {"cpu", "cuda"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<Topology>() {
  static const std::vector<std::string> names = {"auto", "flat", "two_level"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<pipeline::GridOrder>() {
  static const std::vector<std::string> names = {pipeline::grid_order_name(pipeline::GridOrder::pp_fastest),
                                                 pipeline::grid_order_name(pipeline::GridOrder::dp_fastest)};
  return names;
}

template <>
const std::vector<std::string>& choice_names<PartitionMethod>() {
  static const std::vector<std::string> names = {"flops", "uniform", "parameters", "profile"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<OffloadTier>() {
  static const std::vector<std::string> names = {"none", "cpu", "nvme"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<DirectIo>() {
  static const std::vector<std::string> names = {"prefer", "require", "off"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<OptimizerType>() {
  static const std::vector<std::string> names = {"adamw", "adam", "sgd"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<Dtype>() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  return names;
}

// DeepSpeed's spellings, which optim/ keeps for its own messages.
template <>
const std::vector<std::string>& choice_names<LrScheduleType>() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (auto t : {LrScheduleType::constant, LrScheduleType::warmup_lr, LrScheduleType::warmup_decay_lr,
                   LrScheduleType::warmup_cosine_lr, LrScheduleType::one_cycle})
      all.push_back(lr_schedule_name(t));
    return all;
  }();
  return names;
}

template <>
const std::vector<std::string>& choice_names<WarmupType>() {
  static const std::vector<std::string> names = {warmup_type_name(WarmupType::log),
                                                 warmup_type_name(WarmupType::linear)};
  return names;
}

}  // namespace troupe
