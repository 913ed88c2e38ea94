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
  static const std::vector<std::string> names = {"pp,dp", "dp,pp"};
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

}  // namespace troupe
