#include "methods/run.hpp"

#include <spdlog/spdlog.h>

#include <memory>

#include "core/util/error.hpp"
#include "data/train_inputs.hpp"
#include "methods/registry.hpp"

namespace dpft {

namespace {
// The spec with delta_auto set where the method asks for it by default (no privacy.delta given);
// ConfigError for delta: auto on a method that trains on nothing.
Spec with_delta_mode(const Spec& given, const Method& method) {
  Spec spec = given;
  if (!spec.privacy.delta_set && method.delta_auto_by_default()) spec.privacy.delta_auto = true;
  DPFT_CHECK_AS(ConfigError, !spec.privacy.delta_auto || method.trains(),
                "privacy.delta: auto: method {} trains on no private examples; remove it",
                spec.method.name);
  return spec;
}
}  // namespace

RunResult run_method(const Spec& given, const RunOptions& opts) {
  std::shared_ptr<Method> method = configured_method(given.method);
  check_task(*method, given);
  auto in = std::make_shared<train::TrainInputs>();
  Spec spec = with_delta_mode(given, *method);
  bool loaded = false;
  if (spec.privacy.delta_auto) {  // delta = 1 / (N ln N) needs N before the ledger exists
    *in = data::load_train_inputs(spec);
    loaded = true;
    resolve_auto_delta(spec, in->train.size());
    spdlog::info("privacy.delta: auto = 1 / (N ln N) = {:.6g} for N = {}", spec.privacy.delta,
                 in->train.size());
  }
  RunHooks hooks;
  hooks.plan = [&spec, method, in, loaded] {
    RunPlan p;
    if (!method->trains()) {
      p.releases = method->plan(spec, 0);
    } else {
      if (!loaded) *in = data::load_train_inputs(spec);  // each file read once
      check_model(*method, *in);
      p.releases = method->plan(spec, in->train.size());
      p.settings["data"] = {{"files", data::train_file_identity(spec)},
                            {"examples", in->train.size()}};
    }
    p.settings["dp"] = method->plan_settings();
    return p;
  };
  hooks.run = [method, in](RunContext& ctx) {
    if (method->trains()) spdlog::info("{}", train::describe(*in, ctx.spec.output.non_private_stats));
    return method->run(ctx, *in);
  };
  return run_experiment(spec, hooks, opts);
}

std::vector<privacy::Release> planned_releases(const Spec& spec, int64_t dataset_size) {
  std::unique_ptr<Method> method = configured_method(spec.method);
  check_task(*method, spec);
  if (!method->trains()) return method->plan(spec, 0);
  const int64_t n = dataset_size > 0 ? dataset_size : data::count_train_examples(spec);
  return method->plan(resolved_delta(spec, n), n);
}

Spec resolved_delta(const Spec& spec, int64_t n) {
  Spec s = with_delta_mode(spec, *configured_method(spec.method));
  resolve_auto_delta(s, n);
  return s;
}

bool method_trains(const Spec& spec) {
  return configured_method(spec.method)->trains();
}

}  // namespace dpft
