// One experiment with the registry's methods: the configured method, the model and data sets
// loaded once (data/train_inputs.hpp), the DP settings resolved once (Method::plan), then core's
// runner (core/run/runner.hpp: run directory, ledger, metrics.json, status).
#pragma once
#include <cstdint>
#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"
#include "core/run/runner.hpp"

namespace dpft {

RunResult run_method(const Spec& spec, const RunOptions& opts);

// The releases a run of `spec` would make on a private set of `dataset_size` examples (0: N
// counted as the run would, data::count_train_examples), without loading the model's weights.
std::vector<privacy::Release> planned_releases(const Spec& spec, int64_t dataset_size = 0);
// The spec resolved for N = n private units: privacy.delta `auto`, or no delta given to a
// method whose default is auto (ctcl), becomes 1 / (N ln N) (core/config/spec.hpp), and
// train.epochs becomes train.steps = ceil(epochs / q) (train::with_epochs_as_steps).
Spec resolved_for(const Spec& spec, int64_t n);

// Whether the spec's method trains on the private data (and so has an N).
bool method_trains(const Spec& spec);

}  // namespace dpft
