// The DP-SFT paper's Tables 1-2 for `dpft report` (Sec. 5, "Baselines"): the accuracy of the
// final classifier on each task's test set, one column per (task, epsilon), rows in the
// paper's order. Runs come from experiments/glue/run.sh (their spec `label` names the row).
#include "methods/dp_sft/report_tables.hpp"

#include <spdlog/spdlog.h>

#include <map>

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
  check_groups(runs);
  Collected acc{"accuracy", "Test accuracy (↑)", {}, {}};
  Collected f1{"macro_f1", "Test macro-F1 (↑)", {}, {}};
  for (const auto& r : runs) {
    auto a = number_at(r.metrics, {"eval", "final", "classification", "accuracy"});
    if (!a) {
      spdlog::warn("skipped {}: no eval.final.classification (not a classifier's run, or its "
                   "eval set holds training rows)",
                   r.dir.string());
      continue;
    }
    const ColKey k{task_name(r.dataset), r.eps};
    acc.by_label[r.label][k].push_back(*a);
    if (auto f = number_at(r.metrics, {"eval", "final", "classification", "macro_f1"}))
      f1.by_label[r.label][k].push_back(*f);
  }
  if (acc.by_label.empty()) throw InputError(no_runs_error("glue", "classification results"));
  return assemble("Accuracy of the fine-tuned classifier on each task's test set (mean ± std "
                  "over seeds)",
                  {acc, f1}, def.row_order);
}

}  // namespace

std::vector<TableDef> report_tables() {
  static const std::vector<std::string> order = {"Full-tuning", "Full-DP", "LoRA-DP",
                                                 "Adapter-DP", "DP-SFT"};
  return {{"glue", "DP-SFT Tables 1-2: test accuracy and macro-F1 of GLUE / IMDB classifiers",
           order, glue}};
}

}  // namespace dpft::dp_sft
