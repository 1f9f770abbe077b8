// `dpft select SPEC --grid key=a,b,c [--grid ...] --metric eval.accuracy|eval.loss`: private
// hyper-parameter selection with an accounted total (core/privacy/selection.hpp: Papernot &
// Steinke 2022, Theorem 2, a truncated-negative-binomial number of random-search trials).
//
// The private training file is split by a per-row hash (DatasetSpec::hash_split) into a
// training part (1 - holdout) and a held-out part. Each trial trains one candidate, drawn
// uniformly at random from the grid, with DP on the training part, scores every held-out row
// (per_sample.jsonl of the final model: accuracy, or 1 - min(loss, L) / L, each in [0, 1]) and
// releases the sum over units with Gaussian noise (sensitivity 1: one example moves one row's
// score; at privacy.unit user a user's score is the mean of its held-out rows).
// Only the best trial is the selection's output: <dir>/selection.json (schema dpft.select/1)
// names its candidate, its noisy score and the total epsilon, and is copied into its run
// directory, which `dpft export` then exports with that epsilon; the other trials and their
// number stay in <dir> (selection_trials.jsonl, trials/: non-private, never exported).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/util/enum_names.hpp"

namespace dpft::select {

enum class SelectMetric { kAccuracy, kLoss };
inline constexpr std::array<EnumName<SelectMetric>, 2> kSelectMetricNames = {
    {{SelectMetric::kAccuracy, "eval.accuracy"}, {SelectMetric::kLoss, "eval.loss"}}};

struct SelectOptions {
  // --grid key=v1,v2,...: candidates are the product of every key's values.
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;
  SelectMetric metric = SelectMetric::kAccuracy;
  double holdout = 0.1;               // share of the private rows held out for the scores, (0, 0.5]
  double mean_trials = 0;             // E[K]; 0: twice the number of candidates
  double eta = 1.0;                   // the trials' shape (1: geometric, 0: logarithmic)
  double score_noise = 5.0;           // std of the noise on a score sum (sensitivity 1)
  double loss_bound = 10.0;           // eval.loss: a row's loss is clipped to [0, L]
  std::optional<double> max_epsilon;  // refuse a plan whose total exceeds it, before any trial
  std::vector<std::string> sets;      // --set overrides of the spec
  std::string out_dir;                // "" = <output.dir>/select/<name>-<time>
  bool resume = false;                // continue the selection in out_dir
  bool dry_run = false;               // the plan and its total only
  std::string command_line;
};

// Parses "key=v1,v2,..." (InputError naming the fix for a malformed one or a key that would
// change what is private or how it is scored: privacy.*, data.*, eval.*, output.*).
std::pair<std::string, std::vector<std::string>> parse_grid(const std::string& arg);

struct SelectResult {
  nlohmann::json selection;  // what selection.json holds (schema dpft.select/1)
  std::string dir;
};

SelectResult run_select(const std::string& spec_path, const SelectOptions& opts);

}  // namespace dpft::select
