// The DP-SFT paper's tables for `dpft report` (Sec. 5). `glue` and `dp-sft` (Tables 1-3 and 6,
// and the k sweep): the accuracy of the final classifier on each task's test set, one column per
// (task, epsilon), rows in the paper's order (the spec `label` names the row). `dp-sft-transfer`
// (Tables 4-5): DP-SFT with a subspace built on another task, against the target's own
// non-private subspace ("ideal") and Full-DP. Runs come from experiments/glue/run.sh.
#include "methods/dp_sft/report_tables.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/report/summary.hpp"
#include "core/util/error.hpp"

namespace dpft::dp_sft {

using namespace report;

namespace {

// The shared data's directory names as the paper names the tasks.
std::string task_name(const std::string& dataset) {
  static const std::map<std::string, std::string> names = {
      {"glue_sst2", "SST-2"}, {"imdb_subset", "IMDB"}, {"qnli", "QNLI"},
      {"mnli", "MNLI"},       {"glue_rte", "RTE"},     {"qqp", "QQP"}};
  auto it = names.find(dataset);
  return it == names.end() ? dataset : it->second;
}

Table glue(const std::vector<RunRecord>& runs, const TableDef& def) {
  Collected acc{"accuracy", "Test accuracy (↑)", {}, {}};
  Collected f1{"macro_f1", "Test macro-F1 (↑)", {}, {}};
  std::vector<RunRecord> kept;  // the runs shown: the only ones checked for pooling
  for (const auto& r : runs) {
    auto a = number_at(r.metrics, {"eval", "final", "classification", "accuracy"});
    if (!a) {
      spdlog::warn("skipped {}: {}", r.dir.string(),
                   number_at(r.metrics, {"eval", "final", "loss"})
                       ? "no eval.final.classification (not a classifier's run)"
                       : missing_eval_reason(r));
      continue;
    }
    kept.push_back(r);
    const ColKey k{task_name(r.dataset), r.eps};
    acc.by_label[r.label][k].push_back(*a);
    if (auto f = number_at(r.metrics, {"eval", "final", "classification", "macro_f1"}))
      f1.by_label[r.label][k].push_back(*f);
  }
  if (acc.by_label.empty()) throw InputError(no_runs_error("glue", "classification results"));
  check_groups(kept);
  return assemble("Accuracy of the fine-tuned classifier on each task's test set (mean ± std "
                  "over seeds)",
                  {acc, f1}, def.row_order);
}

const std::string kMoved = "Transferred subspace";
const std::string kIdeal = "Own subspace, non-private (ideal)";

// Tables 4-5. A transfer run is a dp-sft run whose public stage 1 read another task's data
// (privacy.stage1_public.data); its column is "SOURCE → TARGET" at its epsilon. The ideal is the
// target's dp-sft runs with a private stage 1 of as many steps at epsilon inf (non-private both
// stages: the paper's "1-epoch subspace" of Table 3), shown in every column of that target;
// Full-DP the target's Full-DP runs at the column's epsilon. The two Δ rows are differences of
// the means (the paper's "Δ vs Ideal", "Δ vs Full-DP").
Table transfer(const std::vector<RunRecord>& runs, const TableDef& def) {
  check_groups(runs);
  std::map<ColKey, std::vector<double>> moved, full_dp;                  // (target, eps)
  std::map<std::pair<std::string, int64_t>, std::vector<double>> ideal;  // (target, stage-1 steps)
  std::map<std::string, std::string> direction;  // target -> "SOURCE → TARGET"
  std::map<std::string, int64_t> moved_steps;    // target -> stage-1 steps
  for (const auto& r : runs) {
    auto a = number_at(r.metrics, {"eval", "final", "classification", "accuracy"});
    if (!a) continue;
    const std::string target = task_name(r.dataset);
    if (r.label == "Full-DP") {
      full_dp[{target, r.eps}].push_back(*a);
      continue;
    }
    if (string_at(r.metrics, {"run", "method"}).value_or("") != "dp-sft") continue;
    if (auto pub = string_at(r.metrics, {"privacy", "stage1_public", "data"})) {
      const std::string source =
          task_name(std::filesystem::path(*pub).parent_path().filename().string());
      if (source == target) continue;  // a public part of the task's own data: not a transfer
      const auto steps = number_at(r.metrics, {"privacy", "stage1_public", "steps"});
      if (auto it = moved_steps.find(target);
          !steps || (it != moved_steps.end() && it->second != static_cast<int64_t>(*steps))) {
        spdlog::warn(
            "skipped {}: its stage 1 has no step count or another one than the other "
            "transfers to {}",
            r.dir.string(), target);
        continue;
      }
      const std::string dir = source + " → " + target;
      if (auto it = direction.find(target); it != direction.end() && it->second != dir)
        throw InputError(
            fmt::format("report dp-sft-transfer: runs transfer both {} and {}; give "
                        "one source per target task",
                        it->second, dir));
      direction[target] = dir;
      moved_steps[target] = static_cast<int64_t>(*steps);
      moved[{target, r.eps}].push_back(*a);
    } else if (std::isinf(r.eps) && !find(r.metrics, {"subspace", "file"})) {
      if (auto steps = number_at(r.metrics, {"privacy", "stage1", "steps"}))
        ideal[{target, static_cast<int64_t>(*steps)}].push_back(*a);
    }
  }
  if (moved.empty())
    throw InputError(no_runs_error("dp-sft-transfer",
                                   "a dp-sft run whose public stage 1 read another task's data"));
  Collected acc{"accuracy", "Test accuracy on the target task (↑)", {}, {}};
  for (const auto& [key, xs] : moved) {
    const auto& [target, eps] = key;
    const ColKey col{direction.at(target), eps};
    acc.by_label[kMoved][col] = xs;
    if (auto it = ideal.find({target, moved_steps.at(target)}); it != ideal.end())
      acc.by_label[kIdeal][col] = it->second;
    if (auto it = full_dp.find(key); it != full_dp.end() && std::isfinite(eps))
      acc.by_label["Full-DP"][col] = it->second;
  }
  Table t = assemble(
      "Subspace transfer: DP-SFT on the target task with a subspace built on the "
      "source task, against the target's own non-private subspace (mean ± std "
      "over seeds; Δ rows: differences of the means)",
      {acc}, def.row_order);
  Block& b = t.blocks.front();
  auto cells_of = [&](const std::string& label) -> const Row* {
    for (const Row& r : b.rows)
      if (r.label == label) return &r;
    return nullptr;
  };
  const Row* m = cells_of(kMoved);
  for (const auto& [label, other] :
       {std::pair<std::string, std::string>{"Δ vs ideal", kIdeal}, {"Δ vs Full-DP", "Full-DP"}}) {
    const Row* o = cells_of(other);
    if (!o) continue;
    Row d{label, {}, true};
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (m->cells[c] && o->cells[c])
        d.cells.push_back(Stat{1, m->cells[c]->mean - o->cells[c]->mean, std::nan("")});
      else
        d.cells.push_back(std::nullopt);
    }
    b.rows.push_back(d);
  }
  return t;
}

}  // namespace

