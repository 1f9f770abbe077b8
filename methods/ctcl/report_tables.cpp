#include "methods/ctcl/report_tables.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/report/plot.hpp"
#include "core/report/summary.hpp"
#include "core/util/error.hpp"

namespace dpft::ctcl {

using namespace report;

namespace {

// The shared data's directory names as the paper names the data sets.
std::string data_name(const std::string& dataset) {
  if (dataset == "pubmed") return "PubMed";
  if (dataset == "yelp_augpe") return "Yelp";
  if (dataset == "chatbot_arena_sample") return "Chatbot Arena";
  return dataset;
}

// A classification column: the data set and which label ("Yelp category"; Yelp's label columns
// as the shared data names them, others as written).
std::string label_column_name(const std::string& dataset, const std::string& column) {
  if (column.empty() || column == "main") return data_name(dataset);
  if (dataset == "yelp_augpe" && column == "label1") return "Yelp category";
  if (dataset == "yelp_augpe" && column == "label2") return "Yelp stars";
  return data_name(dataset) + " " + column;
}

// Rows: the paper's order (Tables 3-4), with the labels dpft's methods and specs give.
const std::vector<std::string>& row_order() {
  static const std::vector<std::string> order = {
      "Downstream DPFT", "GPT-2 vanilla",   "PE",  "Aug-PE",
      "BART vanilla",    "BART + keywords", "CTCL"};
  return order;
}

// One scorer per column: a synthetic set's downstream numbers compare with another's only when
// the same recipe (eval-synthetic's --lm-* / --clf-* options, recorded beside the numbers) trained
// both downstream models. A column whose sets were scored by two recipes is refused, naming them.
class OneScorer {
 public:
  explicit OneScorer(std::string table) : table_(std::move(table)) {}

  // e: one synthetic_eval entry of the run in `dir`, shown in `column`.
  void add(const std::string& column, const nlohmann::json& e, const std::filesystem::path& dir) {
    std::string recipe;
    for (const char* k : {"downstream_lm", "downstream_classifier"})
      if (const nlohmann::json* d = find(e, {k}); d && d->is_object()) {
        nlohmann::json r = nlohmann::json::object();
        for (const char* f : {"model", "from", "tokenizer", "peft", "labels", "label_column",
                              "steps", "batch", "lr", "max_length"})
          if (d->contains(f)) r[f] = (*d)[f];
        recipe = std::string(k) + " " + r.dump();
      }
    if (recipe.empty()) return;
    const auto [it, fresh] = seen_.try_emplace(column, recipe, dir.string());
    if (fresh || it->second.first == recipe) return;
    throw InputError(fmt::format(
        "{}: the synthetic sets of column '{}' were scored by different downstream recipes, so "
        "the column would compare scorers, not data:\n  {}: {}\n  {}: {}\nrescore one of them "
        "with the other's options (dpft eval-synthetic --run RUN --name NAME ... replaces "
        "synthetic_eval.NAME), or report them apart",
        table_, column, it->second.second, it->second.first, dir.string(), recipe));
  }

