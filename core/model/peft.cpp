#include "core/model/peft.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::model {

bool module_matches(const std::string& path, const std::string& target) {
  if (path == target) return true;
  return path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}

int64_t adapter_width(int64_t hidden_size, int64_t reduction_factor) {
  DPFT_CHECK_AS(ConfigError, reduction_factor >= 1,
                "model.peft.reduction_factor = {}: must be at least 1", reduction_factor);
  return std::max<int64_t>(1, hidden_size / reduction_factor);
}

namespace {

// A module path inside one of `modules` (itself or below it).
bool inside(const std::string& path, const std::vector<std::string>& modules) {
  for (const auto& m : modules)
    for (std::string p = path;; p = p.substr(0, p.rfind('.'))) {
      if (module_matches(p, m)) return true;
      if (p.find('.') == std::string::npos) break;
    }
  return false;
}

// modules_to_save of kinds lora and adapter: their base parameters train in full.
void train_saved_modules(CausalLM& model, const PeftOptions& o) {
  for (const auto& m : o.modules_to_save) {
    bool hit = false;
    for (auto& p : model->named_parameters(true)) {
      const std::string module = p.key().substr(0, p.key().rfind('.'));
      if (peft_parameter(p.key()) || !inside(module, {m})) continue;
      p.value().set_requires_grad(true);
      hit = true;
    }
    if (!hit)
      throw ConfigError(
          fmt::format("model.peft.modules_to_save: '{}' matches no module of this "
                      "{} model",
                      m, model->config().model_type));
  }
}

}  // namespace

std::vector<std::string> resolved_targets(const std::vector<std::string>& targets,
                                          const std::string& model_type, PeftKind kind) {
  if (targets != std::vector<std::string>{kAutoTargets}) return targets;
  std::vector<std::string> t = auto_targets(model_type, kind);
  if (t.empty() && kind != PeftKind::kAdapter && kind != PeftKind::kNone)
    throw ConfigError(fmt::format(
        "model.peft.targets: auto knows no default for model_type '{}'; list the module names "
        "to wrap (dpft model info DIR shows them)",
        model_type));
  return t.empty() ? targets : t;
}

void apply_peft(CausalLM& model, const PeftOptions& given, uint64_t seed) {
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  if (given.kind == PeftKind::kNone) return;
  PeftOptions o = given;
  o.targets = resolved_targets(o.targets, model->config().model_type, o.kind);
  bool all = o.targets.size() == 1 && o.targets[0] == "all";
  if (o.kind == PeftKind::kAdapter) {
    auto gen = at::detail::createCPUGenerator(seed);
    model->add_adapters(adapter_width(model->config().hidden_size, o.reduction_factor), &gen);
    for (auto& p : model->named_parameters(true))
      if (p.key().find(".adapter.") != std::string::npos) p.value().set_requires_grad(true);
    train_saved_modules(model, o);
    return;
  }
  if (o.kind == PeftKind::kLora) {
    if (all) throw ConfigError("model.peft.targets: 'all' is only for kind full; list module names for LoRA");
    auto gen = at::detail::createCPUGenerator(seed);
    auto lins = model->linears();
    std::set<std::string> names;
    for (auto& [path, lin] : lins) names.insert(last_component(path));
    for (const auto& t : o.targets) {
      bool hit = false;
      for (auto& [path, lin] : lins) hit = hit || module_matches(path, t);
      if (!hit)
        throw ConfigError(fmt::format("model.peft.targets: '{}' matches no linear module of this {} model; its "
                                      "modules are: {}",
                                      t, model->config().model_type, join({names.begin(), names.end()}, ", ")));
    }
    for (auto& [path, lin] : lins) {
      bool hit = false;
      for (const auto& t : o.targets) hit = hit || module_matches(path, t);
      if (!hit || inside(path, o.modules_to_save)) continue;
      lin->add_lora(o.r, o.alpha, o.dropout, &gen);
      lin->lora_A.set_requires_grad(true);
      lin->lora_B.set_requires_grad(true);
    }
    train_saved_modules(model, o);
    return;
  }
  DPFT_CHECK_AS(ConfigError, o.modules_to_save.empty(),
                "model.peft.modules_to_save is for kind lora (kind {} trains its targets)",
                name_of(o.kind));
  // full: parameters whose module path matches a target
  bool any = false;
  for (auto& p : model->named_parameters(true)) {
    std::string module = p.key().substr(0, p.key().rfind('.'));
    bool hit = all;
    for (const auto& t : o.targets) hit = hit || module_matches(module, t);
    if (hit) {
      p.value().set_requires_grad(true);
      any = true;
    }
  }
  if (!any)
    throw ConfigError(fmt::format("model.peft.targets: [{}] select no parameter of this {} model (use 'all' to "
                                  "train everything)",
                                  join(o.targets, ", "), model->config().model_type));
}

std::vector<std::pair<std::string, torch::Tensor>> trainable_parameters(CausalLM& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& p : model->named_parameters(true))
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  return out;
}

int64_t count_parameters(CausalLM& model, bool trainable_only) {
  int64_t n = 0;
  for (auto& p : model->parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

}  // namespace dpft::model
