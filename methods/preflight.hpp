// The pre-flight of `dpft run --dry-run` and `dpft config validate`: what a run of a spec would
// fail on first, found without loading the model's weights or training anything. It opens the
// model directory (config.json, the weights' index, the tokenizer) and checks the task fits the
// model's head and the peft targets name its modules; reads every data file as the run would
// (columns, labels, UTF-8, blank rows) and counts the private units N; converts train.epochs
// and privacy.delta: auto for that N; plans the releases (sigma calibrated to the budget); and
// logs the warnings a run would (q capped at 1, fewer than 50 units, eval rows that are also
// training rows). Errors are those of the run, with its exit codes.
#pragma once
#include <string>
#include <vector>

#include "core/config/spec.hpp"

namespace dpft {

struct PreflightReport {
  Spec resolved;      // targets, steps and delta as the run would resolve them
  int64_t units = 0;  // N, the private units counted (0: the method reads none)
  std::vector<std::string>
      lines;  // what was checked, one line each ("model ...", "data.train ...")
};

PreflightReport preflight(const Spec& spec);

// `spec` (another privacy.epsilon, say) resolved as `report`'s was (targets, epochs and delta
// for the N it counted), its releases planned with sigma calibrated. ConfigError as the run
// would refuse it.
Spec plan_as_counted(const Spec& spec, const PreflightReport& report);

}  // namespace dpft
