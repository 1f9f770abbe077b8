#include "methods/preflight.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/privacy/modes.hpp"
#include "core/train/dp_settings.hpp"
#include "core/train/setup.hpp"
#include "core/util/strings.hpp"
#include "data/train_inputs.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft {

PreflightReport preflight(const Spec& given) {
  const Method& method = parsed_method(given.method);
  check_task(method, given);
  PreflightReport r;
  Spec spec = train::with_model_defaults(given);
  if (!method.trains()) {  // nothing private to read: the spec is all there is
    planned_releases(spec);
    r.resolved = spec;
    r.lines.push_back(
        fmt::format("method {} reads no private data: nothing to open", spec.method.name));
    return r;
  }
  const train::TrainInputs in = data::check_train_inputs(spec);
  const int64_t n = in.units.count(in.train.size());
  r.units = n;
  spec = resolved_for(spec, n);
  for (const std::string& w : train::data_size_warnings(spec, n)) spdlog::warn("{}", w);
  const std::vector<privacy::Release> plan = planned_releases(spec, n);
  const train::DpSettings dp = train::dp_settings_before_noise(spec, n);
  r.lines.push_back(
      fmt::format("model {}: config.json, weights and tokenizer read; peft {}{}",
                  in.model_dir.string(), model::name_of(in.peft.kind),
                  in.peft.kind == model::PeftKind::kLora || in.peft.kind == model::PeftKind::kFull
                      ? " targets [" + join(in.peft.targets, ", ") + "]"
                      : std::string()));
  r.lines.push_back(fmt::format("data.train {}: N = {} {}s, q = {:.4g}, {} steps",
                                spec.data.train.path, n, privacy::name_of(spec.privacy.unit), dp.q,
                                spec.train.steps));
  if (!spec.data.eval.path.empty())
    r.lines.push_back(
        fmt::format("data.eval {}: {} examples", spec.data.eval.path, in.eval.size()));
  for (const auto& [name, ds] : in.eval_sets)
    r.lines.push_back(fmt::format("data.eval_sets {}: {} examples", name, ds.size()));
  if (!spec.data.public_data.path.empty())
    r.lines.push_back(fmt::format("data.public {}: {} examples", spec.data.public_data.path,
                                  in.public_train.size()));
  std::vector<std::string> releases;
  for (const privacy::Release& x : plan)
    releases.push_back(fmt::format("{} (sigma {:.4g}, q {:.4g}, {} times)", x.label,
                                   x.noise_multiplier, x.sampling_rate, x.count));
  r.lines.push_back("privacy: releases " +
                    (releases.empty() ? std::string("none") : join(releases, ", ")));
  r.resolved = spec;
  return r;
}

Spec plan_as_counted(const Spec& spec, const PreflightReport& report) {
  Spec s = train::with_model_defaults(spec);
  if (!parsed_method(s.method).trains()) {
    planned_releases(s);
    return s;
  }
  s = resolved_for(s, report.units);
  planned_releases(s, report.units);
  return s;
}

}  // namespace dpft
