// Private hyper-parameter selection (`dpft select`): Papernot & Steinke 2022, "Hyperparameter
// Tuning with Renyi Differential Privacy" (ICLR 2022; arXiv 2110.03620), Section 3.
//
// One trial Q picks a candidate uniformly at random (data-independent), trains it with DP and
// releases its score with the Gaussian mechanism. The selection A draws K ~ D_{eta,gamma}, runs
// Q K times and outputs only the best trial (its candidate, model and noisy score). Neither K
// nor the other trials are part of A's output: they stay in the selection's private workspace.
//
//   D_{eta,gamma}  the truncated negative binomial on {1, 2, ...} (the paper's Definition 1),
//                  eta in (-1, inf), gamma in (0, 1):
//                    P[K = k] = (1-gamma)^k / (gamma^-eta - 1) prod_{l<k} (l+eta)/(l+1)  (eta != 0)
//                    P[K = k] = (1-gamma)^k / (k log(1/gamma))                          (eta = 0)
//                    E[K] = eta (1-gamma) / (gamma (1 - gamma^eta)),  (1/gamma - 1) / log(1/gamma)
//                  eta = 1 is the geometric distribution, E[K] = 1/gamma.
//   Theorem 2      Q (lambda, e)-RDP and (lambda^, e^)-RDP  =>  A is (lambda, e')-RDP with
//                    e' = e + (1+eta)(1 - 1/lambda^) e^ + (1+eta) log(1/gamma) / lambda^
//                         + log(E[K]) / (lambda - 1),
//                  lambda > 1, lambda^ >= 1: minimised over lambda^ in {1} and the order grid.
//   Q's curve      the trial's releases composed (rdp.cpp's subsampled Gaussian), the largest
//                  over the candidates at each order (a data-independent random choice among
//                  mechanisms is at most as private as the least private one: Renyi divergence
//                  is quasi-convex), plus the score's Gaussian, lambda / (2 sigma_s^2).
//   (eps, delta)   Balle et al. 2020 (Thm 21), as the rdp accountant (accountant.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/privacy/accountant.hpp"

namespace dpft::privacy {

class NoiseSource;

// D_{eta,gamma} (Definition 1).
struct TruncatedNegativeBinomial {
  double eta = 1.0;
  double gamma = 0.1;
  void check() const;           // ConfigError unless eta in (-1, inf) and gamma in (0, 1)
  double pmf(int64_t k) const;  // P[K = k], k >= 1
  double mean() const;          // E[K]
  // The smallest k with P[K <= k] >= u, u in (0, 1): K drawn by inversion.
  int64_t quantile(double u) const;
  // The distribution of shape eta with E[K] = mean (> 1): gamma found by bisection (E[K] falls
  // as gamma grows). ConfigError for mean <= 1 or an eta outside (-1, inf).
  static TruncatedNegativeBinomial with_mean(double eta, double mean);
};

// Theorem 2's curve of the best of K ~ k trials of a mechanism with curve `trial`
// (RdpCurve, rdp_curve and curve_epsilon: accountant.hpp).
RdpCurve selection_rdp(const RdpCurve& trial, const TruncatedNegativeBinomial& k);

// What a selection will spend, fixed before its first trial.
struct SelectionPlan {
  std::vector<std::vector<GaussianBlock>> candidates;  // each candidate's run's releases
  double score_sigma = 0;  // std of the score sum's noise / its sensitivity (> 0)
  TruncatedNegativeBinomial trials;
  double delta = 1e-5;
};

struct SelectionBudget {
  double epsilon = kInf;        // the selection's total (the winner's outputs carry it)
  double order = 0;             // its best order
  double trial_epsilon = kInf;  // one trial Q alone at delta (RDP), for comparison
  nlohmann::json to_json() const;
};
// The plan's total (ConfigError for an empty or non-private candidate or score_sigma <= 0).
SelectionBudget selection_budget(const SelectionPlan& plan);

// The selection's mechanism: the one object that draws its randomness (K, each trial's
// candidate, each score's noise) and whose budget is fixed before anything is drawn. Its key
// is <dir>/selection.key (keyed mode, the default: secret, and the same draws on --resume, so a
// resumed selection repeats its trials instead of drawing a second K); privacy.noise_seed makes
// every draw reproducible and the selection "noise seeded: not shareable"; privacy.secure_noise
// draws from the OS and cannot resume.
class PrivateSelection {
 public:
  PrivateSelection(SelectionPlan plan, const std::filesystem::path& dir, bool secure,
                   std::optional<int64_t> noise_seed, bool resume);
  ~PrivateSelection();
  const SelectionBudget& budget() const { return budget_; }
  const SelectionPlan& plan() const { return plan_; }
  // K, drawn once.
  int64_t trials();
  // Trial t's candidate, uniform over the plan's candidates (trials drawn in order 0, 1, ...).
  int64_t candidate(int64_t t);
  // One trial's score: `sum` (of per-unit scores in [0, 1]: sensitivity 1) + N(0, sigma_s^2).
  double release_score(double sum);
  // {"mode", "shareable"[, "label"]}: how the selection's randomness was drawn.
  nlohmann::json noise_json() const;

 private:
  double uniform();  // in (0, 1): Phi of a standard normal draw of the "selection" stream
  SelectionPlan plan_;
  SelectionBudget budget_;
  std::unique_ptr<NoiseSource> draws_, score_noise_;
  nlohmann::json noise_json_;
  std::optional<int64_t> k_;
  int64_t next_trial_ = 0;
};

}  // namespace dpft::privacy
