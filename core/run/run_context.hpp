// What a method sees of the run it executes in: the resolved spec, the run directory (events,
// artefacts), the privacy ledger, where every DP release must be recorded, and the run's
// private randomness, the only source of its noise and Poisson batches
// (core/privacy/randomness.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"
#include "core/privacy/randomness.hpp"
#include "core/run/run_dir.hpp"

namespace dpft {

struct RunContext {
  const Spec& spec;
  RunDir& dir;
  privacy::PrivacyLedger& ledger;
  const privacy::PrivateRandomness& randomness;
  bool resume = false;  // continue from <dir>/checkpoint when present
  int64_t stop_after =
      0;                 // > 0: stop after this many steps of this invocation, leaving a checkpoint
  bool stopped = false;  // set by the method when it stopped early that way (status "stopped")
  // The run's privacy lock (core/run/privacy_lock.hpp): checkpoints carry it and its integrity
  // hash, and a checkpoint with another lock is refused.
  nlohmann::json privacy_lock;
  // Set by the method once its outputs are complete (adapter saved, checkpoint removed): a
  // signal arriving after that leaves the run "ok", never a run to train again.
  bool finished = false;
};

}  // namespace dpft