 private:
  std::string table_;
  std::map<std::string, std::pair<std::string, std::string>> seen_;  // column -> (recipe, run)
};

// Table 3: the downstream LM trained on the synthetic texts (or, for Downstream DPFT, DP
// fine-tuned on the private texts), scored on the real test texts.
Table generative(const std::vector<RunRecord>& runs, const TableDef& def) {
  Collected acc{"next_token_accuracy",
                "Next-token accuracy of the downstream LM on the real test texts (↑)",
                {},
                {}};
  Collected ppl{"perplexity", "Its perplexity (↓)", {}, {}};
  Collected mauve{"mauve", "MAUVE of the synthetic texts against the real ones (↑)", {}, {}};
  Collected fid{"fid", "FID on the embedder's sentence embeddings (↓)", {}, {}};
  ppl.digits = 2;
  OneScorer one("ctcl-generative");
  std::vector<RunRecord> kept;  // the runs shown: the only ones checked for pooling
  for (const auto& r : runs) {
    const ColKey k{data_name(r.dataset), r.eps};
    if (const nlohmann::json* e = find(r.metrics, {"synthetic_eval", "main"})) {
      one.add(k.first, *e, r.dir);
      if (auto a = number_at(*e, {"downstream_lm", "next_token_accuracy"})) {
        acc.by_label[r.label][k].push_back(*a);
        if (auto p = number_at(*e, {"downstream_lm", "perplexity"}))
          ppl.by_label[r.label][k].push_back(*p);
      }
      if (auto m = number_at(*e, {"mauve", "mauve"})) mauve.by_label[r.label][k].push_back(*m);
      if (auto f = number_at(*e, {"fid"})) fid.by_label[r.label][k].push_back(*f);
      kept.push_back(r);
      continue;
    }
    if (r.label == "Downstream DPFT") {
      if (auto a = number_at(r.metrics, {"eval", "final", "accuracy"})) {
        acc.by_label[r.label][k].push_back(*a);
        if (auto p = number_at(r.metrics, {"eval", "final", "perplexity"}))
          ppl.by_label[r.label][k].push_back(*p);
        kept.push_back(r);
        continue;
      }
      if (!number_at(r.metrics, {"eval", "final", "loss"})) {
        spdlog::warn("skipped {}: {}", r.dir.string(), missing_eval_reason(r));
        continue;
      }
    }
    spdlog::warn(
        "skipped {}: no synthetic_eval.main (run dpft eval-synthetic --run on it) and "
        "not a Downstream DPFT run with an eval.final",
        r.dir.string());
  }
  if (acc.by_label.empty() && mauve.by_label.empty())
    throw InputError(
        no_runs_error("ctcl-generative", "synthetic_eval.main (dpft eval-synthetic --run)"));
  check_groups(kept);
  return assemble(
      "CTCL Table 3 (generative tasks): a causal LM trained from scratch on each "
      "synthetic set, scored on the real test texts (mean ± std over seeds)",
      {acc, ppl, mauve, fid}, def.row_order);
}

// Table 4: downstream classifiers, one column per data set and label column (synthetic_eval.<name>,
// name = the label column the classifier learnt).
Table classification(const std::vector<RunRecord>& runs, const TableDef& def) {
  Collected acc{
      "accuracy", "Accuracy of the downstream classifier on the real test texts (↑)", {}, {}};
  // Accuracy alone flatters a classifier that learnt the majority class; these two do not.
  Collected f1{"macro_f1", "Its macro-F1 over the classes (↑)", {}, {}};
  Collected mcc{"mcc", "Its Matthews correlation (↑; 0 for a constant prediction)", {}, {}};
  Collected mauve{"mauve", "MAUVE of the synthetic texts against the real ones (↑)", {}, {}};
  Collected fid{"fid", "FID on the embedder's sentence embeddings (↓)", {}, {}};
  // add_scores: a classifier's numbers (`clf`: downstream_classifier or eval.final.classification).
  const auto add_scores = [&](const std::string& label, const ColKey& k, const nlohmann::json& clf,
                              double accuracy) {
    acc.by_label[label][k].push_back(accuracy);
    if (auto f = number_at(clf, {"macro_f1"})) f1.by_label[label][k].push_back(*f);
    if (auto m = number_at(clf, {"mcc"})) mcc.by_label[label][k].push_back(*m);
  };
  OneScorer one("ctcl-classification");
  std::vector<RunRecord> kept;  // the runs shown: the only ones checked for pooling
  for (const auto& r : runs) {
    bool any = false;
    if (const nlohmann::json* all = find(r.metrics, {"synthetic_eval"}); all && all->is_object())
      for (const auto& [name, e] : all->items())
        if (auto a = number_at(e, {"downstream_classifier", "accuracy"});
            a && !find(e, {"synthetic", "subset"})) {  // subsets: the scaling table's
          const ColKey k{label_column_name(r.dataset, name), r.eps};
          one.add(k.first, e, r.dir);
          add_scores(r.label, k, *find(e, {"downstream_classifier"}), *a);
          if (auto m = number_at(e, {"mauve", "mauve"})) mauve.by_label[r.label][k].push_back(*m);
          if (auto f = number_at(e, {"fid"})) fid.by_label[r.label][k].push_back(*f);
          any = true;
        }
    if (any) {
      kept.push_back(r);
      continue;
    }
    if (r.label == "Downstream DPFT") {
      if (auto a = number_at(r.metrics, {"eval", "final", "classification", "accuracy"})) {
        // Its column: the data set and the label column it was trained on, where the synthetic
        // sets' evaluations named after that column (eval-synthetic --run --name label1) go.
        const std::string col = string_at(r.metrics, {"run", "label_column"}).value_or("");
        add_scores(r.label, {label_column_name(r.dataset, col), r.eps},
                   *find(r.metrics, {"eval", "final", "classification"}), *a);
        kept.push_back(r);
        continue;
      }
      if (!number_at(r.metrics, {"eval", "final", "loss"})) {
        spdlog::warn("skipped {}: {}", r.dir.string(), missing_eval_reason(r));
        continue;
      }
    }
    spdlog::warn(
        "skipped {}: no synthetic_eval with a downstream_classifier and not a "
        "Downstream DPFT classifier run",
        r.dir.string());
  }
  if (acc.by_label.empty())
    throw InputError(no_runs_error(
        "ctcl-classification", "a downstream classifier (dpft eval-synthetic --run --classify)"));
  check_groups(kept);
  return assemble(
      "CTCL Table 4 (classification): a classifier trained on each labelled synthetic "
      "set, scored on the real test texts (mean ± std over seeds)",
      {acc, f1, mcc, mauve, fid}, def.row_order);
}

// Table 5: CTCL against its ablations, the downstream LM's perplexity.
Table ablation(const std::vector<RunRecord>& runs, const TableDef& def) {
  Collected ppl{"perplexity", "Perplexity of the downstream LM on the real test texts (↓)", {}, {}};
  ppl.digits = 2;
  OneScorer one("ctcl-ablation");
  std::vector<RunRecord> kept;  // the runs shown: the only ones checked for pooling
  for (const auto& r : runs) {
    if (auto p = number_at(r.metrics, {"synthetic_eval", "main", "downstream_lm", "perplexity"})) {
      one.add(data_name(r.dataset), *find(r.metrics, {"synthetic_eval", "main"}), r.dir);
      ppl.by_label[r.label][{data_name(r.dataset), r.eps}].push_back(*p);
      kept.push_back(r);
    } else
      spdlog::warn("skipped {}: no synthetic_eval.main.downstream_lm", r.dir.string());
  }
  if (ppl.by_label.empty())
    throw InputError(no_runs_error("ctcl-ablation", "synthetic_eval.main.downstream_lm"));
  check_groups(kept);
  return assemble(
      "CTCL Table 5 (ablation): the downstream LM's perplexity on the real test texts "
      "(mean ± std over seeds)",
      {ppl}, def.row_order);
}

// One point of Fig. 3's scaling in N_syn: a synthetic set of a run (its main set or a subset),
// its N_syn (synthetic.requested: what the method was asked for, before ctcl's post-filter)
// and its downstream accuracy on the real test texts: the LM's next-token accuracy for a
// generative data set, the classifier's accuracy for a labelled one. `column`: the data set,
// with the classifier's label column.
struct ScalingPoint {
  std::string column;
  double n = 0, accuracy = 0;
  std::optional<double> perplexity;      // the downstream LM's (generative sets only)
  const nlohmann::json* eval = nullptr;  // its synthetic_eval entry
};

// A scored set's downstream accuracy and its column: the LM's next-token accuracy (the data
// set), else the classifier's (the data set and its label column).
std::optional<std::pair<std::string, double>> downstream_accuracy(const RunRecord& r,
                                                                  const nlohmann::json& e) {
  if (auto a = number_at(e, {"downstream_lm", "next_token_accuracy"}))
    return std::pair{data_name(r.dataset), *a};
  if (auto c = number_at(e, {"downstream_classifier", "accuracy"}))
    return std::pair{
        label_column_name(r.dataset,
                          string_at(e, {"downstream_classifier", "label_column"}).value_or("")),
        *c};
  return std::nullopt;
}

// The run's scored sets with their N_syn (n 0 where unknown: only with `with_unsized`).
std::vector<ScalingPoint> scaling_points(const RunRecord& r, bool with_unsized = false) {
  std::vector<ScalingPoint> out;
  const nlohmann::json* all = find(r.metrics, {"synthetic_eval"});
  if (!all || !all->is_object()) return out;
  for (const auto& [name, e] : all->items()) {
    const auto n = number_at(e, {"synthetic", "requested"});
    if (!n && !with_unsized) continue;  // evaluated before eval-synthetic recorded N_syn
    if (auto d = downstream_accuracy(r, e))
      out.push_back({d->first, n.value_or(0.0), d->second,
                     number_at(e, {"downstream_lm", "perplexity"}), &e});
  }
  return out;
}

constexpr const char* kNsyn = " N_syn=";

// Fig. 3 (middle, right) as a table: columns "<data set> N_syn=<N>" by N ascending.
Table scaling(const std::vector<RunRecord>& runs, const TableDef& def) {
  // Not check_groups: Aug-PE's sizes are runs of one label with other configs and the same seeds.
  std::map<std::pair<std::string, ColKey>, std::set<int64_t>> seeds;
  Collected acc{"accuracy",
                "Downstream accuracy on the real test texts (↑): next-token accuracy of the LM "
                "(generative), accuracy of the classifier (labelled)",
                {},
                {}};
  // Where next-token accuracy is that of a near-constant predictor (small data), the
  // perplexity still orders the sets.
  Collected ppl{"perplexity", "Its perplexity (↓): the downstream LM (generative sets)", {}, {}};
  ppl.digits = 2;
  OneScorer one("ctcl-scaling");
  for (const auto& r : runs) {
    const auto pts = scaling_points(r);
    for (const auto& p : pts) {
      one.add(p.column, *p.eval, r.dir);
      const ColKey col{fmt::format("{}{}{:g}", p.column, kNsyn, p.n), r.eps};
      if (!seeds[{r.label, col}].insert(r.seed).second)
        spdlog::warn("{} / {} / eps {}: seed {} appears more than once (e.g. {})", r.label,
                     col.first, format_eps(r.eps, "csv"), r.seed, r.dir.string());
      acc.by_label[r.label][col].push_back(p.accuracy);
      if (p.perplexity) ppl.by_label[r.label][col].push_back(*p.perplexity);
    }
    if (pts.empty())
      spdlog::warn(
          "skipped {}: no synthetic_eval with synthetic.requested and a downstream accuracy "
          "(dpft eval-synthetic --run [--subset N] with --lm or --classify)",
          r.dir.string());
  }
  if (acc.by_label.empty())
    throw InputError(no_runs_error("ctcl-scaling",
                                   "a scored synthetic set with its N_syn (dpft eval-synthetic "
                                   "--run [--subset N] --lm | --classify)"));
  Table t = assemble(
      "CTCL Fig. 3: downstream accuracy against the number of synthetic documents (mean ± std "
      "over seeds)",
      ppl.by_label.empty() ? std::vector<Collected>{acc} : std::vector<Collected>{acc, ppl},
      def.row_order);
  // The columns by data set, then N as a number (assemble sorts the names as text), then eps.
  auto key = [](const Column& c) {
    const size_t at = c.dataset.rfind(kNsyn);
    return std::make_tuple(c.dataset.substr(0, at),
                           std::stod(c.dataset.substr(at + std::strlen(kNsyn))), c.eps);
  };
  std::vector<size_t> order(t.columns.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return key(t.columns[a]) < key(t.columns[b]); });
  auto permute = [&](auto& v) {
    std::remove_reference_t<decltype(v)> out;
    for (size_t i : order) out.push_back(v[i]);
    v = std::move(out);
  };
  permute(t.columns);
  for (auto& b : t.blocks)
    for (auto& row : b.rows) permute(row.cells);
  return t;
}

// A Fig. 3 plot's y value of one scored set: its downstream accuracy, or its LM's perplexity
// (none for a classifier's set).
std::optional<double> plot_value(const ScalingPoint& p, PlotScore score) {
  return score == PlotScore::accuracy ? std::optional<double>(p.accuracy) : p.perplexity;
}

// Title, y label and y axis of a Fig. 3 plot of `score`; `against`: what the x axis is.
Plot fig3_plot(const SeriesGroups& groups, PlotScore score, const std::string& against,
               const std::string& xlabel, bool eps_in_name) {
  const bool ppl = score == PlotScore::perplexity;
  Plot p =
      grouped_plot(groups,
                   fmt::format("{} against {}",
                               ppl ? "Downstream LM perplexity" : "Downstream accuracy", against),
                   xlabel,
                   ppl ? "perplexity of the downstream LM on the real test texts (log scale)"
                       : "downstream accuracy on the real test texts",
                   eps_in_name);
  p.logy = ppl;
  return p;
}

const char* plot_kind_suffix(PlotScore score) {
  return score == PlotScore::perplexity ? "-perplexity" : "";
}

}  // namespace

