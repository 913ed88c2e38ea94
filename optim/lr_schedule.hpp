// Learning-rate schedules, DeepSpeed's four, with its keys, defaults and formulas
// ([scheduler] type and params; the reference for each is DeepSpeed's lr_schedules.py):
//
//   WarmupLR:       warmup_min_lr → warmup_max_lr (default: the optimizer's lr) over
//                   warmup_num_steps, logarithmically (ln(it + 1) / ln(W)) or linearly
//                   (it / W), then held.
//   WarmupDecayLR:  the same warm-up (warmup_max_lr defaults to 0.001), then linearly back
//                   down to warmup_min_lr at total_num_steps, and held there.
//   WarmupCosineLR: the optimizer's lr times a ratio: warmup_min_ratio → 1 over the warm-up,
//                   then a half cosine down to cos_min_ratio, reached at total_num_steps − 1.
//   OneCycle:       cycle_min_lr up to cycle_max_lr over cycle_first_step_size, back down over
//                   cycle_second_step_size (optionally in stairs), then decaying as
//                   min / (1 + decay_lr_rate · d / decay_step_size); Adam's beta1 cycles the
//                   other way between cycle_max_mom and cycle_min_mom, and beta2 is 0.99.
//
// DeepSpeed steps its schedule after each optimizer update that was not skipped, starting
// from iteration −1, so the update after `applied` updates runs at the schedule's value for
// iteration applied − 1: the first at the value set at construction (warmup_min_lr, 0 for
// WarmupCosineLR, cycle_min_lr), the second at iteration 0. for_update() says that.
// W is at least 2 (DeepSpeed raises smaller warm-ups to 2).
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace troupe {

/// [scheduler] type: none (a constant rate) or one of DeepSpeed's four schedules.
enum class LrScheduleType { constant, warmup_lr, warmup_decay_lr, warmup_cosine_lr, one_cycle };
/// How a warm-up rises: ln(it + 1) / ln(W), or it / W.
enum class WarmupType { log, linear };

/// DeepSpeed's spelling of each: "" (constant), "WarmupLR", ..., "OneCycle"; "log", "linear".
const char* lr_schedule_name(LrScheduleType type);
const char* warmup_type_name(WarmupType type);
/// WarmupLR, WarmupDecayLR and WarmupCosineLR start with a warm-up.
inline bool warms_up(LrScheduleType type) {
  return type == LrScheduleType::warmup_lr || type == LrScheduleType::warmup_decay_lr ||
         type == LrScheduleType::warmup_cosine_lr;
}

struct LrScheduleOptions {
  LrScheduleType type = LrScheduleType::constant;
  // WarmupLR, WarmupDecayLR
  double warmup_min_lr = 0;
  std::optional<double> warmup_max_lr;  ///< unset: WarmupLR the optimizer's lr, WarmupDecayLR 0.001
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::log;
  int64_t total_num_steps = -1;  ///< WarmupDecayLR, WarmupCosineLR: required
  // WarmupCosineLR
  double warmup_min_ratio = 0;
  double cos_min_ratio = 1e-4;
  // OneCycle
  std::optional<double> cycle_min_lr, cycle_max_lr;  ///< required
  double decay_lr_rate = 0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  ///< unset: the first
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  ///< unset: the first
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
};

/// What one optimizer update runs with where it differs from the optimizer's configured
/// hyper-parameters (empty: as configured).
struct UpdateHyper {
  std::optional<double> lr, beta1, beta2;
};

class LrSchedule {
 public:
  /// `optimizer_lr`: the optimizer's configured rate; `has_betas`: Adam or AdamW (OneCycle
  /// cycles beta1 only then). An error names the key and what it may be; `warnings` gets
  /// what DeepSpeed only warns about (total_num_steps below the warm-up).
  static Result<LrSchedule> make(const LrScheduleOptions& options, double optimizer_lr, bool has_betas,
                                 std::vector<std::string>* warnings = nullptr);

  /// The schedule's value at DeepSpeed's iteration `it` (−1: as constructed).
  UpdateHyper at(int64_t it) const;
  /// The update after `applied` non-skipped updates: at(applied − 1).
  UpdateHyper for_update(int64_t applied) const { return at(applied - 1); }
  bool constant() const { return o_.type == LrScheduleType::constant; }

 private:
  LrSchedule(const LrScheduleOptions& options, double optimizer_lr, bool has_betas);
  double warmup_fraction(int64_t it) const;
  UpdateHyper one_cycle(int64_t it) const;

  LrScheduleOptions o_;
  double optimizer_lr_;
  bool has_betas_;
  int64_t warmup_ = 2;  // W, at least 2
};

}  // namespace troupe
