#include "core/report/summary.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>

#include "core/util/error.hpp"

namespace dpft::report {

namespace {

// The metrics of the summary in their order: a path under eval.final and a full name;
// lm_only: a language model's (a classifier's top-level accuracy is its class accuracy, shown
// once, and its perplexity means nothing).
struct Metric {
  std::vector<const char*> path;
  std::string key, title;
  bool lm_only = false;
};

const std::vector<Metric>& metrics() {
  static const std::vector<Metric> m = {
      {{"loss"}, "loss", "Eval loss (↓)"},
      {{"accuracy"}, "accuracy", "Next-token accuracy (↑)", true},
      {{"perplexity"}, "perplexity", "Perplexity (↓)", true},
      {{"classification", "accuracy"}, "class_accuracy", "Classification accuracy (↑)"},
      {{"classification", "macro_f1"}, "macro_f1", "Macro-F1 (↑)"},
      {{"classification", "mcc"}, "mcc", "Matthews correlation (MCC, ↑)"},
  };
  return m;
}

std::optional<double> value_at(const nlohmann::json& j, const std::vector<const char*>& path) {
  const nlohmann::json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return std::nullopt;
    p = &(*p)[k];
  }
  if (!p->is_number()) return std::nullopt;
  return p->get<double>();
}

// The column's dataset: the run's, with its privacy unit when that is not the example.
std::string dataset_with_unit(const RunRecord& r) {
  const auto unit = string_at(r.metrics, {"privacy", "unit", "unit"});
  return unit && *unit != "example" ? fmt::format("{} (per {})", r.dataset, *unit) : r.dataset;
}

// A classifier's run (data.task classification): a labelled private set, scored by class.
bool is_classifier(const RunRecord& r) {
  return find(r.metrics, {"run", "label_column"}) &&
         find(r.metrics, {"eval", "final", "classification"});
}

}  // namespace

std::string missing_eval_reason(const RunRecord& r) {
  if (find(r.metrics, {"non_private", "eval"}))
    return "its eval set holds training rows, so its eval results are non-private statistics "
           "(metrics.json non_private.eval), left out of tables";
  const nlohmann::json* e = find(r.metrics, {"eval"});
  if (!e || e->is_null() || !find(r.metrics, {"eval", "final"}))
    return "it has no eval results (no data.eval, or it did not finish its final evaluation)";
  return "eval.final.loss is not a number (NaN: the model diverged?)";
}

Table summary_table(const std::vector<RunRecord>& runs, const TableDef& def) {
  std::vector<RunRecord> kept;
  for (const RunRecord& r : runs) {
    if (!number_at(r.metrics, {"eval", "final", "loss"})) {
      spdlog::warn("skipped {}: {}", r.dir.string(), missing_eval_reason(r));
      continue;
    }
    RunRecord k = r;
    k.dataset = dataset_with_unit(r);
    kept.push_back(std::move(k));
  }
  if (kept.empty()) throw InputError(no_runs_error(def.name, "a final evaluation"));
  check_groups(kept);
  std::vector<Collected> blocks;
  for (const Metric& m : metrics()) {
    Collected c{m.key, m.title, {}, {}};
    for (const RunRecord& r : kept) {
      if (m.lm_only && is_classifier(r)) continue;
      const nlohmann::json* fin = find(r.metrics, {"eval", "final"});
      if (auto v = value_at(*fin, m.path)) c.by_label[r.label][{r.dataset, r.eps}].push_back(*v);
      if (const nlohmann::json* base = find(r.metrics, {"eval", "base"}))
        if (auto v = value_at(*base, m.path)) c.base_by_dataset[r.dataset].push_back(*v);
    }
    if (!c.by_label.empty()) blocks.push_back(std::move(c));
  }
  // Each named eval set (data.eval_sets): its loss and accuracy.
  std::map<std::string, std::pair<Collected, Collected>> sets;
  for (const RunRecord& r : kept) {
    const nlohmann::json* s = find(r.metrics, {"eval", "final", "sets"});
    if (!s || !s->is_object()) continue;
    for (const auto& [name, block] : s->items()) {
      auto it = sets.find(name);
      if (it == sets.end())
        it = sets.emplace(name,
                          std::pair<Collected, Collected>{
                              {"sets." + name + ".loss", "Eval loss on " + name + " (↓)", {}, {}},
                              {"sets." + name + ".accuracy",
                               "Next-token accuracy on " + name + " (↑)",
                               {},
                               {}}})
                 .first;
      if (auto v = value_at(block, {"loss"}))
        it->second.first.by_label[r.label][{r.dataset, r.eps}].push_back(*v);
      if (auto v = value_at(block, {"accuracy"}))
        it->second.second.by_label[r.label][{r.dataset, r.eps}].push_back(*v);
    }
  }
  for (auto& [name, pair] : sets) {
    if (!pair.first.by_label.empty()) blocks.push_back(pair.first);
    if (!pair.second.by_label.empty()) blocks.push_back(pair.second);
  }
  Table t = assemble(
      "Final evaluation of each method (mean ± std over seeds, n runs per cell; the base "
      "model's row: its mean)",
      blocks, def.row_order);
  t.n_in_cells = true;
  return t;
}

}  // namespace dpft::report