Plot scaling_plot(const std::vector<RunRecord>& runs, PlotScore score) {
  SeriesGroups groups;  // (label, column, eps) -> per run, its (N_syn, value) points
  for (const auto& r : runs) {
    std::map<std::string, std::vector<std::pair<double, double>>> by_column;
    for (const auto& p : scaling_points(r))
      if (auto v = plot_value(p, score)) by_column[p.column].emplace_back(p.n, *v);
    for (auto& [column, pts] : by_column) groups[{r.label, column, r.eps}].push_back(pts);
  }
  if (groups.empty())
    throw InputError(fmt::format(
        "plot ctcl-scaling{}: no run has a scored synthetic set with its N_syn (dpft "
        "eval-synthetic --run [--subset N] with {})",
        plot_kind_suffix(score), score == PlotScore::accuracy ? "--lm or --classify" : "--lm"));
  Plot p = fig3_plot(groups, score, "the number of synthetic documents (CTCL Fig. 3)",
                     "synthetic documents N_syn", true);
  p.logx = true;
  return p;
}

Plot epsilon_plot(const std::vector<RunRecord>& runs, PlotScore score) {
  SeriesGroups groups;  // (label, column, 0) -> per run, its (epsilon, value) point
  for (const auto& r : runs) {
    if (!std::isfinite(r.eps)) continue;  // no place on an epsilon axis
    for (const auto& p : scaling_points(r, /*with_unsized=*/true)) {
      if (find(*p.eval, {"synthetic", "subset"})) continue;  // a Fig. 3 size, not the run's set
      if (auto v = plot_value(p, score)) groups[{r.label, p.column, 0.0}].push_back({{r.eps, *v}});
    }
  }
  if (groups.empty())
    throw InputError(fmt::format(
        "plot ctcl-epsilon{}: no run at a finite epsilon has a scored synthetic set (dpft "
        "eval-synthetic --run with {})",
        plot_kind_suffix(score), score == PlotScore::accuracy ? "--lm or --classify" : "--lm"));
  return fig3_plot(groups, score, "the privacy budget (CTCL Fig. 3, left)", "epsilon", false);
}

std::vector<TableDef> report_tables() {
  return {{"ctcl-generative",
           "CTCL Table 3: downstream next-token accuracy (and perplexity, MAUVE, FID) of each "
           "synthetic set, per data set and epsilon",
           row_order(), generative},
          {"ctcl-classification",
           "CTCL Table 4: downstream classifier accuracy of each labelled synthetic set",
           row_order(), classification},
          {"ctcl-ablation",
           "CTCL Table 5: BART vanilla (no condition pretraining, no keywords), BART + keywords, "
           "CTCL",
           {"BART vanilla", "BART + keywords", "CTCL"},
           ablation},
          {"ctcl-scaling",
           "CTCL Fig. 3: downstream accuracy per number of synthetic documents (N_syn), CTCL's "
           "subsets and Aug-PE's runs",
           row_order(), scaling}};
}

}  // namespace dpft::ctcl
