// Shared method behaviour: the per-step release plan of StepReleaseMethod.
#include "methods/method.hpp"

#include "core/train/dp_settings.hpp"

namespace dpft {

std::vector<privacy::Release> StepReleaseMethod::planned_releases(const Spec& spec,
                                                                  const PlanInputs& in) const {
  return train::planned_step_releases(spec, in.dataset_size);
}

}  // namespace dpft
