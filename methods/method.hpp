// The interface every fine-tuning method implements (one method per file in methods/).
//
// A method owns its spec block: `method: {name: X, ...}`. The core hands the block (without
// `name`) to configure(), which reads it through Fields (so unknown keys are rejected with
// suggestions) and validates it; options_yaml() returns the resolved options for
// `dpft config dump` and config.resolved.yaml. run() trains/evaluates and returns the method's
// own block for metrics.json. A method never computes epsilon itself: every DP release goes to
// the run's PrivacyLedger (core/privacy), which is the only place epsilon is computed.
#pragma once
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <string>

namespace dpft {

class Fields;
struct RunContext;

class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;
  // Read and validate the method's options (called once, during spec parsing).
  virtual void configure(Fields& options) = 0;
  // The resolved options, every key with its value (defaults included).
  virtual YAML::Node options_yaml() const = 0;
  // Run the method. Long loops poll dpft::interrupted() and return early when it is set.
  virtual nlohmann::json run(RunContext& ctx) = 0;
};

}  // namespace dpft
