// The privacy ledger: the only place epsilon is computed during a run.
//
// Methods record every DP release here (mechanism, noise multiplier, sampling rate, count,
// label such as "train", "stage1" or "histogram"); the ledger reports eps(delta) with the
// run's accountant at any point, serialises to JSON (checkpoints, metrics.json), and refuses a
// plan that would exceed the target budget before anything is released. A release with noise
// multiplier 0 is non-private: epsilon is then infinite (reported as "inf", never 0).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/privacy/accountant.hpp"

namespace dpft::privacy {

struct Release {
  std::string label = "train";  // which stage released it
  double noise_multiplier = 1;  // sigma (noise std / sensitivity); 0 = non-private
  double sampling_rate = 1;     // Poisson rate q; 1 = the full data set
  int64_t count = 1;            // compositions
  // "gaussian" (q = 1), "subsampled_gaussian" (q < 1) or "non_private" (sigma = 0).
  std::string mechanism() const;
};

struct LedgerOptions {
  AccountantKind accountant = AccountantKind::kPrv;
  double delta = 1e-5;
  std::optional<double> target_epsilon;  // nullopt or inf: no budget check
  AccountantOptions accountant_options;
};

class PrivacyLedger {
 public:
  explicit PrivacyLedger(LedgerOptions opts);

  // eps of the planned releases (on top of what is already recorded); throws ConfigError if
  // it exceeds the target epsilon. A wholly non-private ledger (every sigma 0) is not refused:
  // it reports inf and the run is labelled non-private.
  EpsilonResult check_plan(const std::vector<Release>& plan) const;
  // Record a release; consecutive releases with the same label, sigma and q are merged.
  void record(const Release& r);
  EpsilonResult spent() const;
  const std::vector<Release>& releases() const { return releases_; }
  const LedgerOptions& options() const { return opts_; }

  // {"accountant", "delta", "target_epsilon", "epsilon", "releases": [...], ...}
  nlohmann::json to_json() const;
  static PrivacyLedger from_json(const nlohmann::json& j);
  // What a plan would spend, without a run: a ledger holding `plan` as if every release had
  // been made (`dpft account --spec`; no data, no noise, nothing released).
  static PrivacyLedger of_plan(LedgerOptions opts, const std::vector<Release>& plan);

 private:
  LedgerOptions opts_;
  std::vector<Release> releases_;
  EpsilonResult compute(const std::vector<Release>& rs) const;
  // The last accountant answer and its blocks: spent(), to_json() and check_plan({}) of an
  // unchanged ledger ask the same question (a PRV answer takes ~0.1-1 s). A ledger belongs to
  // one thread.
  mutable std::vector<GaussianBlock> memo_blocks_;
  mutable std::optional<EpsilonResult> memo_;
};

// JSON for an epsilon: a number, or the string "inf".
nlohmann::json eps_json(double eps);
double eps_from_json(const nlohmann::json& j);

}  // namespace dpft::privacy
