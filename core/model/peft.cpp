#include "core/model/peft.hpp"

#include <fmt/format.h>

#include <set>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::model {

bool module_matches(const std::string& path, const std::string& target) {
  if (path == target) return true;
  return path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}


void apply_peft(CausalLM& model, const PeftOptions& o, uint64_t seed) {
  if (o.kind != "lora" && o.kind != "full" && o.kind != "none")
    throw ConfigError(fmt::format("model.peft.kind: '{}' is not allowed; use lora, full or none", o.kind));
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  if (o.kind == "none") return;
  bool all = o.targets.size() == 1 && o.targets[0] == "all";
  if (o.kind == "lora") {
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
    // A module path inside one of modules_to_save (itself or below it).
    auto saved = [&](const std::string& path) {
      for (const auto& m : o.modules_to_save)
        for (std::string p = path;; p = p.substr(0, p.rfind('.'))) {
          if (module_matches(p, m)) return true;
          if (p.find('.') == std::string::npos) break;
        }
      return false;
    };
    for (auto& [path, lin] : lins) {
      bool hit = false;
      for (const auto& t : o.targets) hit = hit || module_matches(path, t);
      if (!hit || saved(path)) continue;
      lin->add_lora(o.r, o.alpha, o.dropout, &gen);
      lin->lora_A.set_requires_grad(true);
      lin->lora_B.set_requires_grad(true);
    }
    for (const auto& m : o.modules_to_save) {
      bool hit = false;
      for (auto& p : model->named_parameters(true)) {
        const std::string module = p.key().substr(0, p.key().rfind('.'));
        if (p.key().find("lora_") != std::string::npos || !saved(module)) continue;
        bool mine = false;
        for (std::string q = module;; q = q.substr(0, q.rfind('.'))) {
          mine = mine || module_matches(q, m);
          if (q.find('.') == std::string::npos) break;
        }
        if (!mine) continue;
        p.value().set_requires_grad(true);
        hit = true;
      }
      if (!hit)
        throw ConfigError(
            fmt::format("model.peft.modules_to_save: '{}' matches no module of this "
                        "{} model",
                        m, model->config().model_type));
    }
    return;
  }
  DPFT_CHECK_AS(ConfigError, o.modules_to_save.empty(),
                "model.peft.modules_to_save is for kind lora (kind {} trains its targets)", o.kind);
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
