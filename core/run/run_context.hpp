// What a method sees of the run it executes in: the resolved spec and the run directory
// (events, artefacts). Later issues add the privacy ledger, model, data and device here.
#pragma once
#include "core/config/spec.hpp"
#include "core/run/run_dir.hpp"

namespace dpft {

struct RunContext {
  const Spec& spec;
  RunDir& dir;
};

}  // namespace dpft