std::vector<TableDef> report_tables() {
  static const std::vector<std::string> glue_order = {"Full-tuning", "Full-DP", "LoRA-DP",
                                                      "Adapter-DP", "DP-SFT"};
  // experiments/glue/dp_sft_specs.py's labels, in the order of the paper's tables.
  static const std::vector<std::string> dp_sft_order = {"Full-tuning",
                                                        "Full-DP",
                                                        "LoRA-DP",
                                                        "Adapter-DP",
                                                        "DP-SFT (private, p1 1/2)",
                                                        "DP-SFT (private, p1 3/7)",
                                                        "DP-SFT (public 10 %)",
                                                        "Public 10 % only (non-private)",
                                                        "DP-SFT (noisy, eps1 3 + eps2 1)",
                                                        "DP-SFT (private, 768-step subspace)",
                                                        "DP-SFT (private, p1 1/2, k 8)",
                                                        "DP-SFT (private, p1 1/2, k 16)",
                                                        "DP-SFT (private, p1 1/2, k 64)"};
  return {{"glue", "DP-SFT Tables 1-2: test accuracy and macro-F1 of GLUE / IMDB classifiers",
           glue_order, glue},
          {"dp-sft",
           "DP-SFT Tables 1-3 and 6, k sweep: the baselines and every DP-SFT variant, test "
           "accuracy and macro-F1 per task and epsilon",
           dp_sft_order, glue},
          {"dp-sft-transfer",
           "DP-SFT Tables 4-5: a subspace built on another task, against the target's own "
           "non-private subspace and Full-DP",
           {kMoved, kIdeal, "Full-DP"},
           transfer}};
}

}  // namespace dpft::dp_sft
