#include "methods/run.hpp"

#include <spdlog/spdlog.h>

#include <memory>

#include "data/train_inputs.hpp"
#include "methods/registry.hpp"

namespace dpft {

RunResult run_method(const Spec& spec, const RunOptions& opts) {
  std::shared_ptr<Method> method = configured_method(spec.method);
  check_task(*method, spec);
  auto in = std::make_shared<train::TrainInputs>();
  RunHooks hooks;
  hooks.plan = [&spec, method, in] {
    RunPlan p;
    if (!method->trains()) {
      p.releases = method->plan(spec, 0);
    } else {
      *in = data::load_train_inputs(spec);  // each file read once
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
  return method->plan(spec, n);
}

bool method_trains(const Spec& spec) {
  return configured_method(spec.method)->trains();
}

}  // namespace dpft
