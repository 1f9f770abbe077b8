// Shared method behaviour: the per-step release plan of StepReleaseMethod.
#include "methods/method.hpp"

#include "core/config/spec.hpp"
#include "core/util/error.hpp"

namespace dpft {

std::vector<privacy::Release> StepReleaseMethod::plan(const Spec& spec, int64_t dataset_size) {
  train::DpSettings dp = train::resolve_dp(spec, dataset_size);
  set_noise_std(dp, spec);
  dp_ = dp;
  return {dp.release(spec.train.steps)};
}

const train::DpSettings& StepReleaseMethod::dp() const {
  DPFT_CHECK(dp_.has_value(), "{}: the DP settings are read before plan() resolved them", name());
  return *dp_;
}

void check_task(const Method& m, const Spec& spec) {
  DPFT_CHECK_AS(ConfigError, spec.data.task != "classification" || m.trains_classifiers(),
                "method {} trains language models only (it generates or scores text); "
                "data.task: classification runs with sgd or dp-sgd",
                m.name());
}

}  // namespace dpft
