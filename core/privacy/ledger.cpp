#include "core/privacy/ledger.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/util/error.hpp"

namespace dpft::privacy {

std::string Release::mechanism() const {
  if (noise_multiplier == 0) return "non_private";
  return sampling_rate >= 1.0 ? "gaussian" : "subsampled_gaussian";
}

nlohmann::json eps_json(double eps) {
  if (std::isinf(eps)) return "inf";
  return eps;
}

double eps_from_json(const nlohmann::json& j) {
  if (j.is_string() && j.get<std::string>() == "inf") return std::numeric_limits<double>::infinity();
  return j.get<double>();
}

PrivacyLedger::PrivacyLedger(LedgerOptions opts) : opts_(std::move(opts)) {
  if (!(opts_.delta > 0 && opts_.delta < 1))
    throw ConfigError(fmt::format("privacy.delta: {} is out of range; allowed (0, 1)", opts_.delta));
  make_accountant(opts_.accountant, opts_.accountant_options);  // validates eps_error
}

EpsilonResult PrivacyLedger::compute(const std::vector<Release>& rs) const {
  EpsilonResult r;
  if (rs.empty()) {
    r.accountant = name_of(opts_.accountant);
    r.epsilon = 0;
    return r;
  }
  std::vector<GaussianBlock> blocks;
  for (const auto& x : rs) blocks.push_back({x.noise_multiplier, x.sampling_rate, x.count});
  auto same = [](const GaussianBlock& a, const GaussianBlock& b) {
    return a.sigma == b.sigma && a.q == b.q && a.steps == b.steps;
  };
  if (memo_ &&
      std::equal(blocks.begin(), blocks.end(), memo_blocks_.begin(), memo_blocks_.end(), same))
    return *memo_;
  memo_ = make_accountant(opts_.accountant, opts_.accountant_options)->epsilon(blocks, opts_.delta);
  memo_blocks_ = std::move(blocks);
  return *memo_;
}

EpsilonResult PrivacyLedger::check_plan(const std::vector<Release>& plan) const {
  std::vector<Release> all = releases_;
  all.insert(all.end(), plan.begin(), plan.end());
  for (const auto& r : plan) check_block({r.noise_multiplier, r.sampling_rate, r.count}, "release '" + r.label + "'");
  EpsilonResult e = compute(all);
  // A non-private run (every release has sigma 0: sgd, or epsilon .inf) reports inf and is
  // labelled non-private; privacy.epsilon is not a budget it could meet, so it is not refused.
  bool any_private = false;
  for (const auto& r : all) any_private |= r.noise_multiplier > 0;
  if (any_private && opts_.target_epsilon && std::isfinite(*opts_.target_epsilon) &&
      e.epsilon > *opts_.target_epsilon * (1 + 1e-9))
    throw ConfigError(fmt::format("the planned DP releases spend epsilon {} ({} accountant, delta {}), more than "
                                  "the target privacy.epsilon = {}; raise the noise multiplier, or lower the "
                                  "steps or sampling rate",
                                  std::isinf(e.epsilon) ? "inf" : fmt::format("{:.4g}", e.epsilon),
                                  e.accountant, opts_.delta, *opts_.target_epsilon));
  return e;
}

void PrivacyLedger::record(const Release& r) {
  check_block({r.noise_multiplier, r.sampling_rate, r.count}, "release '" + r.label + "'");
  if (!releases_.empty()) {
    Release& last = releases_.back();
    if (last.label == r.label && last.noise_multiplier == r.noise_multiplier &&
        last.sampling_rate == r.sampling_rate) {
      last.count += r.count;
      return;
    }
  }
  releases_.push_back(r);
}

PrivacyLedger PrivacyLedger::of_plan(LedgerOptions opts, const std::vector<Release>& plan) {
  PrivacyLedger l(std::move(opts));
  for (const Release& r : plan) l.record(r);
  return l;
}

EpsilonResult PrivacyLedger::spent() const { return compute(releases_); }

nlohmann::json PrivacyLedger::to_json() const {
  EpsilonResult e = spent();
  nlohmann::json rel = nlohmann::json::array();
  for (const auto& r : releases_)
    rel.push_back({{"label", r.label},
                   {"mechanism", r.mechanism()},
                   {"noise_multiplier", r.noise_multiplier},
                   {"sampling_rate", r.sampling_rate},
                   {"count", r.count}});
  nlohmann::json j = {
      {"accountant", name_of(opts_.accountant)},
      {"accountant_used", e.accountant},
      {"delta", opts_.delta},
      {"eps_error", opts_.accountant_options.eps_error},
      {"target_epsilon", opts_.target_epsilon ? eps_json(*opts_.target_epsilon) : nlohmann::json()},
      {"epsilon", eps_json(e.epsilon)},
      {"releases", rel}};
  if (e.eps_lower) j["eps_lower"] = *e.eps_lower;
  if (e.eps_estimate) j["eps_estimate"] = *e.eps_estimate;
  if (e.eps_upper) j["eps_upper"] = *e.eps_upper;
  if (e.best_order) j["rdp_order"] = *e.best_order;
  if (!e.warnings.empty()) j["warnings"] = e.warnings;
  return j;
}

PrivacyLedger PrivacyLedger::from_json(const nlohmann::json& j) {
  try {
    LedgerOptions o;
    o.accountant = enum_value(j.at("accountant").get<std::string>(), kAccountantNames,
                              "the ledger's accountant");
    o.delta = j.at("delta").get<double>();
    o.accountant_options.eps_error = j.value("eps_error", 0.01);
    if (j.contains("target_epsilon") && !j["target_epsilon"].is_null())
      o.target_epsilon = eps_from_json(j["target_epsilon"]);
    PrivacyLedger l(o);
    for (const auto& r : j.at("releases"))
      l.releases_.push_back({r.at("label").get<std::string>(), r.at("noise_multiplier").get<double>(),
                             r.at("sampling_rate").get<double>(), r.at("count").get<int64_t>()});
    return l;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("malformed privacy ledger JSON: {}", e.what()));
  }
}

}  // namespace dpft::privacy
