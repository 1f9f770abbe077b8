#include "core/privacy/selection.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/privacy/noise.hpp"
#include "core/privacy/normal.hpp"
#include "core/privacy/randomness.hpp"
#include "core/util/error.hpp"

namespace dpft::privacy {

void TruncatedNegativeBinomial::check() const {
  DPFT_CHECK_AS(ConfigError, std::isfinite(eta) && eta > -1,
                "dpft select: --eta {} is outside (-1, inf) (1: geometric, 0: logarithmic)", eta);
  DPFT_CHECK_AS(ConfigError, gamma > 0 && gamma < 1,
                "dpft select: the trials' gamma {} is outside (0, 1)", gamma);
}

double TruncatedNegativeBinomial::pmf(int64_t k) const {
  if (k < 1) return 0;
  const double kd = static_cast<double>(k);
  if (eta == 0) return std::exp(kd * std::log1p(-gamma)) / (kd * std::log(1 / gamma));
  // log of prod_{l<k} (l + eta) / (l + 1) = lgamma(k + eta) - lgamma(eta) - lgamma(k + 1); the
  // sign of (eta) for eta in (-1, 0) cancels the sign of gamma^-eta - 1.
  double log_prod = 0;
  for (int64_t l = 0; l < k; ++l)
    log_prod += std::log(std::abs(static_cast<double>(l) + eta) / static_cast<double>(l + 1));
  return std::exp(kd * std::log1p(-gamma) + log_prod) / std::abs(std::pow(gamma, -eta) - 1);
}

double TruncatedNegativeBinomial::mean() const {
  if (eta == 0) return (1 / gamma - 1) / std::log(1 / gamma);
  return eta * (1 - gamma) / (gamma * (1 - std::pow(gamma, eta)));
}

int64_t TruncatedNegativeBinomial::quantile(double u) const {
  DPFT_CHECK(u > 0 && u < 1, "TruncatedNegativeBinomial::quantile: u {} outside (0, 1)", u);
  // p_{k+1} = p_k (1 - gamma) (k + eta) / (k + 1) for eta != 0, and the logarithmic one's
  // p_{k+1} = p_k (1 - gamma) k / (k + 1): the same recursion with eta = 0.
  double p = pmf(1), cdf = p;
  int64_t k = 1;
  while (cdf < u && p > 0) {
    p *= (1 - gamma) * (static_cast<double>(k) + eta) / static_cast<double>(k + 1);
    cdf += p;
    ++k;
  }
  return k;
}

TruncatedNegativeBinomial TruncatedNegativeBinomial::with_mean(double eta, double mean) {
  TruncatedNegativeBinomial d{eta, 0.5};
  d.check();
  DPFT_CHECK_AS(ConfigError, std::isfinite(mean) && mean > 1,
                "dpft select: --mean-trials {} must be > 1 (the expected number of trials)", mean);
  double lo = 1e-12, hi = 1 - 1e-12;  // mean(lo) is huge, mean(hi) close to 1
  for (int i = 0; i < 200; ++i) {
    d.gamma = 0.5 * (lo + hi);
    (d.mean() > mean ? lo : hi) = d.gamma;
  }
  d.gamma = 0.5 * (lo + hi);
  return d;
}

RdpCurve selection_rdp(const RdpCurve& trial, const TruncatedNegativeBinomial& k) {
  k.check();
  const double log_inv_gamma = std::log(1 / k.gamma), log_mean = std::log(k.mean());
  // The lambda^-terms do not depend on lambda: their minimum, once (lambda^ = 1 leaves only
  // (1 + eta) log(1/gamma)).
  double hat = (1 + k.eta) * log_inv_gamma;
  for (size_t j = 0; j < trial.orders.size(); ++j) {
    const double l = trial.orders[j];
    hat = std::min(hat, (1 + k.eta) * ((1 - 1 / l) * trial.eps[j] + log_inv_gamma / l));
  }
  RdpCurve out = trial;
  for (size_t i = 0; i < out.orders.size(); ++i)
    out.eps[i] = trial.eps[i] + hat + log_mean / (out.orders[i] - 1);
  return out;
}

nlohmann::json SelectionBudget::to_json() const {
  return {{"epsilon", epsilon}, {"order", order}, {"trial_epsilon", trial_epsilon}};
}

SelectionBudget selection_budget(const SelectionPlan& plan) {
  DPFT_CHECK_AS(ConfigError, !plan.candidates.empty(), "dpft select: no candidate to select from");
  DPFT_CHECK_AS(ConfigError, std::isfinite(plan.score_sigma) && plan.score_sigma > 0,
                "dpft select: --score-noise {} must be finite and > 0 (the scores are private)",
                plan.score_sigma);
  DPFT_CHECK_AS(ConfigError, plan.delta > 0 && plan.delta < 1,
                "dpft select: delta {} is outside (0, 1)", plan.delta);
  // Q's curve: the least private candidate at each order, and the score's Gaussian (q = 1).
  RdpCurve q = rdp_curve({{plan.score_sigma, 1.0, 1}});
  std::vector<double> worst(q.orders.size(), 0.0);
  for (size_t c = 0; c < plan.candidates.size(); ++c) {
    const std::vector<GaussianBlock>& blocks = plan.candidates[c];
    DPFT_CHECK_AS(ConfigError, !blocks.empty() && !has_non_private(blocks),
                  "dpft select: candidate {} {} (a selection needs every trial DP: give "
                  "privacy.epsilon or privacy.noise_multiplier)",
                  c, blocks.empty() ? "releases nothing" : "makes a non-private release");
    const RdpCurve r = rdp_curve(blocks, q.orders);
    for (size_t i = 0; i < worst.size(); ++i) worst[i] = std::max(worst[i], r.eps[i]);
  }
  for (size_t i = 0; i < worst.size(); ++i) q.eps[i] += worst[i];
  const RdpEpsilon total = curve_epsilon(selection_rdp(q, plan.trials), plan.delta);
  return {total.epsilon, total.order, curve_epsilon(q, plan.delta).epsilon};
}

PrivateSelection::PrivateSelection(SelectionPlan plan, const std::filesystem::path& dir,
                                   bool secure, std::optional<int64_t> noise_seed, bool resume)
    : plan_(std::move(plan)), budget_(selection_budget(plan_)) {
  DPFT_CHECK_AS(ConfigError, !(secure && resume),
                "dpft select --resume: this selection drew from the OS (privacy.secure_noise), "
                "so its number of trials cannot be drawn again; start a new selection");
  const PrivateRandomness r =
      PrivateRandomness::for_run(secure, noise_seed, dir / "selection.key", resume, true);
  draws_ = r.noise("selection");
  score_noise_ = r.noise("selection-score");
  noise_json_ = r.to_json();
}

PrivateSelection::~PrivateSelection() = default;

double PrivateSelection::uniform() {
  for (;;) {
    const double u = norm_cdf(draws_->normal({1}, 1.0, torch::kFloat64).item<double>());
    if (u > 0 && u < 1) return u;
  }
}

int64_t PrivateSelection::trials() {
  if (!k_) k_ = plan_.trials.quantile(uniform());
  return *k_;
}

int64_t PrivateSelection::candidate(int64_t t) {
  trials();  // K first, so that the draws' order is fixed
  DPFT_CHECK(t == next_trial_ && t < *k_, "PrivateSelection::candidate: trial {} out of order", t);
  ++next_trial_;
  const auto n = static_cast<int64_t>(plan_.candidates.size());
  return std::min<int64_t>(n - 1, static_cast<int64_t>(uniform() * static_cast<double>(n)));
}

double PrivateSelection::release_score(double sum) {
  DPFT_CHECK(std::isfinite(sum), "PrivateSelection::release_score: a score sum of {}", sum);
  return sum + score_noise_->normal({1}, plan_.score_sigma, torch::kFloat64).item<double>();
}

nlohmann::json PrivateSelection::noise_json() const {
  return noise_json_;
}

}  // namespace dpft::privacy
