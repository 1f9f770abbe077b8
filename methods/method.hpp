// The interface every fine-tuning method implements (one method per file in methods/).
//
// A method owns its spec block: `method: {name: X, ...}`. The core hands the block (without
// `name`) to configure(), which reads it through Fields (so unknown keys are rejected with
// suggestions) and validates it; options_yaml() returns the resolved options for
// `dpft config dump` and config.resolved.yaml. run() trains/evaluates and returns the method's
// own block for metrics.json. A method never computes epsilon itself: every DP release goes to
// the run's PrivacyLedger (core/privacy), which is the only place epsilon is computed.
#pragma once
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/privacy/ledger.hpp"

namespace dpft {

class Fields;
struct RunContext;
struct Spec;

// What planning needs to know beyond the spec (e.g. the private data set's size).
struct PlanInputs {
  int64_t dataset_size = 0;  // 0 = unknown
};

class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;
  // The label reports print for runs of this configuration (e.g. "PE-SGD-FixSample"); the
  // spec's top-level `label` overrides it.
  virtual std::string label() const { return name(); }
  // Read and validate the method's options (called once, during spec parsing).
  virtual void configure(Fields& options) = 0;
  // The resolved options, every key with its value (defaults included).
  virtual YAML::Node options_yaml() const = 0;
  // The DP releases a run of this spec will make, for `dpft account --spec` and for the
  // ledger's budget check before training. Methods that release nothing return {}.
  virtual std::vector<privacy::Release> planned_releases(const Spec& spec,
                                                         const PlanInputs& in) const {
    return {};
  }
  // Run the method. Long loops poll dpft::interrupted() and return early when it is set.
  virtual nlohmann::json run(RunContext& ctx) = 0;
};

// Base of the methods that make one subsampled Gaussian release per step (dp-sgd, sft+dp-sgd
// and the projection methods): T = train.steps releases at the q and sigma resolve_dp gives.
class StepReleaseMethod : public Method {
 public:
  std::vector<privacy::Release> planned_releases(const Spec& spec,
                                                 const PlanInputs& in) const override;
};

}  // namespace dpft
