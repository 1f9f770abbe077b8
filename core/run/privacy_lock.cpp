#include "core/run/privacy_lock.hpp"

#include <fmt/format.h>

#include <map>

#include "core/privacy/os_random.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"

namespace dpft {

namespace {

// The resolved YAML as JSON, scalars as their (canonical, resolved) text.
nlohmann::json yaml_json(const YAML::Node& n) {
  if (!n || n.IsNull()) return nullptr;
  if (n.IsScalar()) return n.Scalar();
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (size_t i = 0; i < n.size(); ++i) a.push_back(yaml_json(n[i]));
    return a;
  }
  nlohmann::json o = nlohmann::json::object();
  for (auto it = n.begin(); it != n.end(); ++it) o[it->first.Scalar()] = yaml_json(it->second);
  return o;
}

void flatten(const nlohmann::json& j, const std::string& path,
             std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto& [k, v] : j.items()) flatten(v, path.empty() ? k : path + "." + k, out);
  } else if (j.is_array() && !j.empty()) {
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], fmt::format("{}[{}]", path, i), out);
  } else {
    out[path] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

}  // namespace

nlohmann::json make_privacy_lock(const Spec& spec, const RunPlan& plan, const std::string& nonce) {
  const YAML::Node y = spec_to_yaml(spec);
  nlohmann::json s;
  s["seed"] = std::to_string(spec.seed);
  s["privacy"] = yaml_json(y["privacy"]);
  s["train"] = {{"steps", std::to_string(spec.train.steps)},
                {"batch_size", std::to_string(spec.train.batch_size)}};
  s["method"] = yaml_json(y["method"]);
  nlohmann::json data = yaml_json(y["data"]);
  data.erase("eval");  // the evaluation set is not the private data the budget protects
  s["data"] = data;
  nlohmann::json releases = nlohmann::json::array();
  for (const privacy::Release& r : plan.releases)
    releases.push_back({{"label", r.label},
                        {"noise_multiplier", r.noise_multiplier},
                        {"sampling_rate", r.sampling_rate},
                        {"count", r.count}});
  s["plan"] = {{"releases", releases}, {"settings", plan.settings}};
  return {{"schema", kPrivacyLockSchema}, {"run_nonce", nonce}, {"settings", s}};
}

std::vector<std::string> lock_differences(const nlohmann::json& started, const nlohmann::json& now) {
  std::map<std::string, std::string> a, b;
  flatten(started, "", a);
  flatten(now, "", b);
  std::vector<std::string> out;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end())
      out.push_back(fmt::format("{}: {} when the run started, absent now", k, v));
    else if (it->second != v)
      out.push_back(fmt::format("{}: {} when the run started, {} now", k, v, it->second));
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(fmt::format("{}: absent when the run started, {} now", k, v));
  return out;
}

std::string checkpoint_integrity(const nlohmann::json& lock, const nlohmann::json& ledger,
                                 int64_t step) {
  return sha256_hex(fmt::format("dpft.checkpoint/1\n{}\n{}\n{}", lock.dump(), ledger.dump(), step));
}

std::string state_integrity(const nlohmann::json& lock, std::string_view kind,
                            const nlohmann::json& content) {
  return sha256_hex(fmt::format("dpft.state/1\n{}\n{}\n{}", lock.dump(), kind, content.dump()));
}

int64_t verify_checkpoint_lock(const nlohmann::json& j, const nlohmann::json& lock_now,
                               const std::string& where) {
  auto refuse = [&](const std::string& why) {
    throw InputError(fmt::format(
        "--resume: refused: checkpoint {} {}; resuming from it could misstate what the run "
        "spent. Start a new run (dpft run SPEC)",
        where, why));
  };
  if (!j.is_object() || !j.contains("privacy_lock") || !j.contains("integrity") ||
      !j.contains("ledger") || !j.contains("step") || !j["step"].is_number_integer())
    refuse(
        "has no privacy lock, integrity hash, ledger or step (written by an older dpft, or "
        "edited)");
  const nlohmann::json& lock = j["privacy_lock"];
  if (lock.value("run_nonce", std::string()) != lock_now.value("run_nonce", std::string()))
    refuse(
        "belongs to another run (its run nonce differs from this run's privacy_lock.json; "
        "copied from a run with another seed or spec?)");
  std::vector<std::string> diffs = lock_differences(lock.value("settings", nlohmann::json()),
                                                    lock_now.value("settings", nlohmann::json()));
  if (!diffs.empty()) {
    std::string all;
    for (const auto& d : diffs) all += (all.empty() ? "" : "; ") + d;
    refuse("was written under other privacy settings: " + all);
  }
  const int64_t step = j["step"].get<int64_t>();
  if (j["integrity"] != checkpoint_integrity(lock, j["ledger"], step))
    refuse("fails its integrity check (its ledger, step or lock was modified)");
  return step;
}

std::string new_run_nonce() {
  return privacy::os_random_hex(16);
}

}  // namespace dpft
