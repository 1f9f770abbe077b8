// What a method sees of the run it executes in: the resolved spec, the run directory (events,
// artefacts) and the run's release mechanisms (core/privacy/mechanism.hpp): the only way its
// private data reach an output, drawing the noise and recording each release in the run's
// ledger (which a method reads, never writes), and its Poisson samplers.
#pragma once
#include <nlohmann/json.hpp>

#include "core/config/spec.hpp"
#include "core/privacy/mechanism.hpp"
#include "core/run/run_dir.hpp"

namespace dpft {

struct RunContext {
  const Spec& spec;
  RunDir& dir;
  privacy::Mechanisms& privacy;
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
