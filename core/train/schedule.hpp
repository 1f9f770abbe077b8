// Learning-rate schedules: the learning rate of each optimizer step.
//
// W = ceil(warmup_ratio * total_steps) warmup steps (as HF TrainingArguments.get_warmup_steps;
// a product within 1e-9 of an integer counts as that integer, so 0.1 * 30 gives 3, not 4).
// Step s (0-based) gets lr * m(s) with
//   warmup, s < W:        m = (s + 1) / W
//   then, s >= W:         constant: m = 1
//                         linear:   m = (T - s) / (T - W)                 (reaches 0 at s = T)
//                         cosine:   m = 0.5 * (1 + cos(pi * (s - W) / (T - W)))  (0 at s = T)
// where T = total_steps. After warmup this is exactly HF transformers'
// get_linear_schedule_with_warmup / get_cosine_schedule_with_warmup (num_cycles 0.5) evaluated
// at step s. The warmup differs from HF's s / W by one step: HF gives step 0 the learning rate
// 0, which under DP spends a step's privacy budget for no update; here step W - 1 reaches the
// peak and step 0 gets lr / W.
#pragma once
#include <cstdint>

#include "core/config/train_modes.hpp"

namespace dpft::train {

struct ScheduleOptions {
  Schedule kind = Schedule::kConstant;  // the decay after warmup
  double lr = 1e-3;               // peak learning rate, finite, >= 0
  double warmup_ratio = 0;        // fraction of total_steps with linear warmup, [0, 1]
  int64_t total_steps = 1;        // >= 1
};

// Throws ConfigError naming the train.* key when an option is out of range.
void validate(const ScheduleOptions& o);
// Number of warmup steps W.
int64_t warmup_steps(const ScheduleOptions& o);
// The learning rate of step `step` (0-based, in [0, total_steps)).
double lr_at(const ScheduleOptions& o, int64_t step);

}  // namespace dpft::train
