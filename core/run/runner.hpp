// Executes one experiment: run directory, resolved config, manifest, log file, the method,
// metrics.json; maps interruption (SIGINT/SIGTERM) and failures to a recorded status.
#pragma once
#include <string>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"

namespace dpft {

struct RunOptions {
  std::string out_dir;       // overrides spec.output.dir when non-empty (--out)
  std::string command_line;  // recorded in manifest.json
  std::string resume_dir;    // continue this run (its config.resolved.yaml is the spec)
  int64_t stop_after = 0;    // stop (with a checkpoint) after this many steps of this invocation
};

struct RunResult {
  int exit_code = 0;  // 0 ok, 130/143 interrupted (failures throw)
  std::string run_dir;
  std::string status;  // ok | interrupted | stopped (--stop-after; resume later)
};

RunResult run_experiment(const Spec& spec, const RunOptions& opts);

// Throws ConfigError when this build cannot execute the spec as written: every method runs on
// the CPU in float32 today, so `device: cuda[:N]` is refused rather than silently run on the
// CPU, and so is a `model.dtype` other than float32. Called by run_experiment (not when
// resuming: a run started by an older dpft that accepted such a spec ran on the CPU and
// continues there, with a warning) and by `dpft run --dry-run`; `dpft config validate` warns.
void check_executable(const Spec& spec);

// The ledger settings of a spec's privacy block (accountant, delta, target epsilon, eps_error).
privacy::LedgerOptions ledger_options(const Spec& spec);

// The manifest fields that do not depend on the run's outcome.
nlohmann::json base_manifest(const Spec& spec, const std::string& command_line);

}  // namespace dpft
