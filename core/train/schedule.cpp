#include "core/train/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "core/util/error.hpp"

namespace dpft::train {

void validate(const ScheduleOptions& o) {
  DPFT_CHECK_AS(ConfigError, std::isfinite(o.lr) && o.lr >= 0,
                "train.lr = {} must be finite and >= 0", o.lr);
  DPFT_CHECK_AS(ConfigError, o.warmup_ratio >= 0 && o.warmup_ratio <= 1,
                "train.warmup_ratio = {} must be in [0, 1]", o.warmup_ratio);
  DPFT_CHECK_AS(ConfigError, o.total_steps >= 1, "train.steps = {} must be >= 1", o.total_steps);
}

int64_t warmup_steps(const ScheduleOptions& o) {
  validate(o);
  double x = o.warmup_ratio * static_cast<double>(o.total_steps);
  double r = std::round(x);
  if (std::fabs(x - r) <= 1e-9 * std::max(1.0, x)) return static_cast<int64_t>(r);
  return static_cast<int64_t>(std::ceil(x));
}

double lr_at(const ScheduleOptions& o, int64_t step) {
  int64_t w = warmup_steps(o);
  const int64_t t = o.total_steps;
  DPFT_CHECK(step >= 0 && step < t, "schedule step {} is outside [0, {})", step, t);
  if (step < w) return o.lr * static_cast<double>(step + 1) / static_cast<double>(w);
  if (o.kind == Schedule::kConstant) return o.lr;
  double span = static_cast<double>(t - w);  // >= 1 here since w <= step < t
  double progress = static_cast<double>(step - w) / span;
  if (o.kind == Schedule::kLinear) return o.lr * static_cast<double>(t - step) / span;
  return o.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace dpft::train
