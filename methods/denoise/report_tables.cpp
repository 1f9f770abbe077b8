// Paper 003's Tables 2-3 (GLUE: steps to a share of a reference accuracy) and 4-5 (E2E / DART:
// generation metrics after 50 and 400 steps) for `dpft report`. Runs come from
// experiments/denoise/run.sh; the spec `label` (or the method's: DP-SGD, DP-SGD+Denoise) names
// the row.
#include "methods/denoise/report_tables.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <set>
#include <tuple>

#include "core/report/summary.hpp"
#include "core/util/error.hpp"

namespace dpft::denoise {

using namespace report;

namespace {

const std::string kBaseline = "DP-SGD", kDenoised = "DP-SGD+Denoise";

std::optional<double> final_accuracy(const nlohmann::json& m) {
  if (auto a = number_at(m, {"eval", "final", "classification", "accuracy"})) return a;
  return number_at(m, {"eval", "final", "accuracy"});
}

// eval.steps_to_accuracy.<share>.step, or nullopt (not recorded, or never reached).
std::optional<double> steps_to(const nlohmann::json& m, const char* share) {
  return number_at(m, {"eval", "steps_to_accuracy", share, "step"});
}

Table glue(const std::vector<RunRecord>& runs, const TableDef& def) {
  Collected acc{"accuracy", "Final accuracy after T steps (↑)", {}, {}};
  Collected s90{"steps_90", "Steps to 90 % of the reference (↓)", {}, {}, 0};
  Collected s95{"steps_95", "Steps to 95 % of the reference (↓)", {}, {}, 0};
  Collected up90{"speedup_90", "Speedup to 90 %: baseline steps / steps - 1 (↑)", {}, {}};
  Collected up95{"speedup_95", "Speedup to 95 % (↑)", {}, {}};
  std::set<double> references;
  // (dataset, eps, seed) -> the baseline's steps, for the paired speedup.
  std::map<std::tuple<std::string, double, int64_t>,
           std::pair<std::optional<double>, std::optional<double>>>
      baseline;
  for (const auto& r : runs)
    if (r.label == kBaseline)
      baseline[{r.dataset, r.eps, r.seed}] = {steps_to(r.metrics, "0.9"),
                                              steps_to(r.metrics, "0.95")};
  std::vector<RunRecord> kept;  // the runs shown: the only ones checked for pooling
  for (const auto& r : runs) {
    auto a = final_accuracy(r.metrics);
    auto ref = number_at(r.metrics, {"eval", "steps_to_accuracy", "reference"});
    if (!a || !ref) {
      if (!number_at(r.metrics, {"eval", "final", "loss"}))
        spdlog::warn("skipped {}: {}", r.dir.string(), missing_eval_reason(r));
      else
        spdlog::warn(
            "skipped {}: no eval.final accuracy or eval.steps_to_accuracy (set "
            "eval.reference_accuracy and eval.every)",
            r.dir.string());
      continue;
    }
    kept.push_back(r);
    references.insert(*ref);
    const ColKey k{r.dataset, r.eps};
    acc.by_label[r.label][k].push_back(*a);
    auto t90 = steps_to(r.metrics, "0.9"), t95 = steps_to(r.metrics, "0.95");
    if (t90) s90.by_label[r.label][k].push_back(*t90);
    if (t95) s95.by_label[r.label][k].push_back(*t95);
    if (r.label != kBaseline) {
      auto it = baseline.find({r.dataset, r.eps, r.seed});
      // Undefined where the run reaches the threshold at step 0 (the base model already
      // does): such pairs are left out, and a cell with none is empty.
      if (it != baseline.end()) {
        if (t90 && *t90 > 0 && it->second.first)
          up90.by_label[r.label][k].push_back(*it->second.first / *t90 - 1);
        if (t95 && *t95 > 0 && it->second.second)
          up95.by_label[r.label][k].push_back(*it->second.second / *t95 - 1);
      }
    }
  }
  if (kept.empty()) throw InputError(no_runs_error("denoise-glue", "steps-to-accuracy results"));
  check_groups(kept);
  std::string refs;
  for (double x : references) refs += (refs.empty() ? "" : ", ") + fmt::format("{:g}", x);
  return assemble(
      fmt::format(
          "Final accuracy and steps to 90 % / 95 % of the reference accuracy "
          "({}); speedups pair each run with the DP-SGD run of the same "
          "seed (undefined, so left out, where a run reaches the threshold at step 0); an empty "
          "cell: never reached (mean ± std over seeds)",
          refs),
      {acc, s90, s95, up90, up95}, def.row_order);
}

Table nlg(const std::vector<RunRecord>& runs, const TableDef& def) {
  check_groups(runs);
  const std::vector<std::pair<const char*, const char*>> metrics = {{"bleu", "BLEU"},
                                                                    {"rouge_l", "ROUGE-L"},
                                                                    {"meteor", "METEOR"},
                                                                    {"nist", "NIST"},
                                                                    {"cider", "CIDEr"}};
  std::map<std::pair<int64_t, std::string>, Collected> blocks;  // (step, metric)
  int used = 0;
  for (const auto& r : runs) {
    const nlohmann::json* h = find(r.metrics, {"eval", "nlg"});
    if (!h || !h->is_array() || h->empty()) {
      spdlog::warn("skipped {}: no eval.nlg (set eval.nlg.at_steps)", r.dir.string());
      continue;
    }
    ++used;
    for (const auto& e : *h) {
      const int64_t step = e.value("step", int64_t{0});
      for (const auto& [key, name] : metrics) {
        if (!e.contains(key) || !e[key].is_number()) continue;
        Collected& c = blocks[{step, key}];
        if (c.key.empty()) {
          c.key = fmt::format("{}@{}", key, step);
          c.title = fmt::format("{} after {} steps (↑)", name, step);
        }
        c.by_label[r.label][{r.dataset, r.eps}].push_back(e[key].get<double>());
      }
    }
  }
  if (used == 0) throw InputError(no_runs_error("denoise-nlg", "eval.nlg results"));
  std::vector<Collected> ordered;
  for (auto& [k, c] : blocks) {  // by step, then in the paper's metric order
    (void)k;
    ordered.push_back(c);
  }
  std::stable_sort(ordered.begin(), ordered.end(), [&](const Collected& a, const Collected& b) {
    auto rank = [&](const Collected& c) {
      const std::string m = c.key.substr(0, c.key.find('@'));
      int64_t step = std::stoll(c.key.substr(c.key.find('@') + 1));
      size_t i = 0;
      while (i < metrics.size() && m != metrics[i].first) ++i;
      return std::make_pair(step, i);
    };
    return rank(a) < rank(b);
  });
  return assemble(
      "Generation metrics of the outputs decoded by beam search after each listed "
      "step (mean ± std over seeds)",
      ordered, def.row_order);
}

}  // namespace

Plot improvement_plot(const std::vector<RunRecord>& runs) {
  SeriesGroups groups;
  for (const auto& r : runs) {
    const nlohmann::json* h = find(r.metrics, {"non_private", "history"});
    if (!h || !h->is_array()) continue;
    std::vector<std::pair<double, double>> pts;
    for (const auto& e : *h) {
      const nlohmann::json* imp = find(e, {"denoise", "diagnostics", "improvement"});
      if (imp && imp->is_number() && e.contains("step"))
        pts.emplace_back(e["step"].get<double>(), imp->get<double>());
    }
    if (pts.empty()) continue;
    groups[{r.label, r.dataset, r.eps}].push_back(pts);
  }
  if (groups.empty())
    throw InputError(
        "plot improvement: no run has denoise diagnostics (method denoise with "
        "diagnostics: true)");
  return grouped_plot(
      groups, "Improvement(t) = cos(Denoise(g~), g) - cos(g~, g), g the clipped mean gradient",
      "step", "Improvement(t)");
}

std::vector<TableDef> report_tables() {
  static const std::vector<std::string> order = {kBaseline, kDenoised};
  return {{"denoise-glue",
           "Denoise Tables 2-3: final accuracy, steps to 90 % / 95 % of a reference accuracy, "
           "speedup over DP-SGD",
           order, glue},
          {"denoise-nlg",
           "Denoise Tables 4-5: BLEU, ROUGE-L, METEOR, NIST, CIDEr after each eval.nlg step", order,
           nlg}};
}

}  // namespace dpft::denoise
