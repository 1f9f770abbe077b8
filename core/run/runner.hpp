// Executes one experiment: run directory, resolved config, manifest, log file, the method (as
// hooks: core knows no method; methods/run.hpp supplies them), metrics.json; maps interruption
// (SIGINT/SIGTERM) and failures to a recorded status.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"
#include "core/run/privacy_lock.hpp"
#include "core/run/run_context.hpp"

namespace dpft {

// `dpft select`'s marks in a trial's run directory: the trial (written first) and, in the
// winner's only, the selection's output (methods/select/select.hpp).
inline constexpr const char* kSelectionTrialFile = "selection_trial.json";
inline constexpr const char* kSelectionFile = "selection.json";

struct RunOptions {
  std::string out_dir;       // overrides spec.output.dir when non-empty (--out)
  std::string command_line;  // recorded in manifest.json
  std::string resume_dir;    // continue this run (its config.resolved.yaml is the spec)
  int64_t stop_after = 0;    // stop (with a checkpoint) after this many steps of this invocation
  // A trial of `dpft select` ({"selection": its directory}; null otherwise): written to the run
  // directory as selection_trial.json before anything else, so that `dpft export` refuses the
  // run unless the selection chose it (and then exports it with the selection's epsilon).
  nlohmann::json selection_trial;
  // The run directory's name instead of <time>-s<seed> ("" = that default): dpft select names
  // its trials at random, so that the winner's exported run id tells neither when it ran nor
  // how many trials came before it.
  std::string run_name;
};

struct RunResult {
  int exit_code = 0;  // 0 ok, 130/143 interrupted (failures throw)
  std::string run_dir;
  std::string status;  // ok | interrupted | stopped (--stop-after; resume later)
};

// What the runner needs from the methods layer (methods/run.hpp builds it from the registry).
struct RunHooks {
  // Called once, before the run directory is created (or reopened): loads what the method needs
  // and returns the DP releases the whole run will make and the settings they rest on; a fresh
  // run whose plan exceeds privacy.epsilon is refused here, before anything is written or
  // released, and a resumed run whose plan differs from its privacy_lock.json is refused.
  std::function<RunPlan()> plan;
  // The method itself; returns its blocks for metrics.json. Every release goes through ctx.privacy
  // (its mechanisms record it).
  std::function<nlohmann::json(RunContext&)> run;
};

RunResult run_experiment(const Spec& spec, const RunHooks& hooks, const RunOptions& opts);

// Throws ConfigError when this build or machine cannot execute the spec as written:
// `device: cuda[:N]` without a CUDA LibTorch or without that GPU; `model.dtype: float16` on the
// CPU, which has no float16 kernels. Called by run_experiment and by `dpft run --dry-run`;
// `dpft config validate` warns.
void check_executable(const Spec& spec);

// For --resume: the spec unchanged if this machine can execute it, else moved to the CPU (and
// float16 to float32), with a warning: a run an older dpft started with device: cuda ran on
// the CPU, and a run started on a GPU may continue on a machine without one.
Spec resumable_here(Spec spec);

// The manifest fields that do not depend on the run's outcome.
nlohmann::json base_manifest(const Spec& spec, const std::string& command_line);

}  // namespace dpft
