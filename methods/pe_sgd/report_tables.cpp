// The PE-SGD paper's tables for `dpft report` (Zou et al., ICLR 2026): Table 1 (next-token
// loss and accuracy of the trained model; with Table 9's "SFT" row: SFT+DP-SGD's model after
// its SFT stage), Table 2 (loss change of the 10% hardest evaluation samples) and Tables 5 and
// 13 (projection diagnostics), rows in the paper's order.
#include "methods/pe_sgd/report_tables.hpp"

#include <spdlog/spdlog.h>

#include "core/report/summary.hpp"
#include "core/util/error.hpp"

namespace dpft::pe_sgd {

using namespace report;
using json = nlohmann::json;

namespace {

constexpr const char* kSftLabel = "SFT";  // eval.sft of SFT+DP-SGD runs (before any DP step)

Table table1(const std::vector<RunRecord>& runs, const TableDef& def) {
  Collected loss{"loss", "Next Token Prediction Loss (↓)", {}, {}};
  Collected acc{"accuracy", "Next Token Prediction Accuracy (↑)", {}, {}};
  std::vector<RunRecord> kept;  // the runs the table shows: the only ones checked for pooling
  for (const auto& r : runs) {
    auto fl = number_at(r.metrics, {"eval", "final", "loss"});
    if (!fl) {
      spdlog::warn("skipped {}: {}", r.dir.string(), missing_eval_reason(r));
      continue;
    }
    kept.push_back(r);
    ColKey k{r.dataset, r.eps};
    loss.by_label[r.label][k].push_back(*fl);
    if (auto fa = number_at(r.metrics, {"eval", "final", "accuracy"}))
      acc.by_label[r.label][k].push_back(*fa);
    if (r.label == "SFT+DP-SGD") {  // Table 9's "SFT" row: the model after its SFT stage
      if (auto sl = number_at(r.metrics, {"eval", "sft", "loss"}))
        loss.by_label[kSftLabel][k].push_back(*sl);
      if (auto sa = number_at(r.metrics, {"eval", "sft", "accuracy"}))
        acc.by_label[kSftLabel][k].push_back(*sa);
    }
    if (auto bl = number_at(r.metrics, {"eval", "base", "loss"}))
      loss.base_by_dataset[r.dataset].push_back(*bl);
    if (auto ba = number_at(r.metrics, {"eval", "base", "accuracy"}))
      acc.base_by_dataset[r.dataset].push_back(*ba);
  }
  if (loss.by_label.empty()) throw InputError(no_runs_error("pe-sgd-table1", "eval results"));
  check_groups(kept);
  std::vector<Collected> blocks = {loss};
  if (!acc.by_label.empty()) blocks.push_back(acc);
  return assemble("Performance of the trained model (mean ± std over seeds)", blocks,
                  def.row_order);
}

Table longtail(const std::vector<RunRecord>& runs, const TableDef& def) {
  check_groups(runs);
  Collected d{"delta_loss_top10pct",
              "Loss change (final - base) of the 10% samples with the highest base loss (↓)",
              {},
              {}};
  for (const auto& r : runs) {
    double delta;
    try {
      delta = longtail_delta(r);
    } catch (const InputError& e) {
      spdlog::warn("skipped {}: {}", r.dir.string(), e.what());
      continue;
    }
    d.by_label[r.label][{r.dataset, r.eps}].push_back(delta);
  }
  if (d.by_label.empty())
    throw InputError(no_runs_error("pe-sgd-longtail", "a usable per_sample.jsonl"));
  return assemble("Average loss change of the top 10% samples with the largest base-model loss",
                  {d}, def.row_order);
}

// Diagnostics keys in the paper's order, with their tables' titles; others follow by name.
const std::vector<std::pair<std::string, std::string>> kDiagnostics = {
    {"norm_std_over_mean", "STD / Mean of column norms (↓)"},
    {"norm_min_over_max", "Min / Max of column norms (↑)"},
    {"overlap_g_h", "Overlap of synthetic and private gradient subspaces (↑)"},
    {"cosine_mean", "cosine_mean"},
    {"l2_mean", "l2_mean"},
    {"principal_angle_mean_deg", "principal_angle_mean_deg"}};

Table diagnostics(const std::vector<RunRecord>& runs, const TableDef& def) {
  check_groups(runs);
  std::map<std::string, Collected> by_key;
  for (const auto& r : runs) {
    const json* d = report::find(r.metrics, {"non_private", "diagnostics"});
    if (!d) d = report::find(r.metrics, {"diagnostics"});  // dpft.metrics/1 (older runs)
    if (!d || !d->is_object()) continue;  // only projection methods have diagnostics
    for (const auto& [key, v] : d->items())
      if (v.is_number())
        by_key[key].by_label[r.label][{r.dataset, r.eps}].push_back(v.get<double>());
  }
  if (by_key.empty()) throw InputError(no_runs_error("pe-sgd-diagnostics", "a diagnostics block"));
  std::vector<Collected> blocks;
  for (const auto& [key, title] : kDiagnostics) {
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    it->second.key = key;
    it->second.title = title == key ? key : key + ": " + title;
    blocks.push_back(it->second);
    by_key.erase(it);
  }
  for (auto& [key, c] : by_key) {
    c.key = c.title = key;
    blocks.push_back(c);
  }
  return assemble("Projection diagnostics (mean over steps; mean ± std over seeds)", blocks,
                  def.row_order);
}

}  // namespace

const std::vector<std::string>& row_order() {
  static const std::vector<std::string> order = {"SGD",
                                                 "SFT",
                                                 "DP-SGD",
                                                 "SFT+DP-SGD",
                                                 "PDP-SGD",
                                                 "GEP",
                                                 "GEP-NoResidual",
                                                 "InPro",
                                                 "PE-SGD-FixSample",
                                                 "PE-SGD"};
  return order;
}

std::vector<TableDef> report_tables() {
  return {
      {"pe-sgd-table1", "Table 1 (+ Table 9's SFT row): final next-token loss and accuracy",
       row_order(), table1},
      {"pe-sgd-longtail", "Table 2: loss change of the 10% samples with the highest base loss",
       row_order(), longtail},
      {"pe-sgd-diagnostics", "Tables 5 and 13: projection diagnostics", row_order(), diagnostics}};
}

}  // namespace dpft::pe_sgd
