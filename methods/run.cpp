#include "methods/run.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "core/train/dp_settings.hpp"
#include "core/train/setup.hpp"
#include "core/util/error.hpp"
#include "core/util/log.hpp"
#include "data/train_inputs.hpp"
#include "methods/registry.hpp"

namespace dpft {

namespace {
// The spec with delta_auto set where the method asks for it by default (no privacy.delta given);
// ConfigError for delta: auto on a method that trains on nothing.
Spec with_delta_mode(const Spec& given, const Method& method) {
  Spec spec = given;
  DPFT_CHECK_AS(ConfigError, !spec.train.epochs || method.trains(),
                "train.epochs: method {} trains on no private examples; remove it",
                spec.method.name);
  if (!spec.privacy.delta_set && method.delta_auto_by_default()) spec.privacy.delta_auto = true;
  DPFT_CHECK_AS(ConfigError, !spec.privacy.delta_auto || method.trains(),
                "privacy.delta: auto: method {} trains on no private examples; remove it",
                spec.method.name);
  return spec;
}
// The artefacts a run reads and the releases of its private data they embody (docs/privacy.md,
// "Provenance"): model.path, the data files and the method's own (dp-sft's method.file).
Inheritance inherited_releases(const Spec& spec, const Method& method) {
  std::vector<InputArtefact> inputs;
  auto add = [&](const std::string& option, const std::string& path) {
    if (!path.empty()) inputs.push_back({option, path, provenance_of(path)});
  };
  add("model.path", spec.model.path);
  add("data.train.path", spec.data.train.path);
  for (size_t i = 0; i < spec.data.train_extra.size(); ++i)
    add(fmt::format("data.train_extra[{}].path", i), spec.data.train_extra[i].path);
  add("data.public.path", spec.data.public_data.path);
  add("data.eval.path", spec.data.eval.path);
  for (size_t i = 0; i < spec.data.eval_sets.size(); ++i)
    add(fmt::format("data.eval_sets[{}].path", i), spec.data.eval_sets[i].path);
  for (InputArtefact& a : method.input_artefacts()) inputs.push_back(std::move(a));
  const bool any = std::any_of(inputs.begin(), inputs.end(), [](const InputArtefact& a) {
    return a.provenance || a.needs_provenance;
  });
  if (!any) return {};  // nothing to judge: the private files are not even hashed again
  return inherit(inputs, data::train_file_identity(spec), spec.privacy.is_private());
}

}  // namespace

RunResult run_method(const Spec& given, const RunOptions& opts) {
  // From here, not only from run_experiment: an early load (N for epochs or delta: auto)
  // warns before the run starts, and metrics.json's `warnings` must hold those too.
  const WarningCapture warnings;
  std::shared_ptr<Method> method = configured_method(given.method);
  check_task(*method, given);
  auto in = std::make_shared<train::TrainInputs>();
  Spec spec = with_delta_mode(train::with_model_defaults(given), *method);
  bool loaded = false;
  // delta = 1 / (N ln N) and steps = ceil(epochs / q) need N before the ledger exists (and
  // before config.resolved.yaml is written, which holds the numbers)
  if (spec.privacy.delta_auto || spec.train.epochs) {
    *in = data::load_train_inputs(spec);
    loaded = true;
    const int64_t n = in->units.count(in->train.size());
    const bool auto_delta = spec.privacy.delta_auto;
    spec = resolved_for(spec, n);
    if (auto_delta)
      spdlog::info("privacy.delta: auto = 1 / (N ln N) = {:.6g} for N = {} {}s", spec.privacy.delta,
                   n, privacy::name_of(spec.privacy.unit));
  }
  RunHooks hooks;
  hooks.plan = [&spec, method, in, loaded] {
    RunPlan p;
    const Inheritance inherited = inherited_releases(spec, *method);
    std::vector<privacy::Release> own;
    if (!method->trains()) {
      own = method->plan(spec, 0, inherited);
    } else {
      if (!loaded) *in = data::load_train_inputs(spec);  // each file read once
      check_model(*method, *in);
      const int64_t n = in->units.count(in->train.size());  // N counts privacy units
      own = method->plan(spec, n, inherited);
      for (const std::string& w : train::data_size_warnings(spec, n)) spdlog::warn("{}", w);
      p.settings["data"] = {{"files", data::train_file_identity(spec)},
                            {"examples", in->train.size()}};
      if (in->units.kind != privacy::PrivacyUnit::kExample)
        p.settings["data"]["units"] = {{"unit", privacy::name_of(in->units.kind)},
                                       {"count", n},
                                       {"rows_left_out", in->units.rows_left_out}};
    }
    p.inherited = inherited.releases;
    p.releases = inherited.releases;
    p.releases.insert(p.releases.end(), own.begin(), own.end());
    p.settings["dp"] = method->plan_settings();
    if (!inherited.decisions.empty()) p.settings["inherited"] = inherited.decisions;
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
  const Inheritance inherited = inherited_releases(spec, *method);
  std::vector<privacy::Release> out = inherited.releases, own;
  if (!method->trains()) {
    own = method->plan(spec, 0, inherited);
  } else {
    const int64_t n = dataset_size > 0 ? dataset_size : data::count_train_examples(spec);
    own = method->plan(resolved_for(spec, n), n, inherited);
  }
  out.insert(out.end(), own.begin(), own.end());
  return out;
}

Spec resolved_for(const Spec& spec, int64_t n) {
  Spec s = with_delta_mode(spec, parsed_method(spec.method));
  resolve_auto_delta(s, n);
  return train::with_epochs_as_steps(s, n);
}

bool method_trains(const Spec& spec) {
  return parsed_method(spec.method).trains();
}

}  // namespace dpft
