// `dpft report`: hand-written run directories (metrics.json, per_sample.jsonl) with expected
// means and sample standard deviations worked out by hand in the comments; grouping, eps order,
// the base row, the long-tail selection, skipped runs, rendering and errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/report/report.hpp"
#include "core/report/summary.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/log.hpp"
#include "methods/tables.hpp"
#include "test_util.hpp"

using namespace dpft;
using Catch::Matchers::Contains;
using json = nlohmann::json;

namespace {

// One fake run; the fields are what metrics.json carries (docs/outputs.md).
struct FakeRun {
  std::string label;  // "" = no run.label (the report then uses the method)
  std::string method = "dp-sgd";
  std::string dataset = "../shared/data/pe_sgd_text/pubmed/dev.csv";
  std::string dataset_name;  // run.dataset_name when set
  json target_eps = 1.0;
  json spent_eps = 0.98;
  int seed = 0;
  double base_loss = 3.0, base_acc = 0.5;
  double final_loss = 2.0, final_acc = 0.6;
  std::string status = "ok";
  json diagnostics;              // null: none
  json sft;                      // eval.sft {loss, accuracy}; null: none
  json lr;                       // train.lr; null: no train block
  json classification;           // eval.final.classification; null: none (an LM run)
  std::vector<json> per_sample;  // lines of per_sample.jsonl; empty: no file
};

void write_run(const fs::path& dir, const FakeRun& r) {
  fs::create_directories(dir);
  json run = {{"name", "x"},        {"run_id", dir.filename().string()},
              {"method", r.method}, {"dataset", r.dataset},
              {"seed", r.seed},     {"config_hash", "hash-" + r.label + r.method}};
  if (!r.label.empty()) run["label"] = r.label;
  if (!r.dataset_name.empty()) run["dataset_name"] = r.dataset_name;
  json m = {{"schema", "dpft.metrics/1"},
            {"status", r.status},
            {"run", run},
            {"privacy", {{"target_epsilon", r.target_eps}, {"epsilon", r.spent_eps}}},
            {"eval",
             {{"base", {{"loss", r.base_loss}, {"accuracy", r.base_acc}}},
              {"final", {{"loss", r.final_loss}, {"accuracy", r.final_acc}}}}}};
  if (!r.diagnostics.is_null()) m["diagnostics"] = r.diagnostics;
  if (!r.sft.is_null()) m["eval"]["sft"] = r.sft;
  if (!r.classification.is_null()) m["eval"]["final"]["classification"] = r.classification;
  if (!r.lr.is_null()) m["train"] = {{"lr", r.lr}};
  write_json_atomic(dir / "metrics.json", m);
  if (!r.per_sample.empty()) {
    std::string text;
    for (const auto& l : r.per_sample) text += l.dump() + "\n";
    write_file_atomic(dir / "per_sample.jsonl", text);
  }
}

// A run whose eval set held training rows: its eval moved to non_private, as the runner moves
// it, and another configuration (a run the reports must skip before the pooling checks).
void write_overlap_run(const fs::path& dir, const FakeRun& r) {
  write_run(dir, r);
  json m = json::parse(read_file(dir / "metrics.json"));
  m["non_private"]["eval"] = m["eval"];
  m["eval"] = nullptr;
  m["run"]["config_hash"] = "another";
  write_json_atomic(dir / "metrics.json", m);
}

FakeRun dp(const std::string& label, json eps, int seed, double final_loss) {
  FakeRun r;
  r.label = label;
  r.target_eps = eps;
  r.spent_eps = eps.is_string() ? json("inf") : json(eps.get<double>() * 0.98);
  r.seed = seed;
  r.final_loss = final_loss;
  return r;
}

json sample(const std::string& model, int index, double loss) {
  return {{"model", model}, {"index", index}, {"loss", loss}, {"tokens", 10}, {"accuracy", 0.5}};
}

const report::Row& row(const report::Block& b, const std::string& label) {
  for (const auto& r : b.rows)
    if (r.label == label) return r;
  static const report::Row none;
  FAIL("no row " << label);
  return none;
}

// Splits one CSV line without quoted fields.
std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',')
      out.emplace_back();
    else
      out.back().push_back(c);
  }
  return out;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("summarize: mean and sample standard deviation (n-1)", "[report]") {
  // {1, 2, 4}: mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9; / (n-1) = 7/3.
  auto s = report::summarize({1, 2, 4});
  CHECK(s.n == 3);
  CHECK(s.mean == Approx(7.0 / 3));
  CHECK(s.std == Approx(std::sqrt(7.0 / 3)));
  auto one = report::summarize({5});
  CHECK(one.n == 1);
  CHECK(one.mean == 5);
  CHECK(std::isnan(one.std));
}

TEST_CASE("report table1: grouping by label, dataset and eps, mean ± std over seeds", "[report]") {
  test::TempDir d;
  // DP-SGD eps 1 on pubmed, seeds 0..2: loss 2.0, 2.2, 2.4 -> 2.2 ± 0.2 (squares 0.04+0+0.04,
  // / 2 = 0.04); accuracy 0.50, 0.52, 0.54 -> 0.52 ± 0.02.
  for (int s = 0; s < 3; ++s) {
    FakeRun r = dp("DP-SGD", 1.0, s, 2.0 + 0.2 * s);
    r.final_acc = 0.50 + 0.02 * s;
    write_run(d.path / "a" / ("s" + std::to_string(s)), r);
  }
  // The same label on another dataset (bioRxiv) is another column, not the same cell.
  FakeRun b = dp("DP-SGD", 1.0, 0, 1.5);
  b.dataset = "data/bioRxiv/train.csv";
  b.base_loss = 2.5;
  write_run(d.path / "b", b);
  // run.dataset_name overrides the directory name: this run joins the pubmed cell.
  FakeRun n = dp("DP-SGD", 1.0, 3, 2.2);
  n.final_acc = 0.52;
  n.dataset = "elsewhere/train.csv";
  n.dataset_name = "pubmed";
  write_run(d.path / "c", n);

  auto loaded = report::load_runs({d.path});
  REQUIRE(loaded.runs.size() == 5);
  auto t = build_report_table("pe-sgd-table1", loaded.runs);
  REQUIRE(t.columns.size() == 2);
  CHECK(t.columns[0].dataset == "bioRxiv");
  CHECK(t.columns[1].dataset == "pubmed");
  REQUIRE(t.blocks.size() == 2);
  const auto& loss = row(t.blocks[0], "DP-SGD");
  REQUIRE(loss.cells[1]);
  // pubmed: seeds 0..3 with losses 2.0, 2.2, 2.4, 2.2 -> mean 2.2; squares 0.04+0+0.04+0 = 0.08,
  // / 3 -> std sqrt(0.08/3) = 0.163299...
  CHECK(loss.cells[1]->n == 4);
  CHECK(loss.cells[1]->mean == Approx(2.2));
  CHECK(loss.cells[1]->std == Approx(0.1632993162));
  CHECK(loss.cells[0]->n == 1);
  CHECK(loss.cells[0]->mean == Approx(1.5));
  const auto& acc = row(t.blocks[1], "DP-SGD");
  CHECK(acc.cells[1]->mean == Approx(0.52));
  // accuracies 0.50, 0.52, 0.54, 0.52: squares 4e-4 + 0 + 4e-4 + 0 = 8e-4, / 3
  CHECK(acc.cells[1]->std == Approx(std::sqrt(8e-4 / 3)));
  std::string md = report::render(t, "md");
  CHECK_THAT(md, Contains("| DP-SGD | 1.5000 (n=1) | 2.2000 ± 0.1633 |"));
  // Counts differ (1 and 4): a runs-per-cell table follows.
  CHECK_THAT(md, Contains("Runs per cell"));
  CHECK_THAT(md, Contains("| DP-SGD | 1 | 4 |"));
}

TEST_CASE("report table1: eps columns numeric with inf last, sgd only in the inf column",
          "[report]") {
  test::TempDir d;
  // Directory names in an order that is neither numeric nor the wanted one.
  write_run(d.path / "r1", dp("DP-SGD", 10.0, 0, 2.10));
  write_run(d.path / "r2", dp("DP-SGD", "inf", 0, 2.00));
  write_run(d.path / "r3", dp("DP-SGD", 8.0, 0, 2.20));
  write_run(d.path / "r4", dp("DP-SGD", 1.0, 0, 2.40));
  FakeRun sgd;  // non-private: spec epsilon left at its default 8, spent inf
  sgd.method = "sgd";
  sgd.target_eps = 8.0;
  sgd.spent_eps = "inf";
  sgd.final_loss = 1.9;
  write_run(d.path / "r5", sgd);
  FakeRun none = sgd;  // no target epsilon at all (null) -> inf as well
  none.label = "Other";
  none.target_eps = nullptr;
  write_run(d.path / "r6", none);

  auto t = build_report_table("pe-sgd-table1", report::load_runs({d.path}).runs);
  REQUIRE(t.columns.size() == 4);
  CHECK(t.columns[0].eps == 1);
  CHECK(t.columns[1].eps == 8);
  CHECK(t.columns[2].eps == 10);
  CHECK(std::isinf(t.columns[3].eps));
  const auto& s = row(t.blocks[0], "SGD");  // label from the method, canonical spelling
  CHECK_FALSE(s.cells[0]);
  CHECK_FALSE(s.cells[1]);
  CHECK_FALSE(s.cells[2]);
  REQUIRE(s.cells[3]);
  CHECK(s.cells[3]->mean == Approx(1.9));
  CHECK(row(t.blocks[0], "Other").cells[3]);

  CHECK_THAT(report::render(t, "md"),
             Contains("| Method | pubmed ε=1 | pubmed ε=8 | pubmed ε=10 | pubmed ε=∞ |"));
  CHECK_THAT(report::render(t, "csv"), Contains("pubmed eps=10 n,pubmed eps=inf mean"));
  CHECK_THAT(report::render(t, "latex"),
             Contains("& $\\epsilon = 10$ & $\\epsilon = \\infty$ \\\\"));
}

TEST_CASE("report table1: base model row first, then the paper's method order", "[report]") {
  test::TempDir d;
  // Base loss 3.0 in six runs and 3.3 in two: mean (18 + 6.6) / 8 = 3.075.
  const std::vector<std::string> labels = {"Zeta",  "PE-SGD",           "GEP",
                                           "Alpha", "PE-SGD-FixSample", "SGD"};
  for (size_t i = 0; i < labels.size(); ++i)
    write_run(d.path / ("r" + std::to_string(i)), dp(labels[i], 1.0, 0, 2.0));
  for (int s = 0; s < 2; ++s) {
    FakeRun r = dp("", 1.0, s, 2.0);  // no label: the method "dp-sgd" -> "DP-SGD"
    r.base_loss = 3.3;
    write_run(d.path / ("m" + std::to_string(s)), r);
  }
  auto t = build_report_table("pe-sgd-table1", report::load_runs({d.path}).runs);
  std::vector<std::string> order;
  for (const auto& r : t.blocks[0].rows) order.push_back(r.label);
  CHECK(order == std::vector<std::string>{"Base Model", "SGD", "DP-SGD", "GEP", "PE-SGD-FixSample",
                                          "PE-SGD", "Alpha", "Zeta"});
  const auto& base = t.blocks[0].rows[0];
  CHECK(base.mean_only);
  CHECK(base.cells[0]->mean == Approx(3.075));
  CHECK_THAT(report::render(t, "md"), Contains("| Base Model | 3.0750 |"));
}

TEST_CASE("report table1: the SFT row is eval.sft of SFT+DP-SGD runs only", "[report]") {
  test::TempDir d;
  // SFT+DP-SGD seeds 0, 1 with eval.sft losses 2.6 and 2.8 -> SFT row 2.7; accuracies 0.40,
  // 0.44 -> 0.42. A PE-SGD run's eval.sft (its own SFT stage) is not the SFT baseline.
  for (int s = 0; s < 2; ++s) {
    FakeRun r = dp("SFT+DP-SGD", 1.0, s, 2.0);
    r.sft = {{"loss", 2.6 + 0.2 * s}, {"accuracy", 0.40 + 0.04 * s}};
    write_run(d.path / ("s" + std::to_string(s)), r);
  }
  FakeRun pe = dp("PE-SGD", 1.0, 0, 1.9);
  pe.sft = {{"loss", 9.0}, {"accuracy", 0.0}};
  write_run(d.path / "pe", pe);
  auto t = build_report_table("pe-sgd-table1", report::load_runs({d.path}).runs);
  std::vector<std::string> order;
  for (const auto& r : t.blocks[0].rows) order.push_back(r.label);
  CHECK(order == std::vector<std::string>{"Base Model", "SFT", "SFT+DP-SGD", "PE-SGD"});
  const auto& sft = row(t.blocks[0], "SFT");
  CHECK(sft.cells[0]->n == 2);
  CHECK(sft.cells[0]->mean == Approx(2.7));
  CHECK(row(t.blocks[1], "SFT").cells[0]->mean == Approx(0.42));
}

TEST_CASE("report lr-select: one column per learning rate, the best lr per row named", "[report]") {
  test::TempDir d;
  // DP-SGD: lr 0.001 -> losses 2.0, 2.2 (mean 2.1); lr 0.005 -> 2.05 (mean 2.05, best).
  // PE-SGD: lr 0.001 -> 1.8 (best); lr 0.005 -> 1.9.
  auto add = [&](const std::string& name, const std::string& label, double lr, int seed,
                 double loss) {
    FakeRun r = dp(label, 1.0, seed, loss);
    r.lr = lr;
    write_run(d.path / name, r);
  };
  add("a", "DP-SGD", 0.001, 0, 2.0);
  add("b", "DP-SGD", 0.001, 1, 2.2);
  add("c", "DP-SGD", 0.005, 0, 2.05);
  add("e", "PE-SGD", 0.001, 0, 1.8);
  add("f", "PE-SGD", 0.005, 0, 1.9);
  write_run(d.path / "nolr", dp("PE-SGD", 1.0, 0, 0.1));  // no train.lr: skipped
  auto t = build_report_table("lr-select", report::load_runs({d.path}).runs);
  REQUIRE(t.columns.size() == 2);
  CHECK(t.columns[0].dataset == "pubmed lr=0.001");
  CHECK(t.columns[1].dataset == "pubmed lr=0.005");
  const auto& dps = row(t.blocks[0], "DP-SGD");
  CHECK(dps.cells[0]->mean == Approx(2.1));
  CHECK(dps.cells[0]->n == 2);
  CHECK(dps.cells[1]->mean == Approx(2.05));
  CHECK(row(t.blocks[0], "PE-SGD").cells[0]->mean == Approx(1.8));  // the no-lr run is not in it
  CHECK_THAT(t.caption, Contains("Lowest mean loss: DP-SGD / pubmed / eps 1: lr 0.005;"));
  CHECK_THAT(t.caption, Contains("PE-SGD / pubmed / eps 1: lr 0.001"));
  CHECK(t.blocks.size() == 1);  // LM runs: the loss block only
}

TEST_CASE("report lr-select: classification runs are chosen by validation accuracy", "[report]") {
  test::TempDir d;
  // lr 0.001: loss 0.60, accuracy 0.70; lr 0.01: loss 0.55 (lower) but accuracy 0.65.
  auto add = [&](const std::string& name, double lr, double loss, double accuracy) {
    FakeRun r = dp("Full-DP", 4.0, 0, loss);
    r.lr = lr;
    r.classification = {{"accuracy", accuracy}, {"samples", 300}};
    write_run(d.path / name, r);
  };
  add("a", 0.001, 0.60, 0.70);
  add("b", 0.01, 0.55, 0.65);
  auto t = build_report_table("lr-select", report::load_runs({d.path}).runs);
  CHECK_THAT(
      t.caption,
      Contains("Highest mean accuracy (ties: lower loss): Full-DP / pubmed / eps 4: lr 0.001"));
  // A tie in accuracy (both at the majority class) goes to the lower loss.
  add("c", 0.1, 0.50, 0.70);
  CHECK_THAT(build_report_table("lr-select", report::load_runs({d.path}).runs).caption,
             Contains("Full-DP / pubmed / eps 4: lr 0.1"));
  REQUIRE(t.blocks.size() == 2);
  CHECK(row(t.blocks[0], "Full-DP").cells[0]->mean == Approx(0.70));
  CHECK(row(t.blocks[1], "Full-DP").cells[1]->mean == Approx(0.55));
  CHECK_THAT(t.blocks[1].title, !Contains("Next Token"));
}

TEST_CASE("report: runs whose status is not ok are skipped and named", "[report]") {
  test::TempDir d;
  write_run(d.path / "deep" / "er" / "good", dp("DP-SGD", 1.0, 0, 2.0));
  FakeRun failed = dp("DP-SGD", 1.0, 1, 99.0);
  failed.status = "failed";
  write_run(d.path / "bad", failed);
  FakeRun running = dp("DP-SGD", 1.0, 2, 98.0);
  running.status = "running";
  write_run(d.path / "deep" / "running", running);
  d.write("deep/er/good/notes.txt", "not a run");
  fs::create_directories(d.path / "garbage");
  d.write("garbage/metrics.json", "{\"schema\": \"dpft.metr");  // not JSON

  auto loaded = report::load_runs({d.path});
  REQUIRE(loaded.runs.size() == 1);
  CHECK(loaded.runs[0].dir == d.path / "deep" / "er" / "good");
  REQUIRE(loaded.skipped.size() == 3);
  CHECK(loaded.skipped[0].dir == d.path / "bad");
  CHECK_THAT(loaded.skipped[0].reason, Contains("failed"));
  CHECK(loaded.skipped[1].dir == d.path / "deep" / "running");
  CHECK(loaded.skipped[2].dir == d.path / "garbage");
  CHECK_THAT(loaded.skipped[2].reason, Contains("not valid JSON"));
  auto t = build_report_table("pe-sgd-table1", loaded.runs);
  CHECK(row(t.blocks[0], "DP-SGD").cells[0]->mean == Approx(2.0));  // 99 and 98 left out

  // Only failed runs: nothing to report.
  test::TempDir only_bad;
  write_run(only_bad.path / "bad", failed);
  CHECK_THROWS_AS(report::load_runs({only_bad.path}), InputError);
}

TEST_CASE("report longtail: the ceil(10%) highest base losses, ties to the lower index",
          "[report]") {
  test::TempDir d;
  // 11 samples -> ceil(1.1) = 2 hard samples. Base losses: index 3 = 5.0 (highest), then 7 and
  // 9 tie at 4.0 (index 7 is taken); the rest are 1.0. Index 0 first claims base 100 and index 3
  // final 10.0 (a resumed run repeats lines): the last line wins.
  // Finals: 3 -> 4.5 (delta -0.5), 7 -> 3.0 (-1.0), 9 -> 3.9 (-0.1).
  // Expected (-0.5 - 1.0) / 2 = -0.75 (ties to index 9: -0.3; k = 1: -0.5).
  FakeRun a = dp("PE-SGD", 1.0, 0, 2.0);
  a.per_sample.push_back(sample("base", 0, 100.0));
  a.per_sample.push_back(sample("final", 3, 10.0));
  for (int i = 0; i < 11; ++i) {
    double base = i == 3 ? 5.0 : (i == 7 || i == 9) ? 4.0 : 1.0;
    a.per_sample.push_back(sample("base", i, base));
  }
  for (int i = 0; i < 11; ++i) {
    double fin = i == 3 ? 4.5 : i == 7 ? 3.0 : i == 9 ? 3.9 : 0.9;
    a.per_sample.push_back(sample("final", i, fin));
  }
  write_run(d.path / "a", a);
  CHECK(report::longtail_delta(d.path / "a") == Approx(-0.75));

  // 30 samples -> exactly 3 hard samples (indices 29, 28, 27: base = index); final = base - 1
  // for all but index 26, final = base - 100 (would count with k = 4). Expected -1.
  FakeRun b = dp("PE-SGD", 1.0, 1, 2.0);
  for (int i = 0; i < 30; ++i) {
    b.per_sample.push_back(sample("base", i, i));
    b.per_sample.push_back(sample("final", i, i == 26 ? i - 100.0 : i - 1.0));
  }
  write_run(d.path / "b", b);
  CHECK(report::longtail_delta(d.path / "b") == Approx(-1.0));

  // Across the two seeds: mean -0.875, std |(-0.75) - (-1)| / sqrt(2) = 0.1767767.
  write_run(d.path / "c", dp("DP-SGD", 1.0, 0, 2.0));  // no per_sample.jsonl: skipped
  auto t = build_report_table("pe-sgd-longtail", report::load_runs({d.path}).runs);
  REQUIRE(t.blocks.size() == 1);
  REQUIRE(t.blocks[0].rows.size() == 1);
  const auto& r = t.blocks[0].rows[0];
  CHECK(r.label == "PE-SGD");
  CHECK(r.cells[0]->mean == Approx(-0.875));
  CHECK(r.cells[0]->std == Approx(0.1767767));
  CHECK_THAT(report::render(t, "md"), Contains("| PE-SGD | -0.8750 ± 0.1768 |"));

  // A hard sample without a final loss is an input error naming the file.
  FakeRun e = dp("PE-SGD", 1.0, 2, 2.0);
  e.per_sample = {sample("base", 0, 1.0), sample("final", 1, 1.0)};
  write_run(d.path / "e", e);
  CHECK_THROWS_AS(report::longtail_delta(d.path / "e"), InputError);
}

TEST_CASE("report diagnostics: mean ± std of each key present, paper keys first", "[report]") {
  test::TempDir d;
  // norm_std_over_mean 0.40, 0.41 -> 0.405 ± 0.01/sqrt(2) = 0.0070711;
  // overlap_g_h 11, 12 -> 11.5 ± 0.7071068.
  FakeRun a = dp("PE-SGD", 1.0, 0, 2.0);
  a.diagnostics = {{"overlap_g_h", 11.0}, {"norm_std_over_mean", 0.40}, {"zz_extra", 1.0}};
  FakeRun b = dp("PE-SGD", 1.0, 1, 2.0);
  b.diagnostics = {{"overlap_g_h", 12.0}, {"norm_std_over_mean", 0.41}};
  write_run(d.path / "a", a);
  write_run(d.path / "b", b);
  write_run(d.path / "c", dp("DP-SGD", 1.0, 0, 2.0));  // no diagnostics: not a row
  auto t = build_report_table("pe-sgd-diagnostics", report::load_runs({d.path}).runs);
  REQUIRE(t.blocks.size() == 3);
  CHECK_THAT(t.blocks[0].title, Contains("norm_std_over_mean"));
  CHECK_THAT(t.blocks[1].title, Contains("overlap_g_h"));
  CHECK(t.blocks[2].title == "zz_extra");
  REQUIRE(t.blocks[0].rows.size() == 1);
  CHECK(t.blocks[0].rows[0].cells[0]->mean == Approx(0.405));
  CHECK(t.blocks[0].rows[0].cells[0]->std == Approx(0.0070711));
  CHECK(t.blocks[1].rows[0].cells[0]->mean == Approx(11.5));
  CHECK(t.blocks[1].rows[0].cells[0]->std == Approx(0.7071068));
  CHECK(t.blocks[2].rows[0].cells[0]->n == 1);

  test::TempDir none;
  write_run(none.path / "c", dp("DP-SGD", 1.0, 0, 2.0));
  CHECK_THROWS_AS(build_report_table("pe-sgd-diagnostics", report::load_runs({none.path}).runs),
                  InputError);
}

TEST_CASE("report rendering: one cell in md, csv and latex", "[report]") {
  test::TempDir d;
  // Losses 1.5 and 2.5: mean 2, std sqrt(0.5) = 0.70710678.
  write_run(d.path / "a", dp("DP-SGD", 1.0, 0, 1.5));
  write_run(d.path / "b", dp("DP-SGD", 1.0, 1, 2.5));
  auto t = build_report_table("pe-sgd-table1", report::load_runs({d.path}).runs);

  CHECK_THAT(report::render(t, "md"), Contains("| DP-SGD | 2.0000 ± 0.7071 |"));
  CHECK_THAT(report::render(t, "md"), !Contains("Runs per cell"));  // every cell has n = 2
  CHECK_THAT(report::render(t, "latex"), Contains("DP-SGD & 2.0000 $\\pm$ 0.7071 \\\\"));
  CHECK_THAT(report::render(t, "latex"), Contains("\\multicolumn{1}{c}{pubmed}"));

  auto csv = lines(report::render(t, "csv"));
  REQUIRE(csv.size() == 5);  // header + (base, DP-SGD) x (loss, accuracy)
  CHECK(csv[0] == "metric,method,pubmed eps=1 mean,pubmed eps=1 std,pubmed eps=1 n");
  auto f = csv_split(csv[2]);
  REQUIRE(f.size() == 5);
  CHECK(f[1] == "DP-SGD");
  CHECK(std::stod(f[2]) == Approx(2.0));
  CHECK(std::stod(f[3]) == Approx(0.70710678));
  CHECK(f[4] == "2");
  auto base = csv_split(csv[1]);
  CHECK(base[1] == "Base Model");
  CHECK(std::stod(base[2]) == Approx(3.0));
  CHECK(base[3].empty());  // the base row has no std

  CHECK_THROWS_AS(report::render(t, "html"), ConfigError);
}

TEST_CASE("report errors: empty or missing dirs, unknown table", "[report]") {
  test::TempDir d;
  try {
    report::load_runs({d.path});
    FAIL("no error for an empty directory");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Contains(d.path.string()));
  }
  CHECK_THROWS_AS(report::load_runs({d.path / "missing"}), InputError);
  try {
    build_report_table("table9", {});
    FAIL("no error for an unknown table");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains("pe-sgd-table1, pe-sgd-longtail, pe-sgd-diagnostics"));
  }
}

TEST_CASE("dpft report: exit codes and --out", "[report][cli]") {
  test::TempDir d;
  fs::create_directories(d.path / "empty");
  CHECK(test::cli({"report", (d.path / "empty").string(), "--table", "pe-sgd-table1"}) == 3);
  CHECK(test::cli({"report", (d.path / "empty").string(), "--table", "nope"}) == 2);
  CHECK(test::cli({"report", (d.path / "empty").string(), "--table", "pe-sgd-table1", "--format",
                   "pdf"}) == 2);
  write_run(d.path / "runs" / "a", dp("DP-SGD", 1.0, 0, 1.5));
  std::string out;
  REQUIRE(test::cli({"report", (d.path / "runs").string(), "--table", "pe-sgd-table1"}, &out) == 0);
  CHECK_THAT(out, Contains("| DP-SGD | 1.5000 (n=1) |"));
  fs::path file = d.path / "t.tex";
  REQUIRE(test::cli({"report", (d.path / "runs").string(), "--table", "pe-sgd-table1", "--format",
                     "latex", "--out", file.string()},
                    &out) == 0);
  CHECK(out.empty());
  CHECK_THAT(read_file(file), Contains("\\begin{tabular}"));
}

TEST_CASE("dpft report: run files (*.run.json) give the tables of their run directories",
          "[report]") {
  test::TempDir d;
  // Two seeds as run directories; the same runs as run files built from those directories.
  for (int s = 0; s < 2; ++s) {
    FakeRun r = dp("PE-SGD", 1.0, s, 2.0 + 0.5 * s);
    for (int i = 0; i < 10; ++i) {
      r.per_sample.push_back(sample("base", i, i));
      r.per_sample.push_back(sample("final", i, i - 1.0 - s));
    }
    fs::path dir = d.path / "dirs" / ("s" + std::to_string(s));
    write_run(dir, r);
    json file = {{"metrics", json::parse(read_file(dir / "metrics.json"))},
                 {"per_sample", read_jsonl(dir / "per_sample.jsonl")}};
    fs::create_directories(d.path / "files" / "eps1");
    write_json_atomic(d.path / "files" / "eps1" / ("s" + std::to_string(s) + ".run.json"), file);
    // The same lines by columns (experiments/run_files.py's layout), written by hand.
    json base_index, base_loss, final_index, final_loss;
    for (int i = 0; i < 10; ++i) {
      base_index.push_back(i);
      base_loss.push_back(static_cast<double>(i));
      final_index.push_back(i);
      final_loss.push_back(i - 1.0 - s);
    }
    file["per_sample"] = {{"layout", "columns/1"},
                          {"float32", {"loss"}},
                          {"models",
                           {{"base", {{"index", base_index}, {"loss", base_loss}}},
                            {"final", {{"index", final_index}, {"loss", final_loss}}}}}};
    fs::create_directories(d.path / "columns" / "eps1");
    write_json_atomic(d.path / "columns" / "eps1" / ("s" + std::to_string(s) + ".run.json"), file);
  }
  for (const char* table : {"pe-sgd-table1", "pe-sgd-longtail"}) {
    INFO(table);
    std::string from_dirs =
        report::render(build_report_table(table, report::load_runs({d.path / "dirs"}).runs), "csv");
    std::string from_files = report::render(
        build_report_table(table, report::load_runs({d.path / "files"}).runs), "csv");
    std::string from_columns = report::render(
        build_report_table(table, report::load_runs({d.path / "columns"}).runs), "csv");
    CHECK(from_files == from_dirs);
    CHECK(from_columns == from_dirs);
    CHECK_THAT(from_files, Contains("PE-SGD"));
  }
  // Longtail: the top sample (index 9) loses 1 (seed 0) and 2 (seed 1).
  auto runs = report::load_runs({d.path / "files" / "eps1" / "s1.run.json"}).runs;
  REQUIRE(runs.size() == 1);
  CHECK(report::longtail_delta(runs[0]) == Approx(-2.0));
  // A file named like a run file without a metrics block is skipped with its reason; another
  // kind of file is not a run.
  write_file_atomic(d.path / "files" / "bad.run.json", "{\"per_sample\": []}");
  auto loaded = report::load_runs({d.path / "files"});
  CHECK(loaded.runs.size() == 2);
  REQUIRE(loaded.skipped.size() == 1);
  CHECK_THAT(loaded.skipped[0].reason, Contains("metrics"));
  write_file_atomic(d.path / "notes.txt", "x");
  CHECK_THROWS_AS(report::load_runs({d.path / "notes.txt"}), InputError);
}

TEST_CASE("dpft report: a run pack (*.jsonl) and PACK/SUB give the runs of their run files",
          "[report]") {
  test::TempDir d;
  // Run files under tree/<method>/eps<E>/s<S>.run.json, and a pack holding the same runs, one
  // line each with its path (written here by hand, as experiments/run_files.py --pack does).
  std::string pack_text;
  for (const std::string method : {"pe_sgd", "dp_sgd"})
    for (const std::string eps : {"1", "inf"})
      for (int s = 0; s < 2; ++s) {
        FakeRun r =
            dp(method == "pe_sgd" ? "PE-SGD" : "DP-SGD", eps == "inf" ? json("inf") : json(1.0), s,
               2.0 + 0.25 * s + (method == "pe_sgd" ? 0.1 : 0.0));
        fs::path dir = d.path / "dirs" / method / ("eps" + eps) / ("s" + std::to_string(s));
        write_run(dir, r);
        json file = {{"metrics", json::parse(read_file(dir / "metrics.json"))}};
        const std::string rel = method + "/eps" + eps + "/s" + std::to_string(s) + ".run.json";
        fs::create_directories((d.path / "tree" / rel).parent_path());
        write_json_atomic(d.path / "tree" / rel, file);
        json line = file;
        line["path"] = rel;
        pack_text += line.dump() + "\n";
      }
  const fs::path pack = d.path / "x_runs.jsonl";
  write_file_atomic(pack, pack_text);
  auto table = [](const std::vector<fs::path>& args) {
    return report::render(build_report_table("pe-sgd-table1", report::load_runs(args).runs), "csv");
  };
  auto count = [](const std::vector<fs::path>& args) {
    return report::load_runs(args).runs.size();
  };
  CHECK(table({pack}) == table({d.path / "tree"}));
  CHECK(count({pack}) == 8);
  // The same order as the tree's, each run named PACK/PATH.
  auto from_pack = report::load_runs({pack}).runs;
  auto from_tree = report::load_runs({d.path / "tree"}).runs;
  REQUIRE(from_pack.size() == from_tree.size());
  for (size_t i = 0; i < from_pack.size(); ++i)
    CHECK(from_pack[i].dir.lexically_relative(pack) ==
          from_tree[i].dir.lexically_relative(d.path / "tree"));
  // PACK/SUB: a prefix of components, globs per component, a run file's stem.
  CHECK(table({pack / "pe_sgd" / "eps1"}) == table({d.path / "tree" / "pe_sgd" / "eps1"}));
  CHECK(count({pack / "pe_sgd"}) == 4);
  CHECK(count({pack / "*" / "eps1"}) == 4);
  CHECK(count({pack / "*" / "eps*" / "s1"}) == 4);
  CHECK(count({pack / "dp_sgd" / "epsinf" / "s0"}) == 1);
  CHECK(count({pack / "dp_sgd" / "epsinf" / "s0.run.json"}) == 1);
  CHECK(count({pack / "dp_sgd" / "epsinf" / "s0" / ""}) == 1);
  CHECK(count({pack / "[pd]?_sgd" / "eps1" / "s0"}) == 2);
  // Overlapping arguments read a run once; a pack beside a directory.
  CHECK(count({pack, pack / "pe_sgd", pack / "*" / "eps1"}) == 8);
  CHECK(count({pack / "pe_sgd", d.path / "dirs" / "dp_sgd"}) == 8);
  // A SUB that selects nothing names the pack and a path it holds.
  CHECK_THROWS_WITH(
      report::load_runs({pack / "pe_sgd" / "eps4"}),
      Contains("no run in") && Contains("x_runs.jsonl") && Contains("dp_sgd/eps1/s0.run.json"));
  CHECK_THROWS_AS(report::load_runs({pack / "pe_sgd" / "eps1" / "s0" / "deeper"}), InputError);
  // A run in a pack whose status is not ok is skipped with its reason, named PACK/PATH.
  {
    json bad = {{"path", "z/eps1/s0.run.json"},
                {"metrics", {{"schema", "dpft.metrics/1"}, {"status", "failed"}}}};
    write_file_atomic(d.path / "with_bad.jsonl", pack_text + bad.dump() + "\n");
    auto loaded = report::load_runs({d.path / "with_bad.jsonl"});
    CHECK(loaded.runs.size() == 8);
    REQUIRE(loaded.skipped.size() == 1);
    CHECK(loaded.skipped[0].dir == d.path / "with_bad.jsonl" / "z/eps1/s0.run.json");
    CHECK_THAT(loaded.skipped[0].reason, Contains("failed"));
  }
  // Malformed packs are refused with the line that is wrong.
  auto refused = [&](const std::string& extra, const std::string& what) {
    INFO(extra);
    write_file_atomic(d.path / "bad_runs.jsonl", pack_text + extra + "\n");
    CHECK_THROWS_WITH(report::load_runs({d.path / "bad_runs.jsonl"}),
                      Contains("bad_runs.jsonl:9") && Contains(what));
  };
  refused("{\"metrics\": {}}", "no \"path\"");
  refused("{\"path\": 3, \"metrics\": {}}", "no \"path\"");
  refused("not json", "not valid JSON");
  refused("{\"path\": \"pe_sgd/eps1/s0.run.json\", \"metrics\": {}}", "appears twice");
  refused("{\"path\": \"../up.run.json\", \"metrics\": {}}", "not a normal relative path");
  refused("{\"path\": \"/abs.run.json\", \"metrics\": {}}", "not a normal relative path");
  refused("{\"path\": \"a//b.run.json\", \"metrics\": {}}", "not a normal relative path");
  // Another kind of file is neither a run file nor a pack.
  write_file_atomic(d.path / "notes.txt", "x");
  CHECK_THROWS_WITH(report::load_runs({d.path / "notes.txt" / "sub"}),
                    Contains("neither a directory"));
}

TEST_CASE("dpft report: per-sample columns give the lines back, float32 fields rounded",
          "[report]") {
  json cols = json::parse(R"({"layout": "columns/1", "float32": ["loss"],
    "models": {"final": {"index": [7], "loss": [0.25], "accuracy": [0.1]},
               "base": {"index": [7, 2], "loss": [0.1, 1e-05], "accuracy": [0.5, 0.1]}}})");
  std::vector<json> lines = report::per_sample_lines(cols, "x");
  REQUIRE(lines.size() == 3);
  // Lines of one model keep their order; the float32 field is the float nearest the decimal,
  // the other field the decimal's double.
  CHECK(lines[0] == json::parse(R"({"model": "base", "index": 7, "loss": 0.10000000149011612,
                                    "accuracy": 0.5})"));
  CHECK(lines[1]["index"] == 2);
  CHECK(lines[1]["loss"].get<double>() == static_cast<double>(1e-05f));
  CHECK(lines[1]["accuracy"].get<double>() == 0.1);
  CHECK(lines[2] == json::parse(R"({"model": "final", "index": 7, "loss": 0.25,
                                    "accuracy": 0.1})"));
  // Lines (an array) pass through; anything else is refused with the layouts named.
  CHECK(report::per_sample_lines(json::array({lines[2]}), "x") == std::vector<json>{lines[2]});
  for (const char* bad :
       {R"({"layout": "columns/2", "models": {}})", R"({"models": {"base": {"index": [1]}}})",
        R"({"layout": "columns/1", "models": {"base": {"index": [1, 2], "loss": [1.0]}}})",
        R"({"layout": "columns/1", "models": {"base": {"index": ["a"]}}})",
        R"({"layout": "columns/1", "models": {"base": [1]}})", R"(3)"}) {
    INFO(bad);
    CHECK_THROWS_WITH(report::per_sample_lines(json::parse(bad), "f.run.json"),
                      Contains("f.run.json") && Contains("columns/1"));
  }
}

TEST_CASE("report glue: classifier accuracy and macro-F1 per task and eps, paper row order",
          "[report]") {
  test::TempDir d;
  auto cls = [&](const std::string& label, json eps, int seed, const std::string& data, double acc,
                 double f1) {
    FakeRun r = dp(label, eps, seed, 0.7);
    r.dataset = data;
    write_run(d.path / (label + data.substr(data.size() - 8) + std::to_string(seed)), r);
    // The classifier's block, as evaluate_lm writes it for data.task classification.
    const fs::path dir = d.path / (label + data.substr(data.size() - 8) + std::to_string(seed));
    json m = json::parse(read_file(dir / "metrics.json"));
    m["eval"]["final"]["classification"] = {{"accuracy", acc}, {"macro_f1", f1}};
    write_json_atomic(dir / "metrics.json", m);
  };
  const std::string sst2 = "../shared/data/glue_sst2/train.tsv",
                    mnli = "../shared/data/glue_samples/mnli/train.json";
  cls("LoRA-DP", 4.0, 0, sst2, 0.80, 0.79);
  cls("LoRA-DP", 4.0, 1, sst2, 0.84, 0.83);
  cls("Full-DP", 4.0, 0, sst2, 0.70, 0.60);
  cls("Full-tuning", "inf", 0, mnli, 0.55, 0.50);
  write_run(d.path / "lm", dp("DP-SGD", 4.0, 0, 2.0));  // no classification block: skipped
  auto t = build_report_table("glue", report::load_runs({d.path}).runs);
  REQUIRE(t.columns.size() == 2);
  CHECK(t.columns[0].dataset == "MNLI");  // the shared data's names, as the paper spells them
  CHECK(t.columns[1].dataset == "SST-2");
  REQUIRE(t.blocks.size() == 2);
  CHECK(t.blocks[0].rows[0].label == "Full-tuning");  // the paper's order
  CHECK(t.blocks[0].rows[1].label == "Full-DP");
  const auto& lora = row(t.blocks[0], "LoRA-DP");
  REQUIRE(lora.cells[1]);
  CHECK(lora.cells[1]->mean == Approx(0.82));
  CHECK(lora.cells[1]->std == Approx(std::sqrt(0.0008)));
  CHECK(row(t.blocks[1], "Full-DP").cells[1]->mean == Approx(0.60));
  for (const auto& r : t.blocks[0].rows) CHECK(r.label != "DP-SGD");
}

TEST_CASE("report dp-sft-transfer: transferred subspace against the target's own and Full-DP",
          "[report]") {
  test::TempDir d;
  const std::string sst2 = "../shared/data/glue_sst2/train.tsv",
                    imdb = "../shared/data/imdb_subset/imdb_2499_clean.csv";
  int n = 0;
  // A dp-sft (or other) classifier run on `data`; `extra` merged into its metrics.json.
  auto cls = [&](const std::string& label, const std::string& method, json eps, int seed,
                 const std::string& data, double acc, const json& privacy) {
    FakeRun r = dp(label, eps, seed, 0.7);
    r.method = method;
    r.dataset = data;
    r.classification = {{"accuracy", acc}, {"macro_f1", acc}};
    const fs::path dir = d.path / ("r" + std::to_string(n++));
    write_run(dir, r);
    json m = json::parse(read_file(dir / "metrics.json"));
    m["privacy"].update(privacy);
    write_json_atomic(dir / "metrics.json", m);
  };
  const json from_imdb = {{"stage1_public", {{"data", imdb}, {"steps", 192}}}};
  const json own192 = {{"stage1", {{"steps", 192}}}}, own768 = {{"stage1", {{"steps", 768}}}};
  cls("DP-SFT (subspace from IMDB)", "dp-sft", "inf", 0, sst2, 0.70, from_imdb);
  cls("DP-SFT (subspace from IMDB)", "dp-sft", "inf", 1, sst2, 0.72, from_imdb);
  cls("DP-SFT (subspace from IMDB)", "dp-sft", 4.0, 0, sst2, 0.60, from_imdb);
  cls("DP-SFT (private, p1 1/2)", "dp-sft", "inf", 0, sst2, 0.80, own192);  // the ideal
  cls("DP-SFT (private, p1 1/2)", "dp-sft", "inf", 1, sst2, 0.76, own192);
  cls("DP-SFT (private, 768-step subspace)", "dp-sft", "inf", 0, sst2, 0.99, own768);  // other T1
  cls("DP-SFT (private, p1 1/2)", "dp-sft", 4.0, 0, sst2, 0.99, own192);  // private: not ideal
  cls("DP-SFT (public 10 %)", "dp-sft", 4.0, 0, sst2, 0.99,
      {{"stage1_public", {{"data", sst2}, {"steps", 192}}}});  // own data: not a transfer
  cls("Full-DP", "dp-sgd", 4.0, 0, sst2, 0.51, json::object());
  cls("Full-DP", "dp-sgd", 1.0, 0, sst2, 0.49, json::object());  // no transfer at eps 1
  auto t = build_report_table("dp-sft-transfer", report::load_runs({d.path}).runs);
  REQUIRE(t.columns.size() == 2);
  CHECK(t.columns[0].dataset == "IMDB → SST-2");
  CHECK(t.columns[0].eps == 4.0);
  CHECK(std::isinf(t.columns[1].eps));
  REQUIRE(t.blocks.size() == 1);
  const auto& b = t.blocks[0];
  REQUIRE(b.rows.size() == 5);
  CHECK(b.rows[0].label == "Transferred subspace");
  CHECK(b.rows[0].cells[0]->mean == Approx(0.60));
  CHECK(b.rows[0].cells[1]->mean == Approx(0.71));
  CHECK(b.rows[1].label == "Own subspace, non-private (ideal)");
  CHECK(b.rows[1].cells[0]->mean == Approx(0.78));  // the eps-inf ideal in both columns
  CHECK(b.rows[1].cells[1]->mean == Approx(0.78));
  CHECK(b.rows[2].label == "Full-DP");
  CHECK(b.rows[2].cells[0]->mean == Approx(0.51));
  CHECK_FALSE(b.rows[2].cells[1]);
  CHECK(b.rows[3].label == "Δ vs ideal");
  CHECK(b.rows[3].mean_only);
  CHECK(b.rows[3].cells[0]->mean == Approx(-0.18));
  CHECK(b.rows[3].cells[1]->mean == Approx(-0.07));
  CHECK(b.rows[4].label == "Δ vs Full-DP");
  CHECK(b.rows[4].cells[0]->mean == Approx(0.09));
  CHECK_FALSE(b.rows[4].cells[1]);
  // Without a transfer run there is no table.
  test::TempDir e;
  write_run(e.path / "a", dp("Full-DP", 4.0, 0, 0.7));
  CHECK_THROWS_AS(build_report_table("dp-sft-transfer", report::load_runs({e.path}).runs),
                  InputError);
}

TEST_CASE("report denoise-glue: steps to 90 / 95 % and the speedup over the same seed's DP-SGD",
          "[report][denoise]") {
  test::TempDir d;
  auto run = [&](const std::string& label, int seed, double acc, json s90, json s95) {
    FakeRun r = dp(label, 6.7, seed, 0.7);
    r.dataset = "../shared/data/glue_samples/qnli/train.json";
    const fs::path dir = d.path / (label + std::to_string(seed));
    write_run(dir, r);
    json m = json::parse(read_file(dir / "metrics.json"));
    m["eval"]["final"]["classification"] = {{"accuracy", acc}};
    m["eval"]["steps_to_accuracy"] = {{"reference", 0.8},
                                      {"0.9", {{"target", 0.72}, {"step", s90}}},
                                      {"0.95", {{"target", 0.76}, {"step", s95}}}};
    write_json_atomic(dir / "metrics.json", m);
  };
  run("DP-SGD", 0, 0.78, 200, 300);
  run("DP-SGD", 1, 0.76, 100, nullptr);  // 95 % never reached
  run("DP-SGD+Denoise", 0, 0.79, 100, 200);
  run("DP-SGD+Denoise", 1, 0.77, 80, 250);
  write_run(d.path / "plain", dp("DP-SGD", 6.7, 2, 2.0));  // no steps_to_accuracy: skipped
  auto t = build_report_table("denoise-glue", report::load_runs({d.path}).runs);
  REQUIRE(t.columns.size() == 1);
  CHECK(t.columns[0].dataset == "qnli");
  REQUIRE(t.blocks.size() == 5);
  CHECK(t.blocks[0].rows[0].label == "DP-SGD");
  CHECK(row(t.blocks[0], "DP-SGD+Denoise").cells[0]->mean == Approx(0.78));
  CHECK(row(t.blocks[1], "DP-SGD").cells[0]->mean == Approx(150));
  CHECK(row(t.blocks[2], "DP-SGD").cells[0]->n == 1);  // seed 1 never reached 95 %
  // speedups are paired by seed: 200/100 - 1 = 1 and 100/80 - 1 = 0.25; at 95 % only seed 0
  // has both: 300/200 - 1 = 0.5.
  const auto& up90 = row(t.blocks[3], "DP-SGD+Denoise");
  REQUIRE(up90.cells[0]);
  CHECK(up90.cells[0]->mean == Approx(0.625));
  CHECK(row(t.blocks[4], "DP-SGD+Denoise").cells[0]->mean == Approx(0.5));
  CHECK(row(t.blocks[4], "DP-SGD+Denoise").cells[0]->n == 1);
  CHECK_THAT(t.caption, Contains("0.8"));
  CHECK(t.blocks[1].digits == 0);  // steps print as integers
  CHECK(t.blocks[0].digits == 4);
  // A pair whose runs reach 90 % at step 0 has no speedup there (0 / 0): left out, not nan.
  run("DP-SGD", 3, 0.7, 0, 300);
  run("DP-SGD+Denoise", 3, 0.7, 0, 150);
  auto t3 = build_report_table("denoise-glue", report::load_runs({d.path}).runs);
  CHECK(row(t3.blocks[3], "DP-SGD+Denoise").cells[0]->n == 2);
  CHECK(row(t3.blocks[3], "DP-SGD+Denoise").cells[0]->mean == Approx(0.625));
  CHECK(row(t3.blocks[4], "DP-SGD+Denoise").cells[0]->mean == Approx(0.75));  // 0.5 and 1
  const std::string md = report::render(t3, "md");
  CHECK(md.find("nan") == std::string::npos);
  CHECK(md.find("| 100 ± 100 |") != std::string::npos);  // DP-SGD's steps to 90 %: 200, 100, 0
  test::TempDir empty;
  write_run(empty.path / "plain", dp("DP-SGD", 6.7, 2, 2.0));
  CHECK_THROWS_AS(build_report_table("denoise-glue", report::load_runs({empty.path}).runs),
                  InputError);
}

TEST_CASE("report denoise-nlg: each generation metric after each listed step",
          "[report][denoise]") {
  test::TempDir d;
  auto run = [&](const std::string& label, int seed, double bleu50, double bleu400) {
    FakeRun r = dp(label, 5.4, seed, 0.7);
    r.dataset = "../shared/data/e2e/trainset.csv";
    const fs::path dir = d.path / (label + std::to_string(seed));
    write_run(dir, r);
    json m = json::parse(read_file(dir / "metrics.json"));
    auto e = [](int step, double b) {
      return json{{"step", step},       {"bleu", b},      {"nist", 10 * b}, {"meteor", b / 2},
                  {"rouge_l", b + 0.1}, {"cider", 3 * b}, {"segments", 630}};
    };
    m["eval"]["nlg"] = {e(50, bleu50), e(400, bleu400)};
    write_json_atomic(dir / "metrics.json", m);
  };
  run("DP-SGD", 0, 0.20, 0.40);
  run("DP-SGD", 1, 0.22, 0.42);
  run("DP-SGD+Denoise", 0, 0.30, 0.41);
  auto t = build_report_table("denoise-nlg", report::load_runs({d.path}).runs);
  REQUIRE(t.blocks.size() == 10);
  CHECK(t.blocks[0].key == "bleu@50");
  CHECK(t.blocks[1].key == "rouge_l@50");
  CHECK(t.blocks[4].key == "cider@50");
  CHECK(t.blocks[5].key == "bleu@400");
  CHECK(t.columns[0].dataset == "e2e");
  CHECK(row(t.blocks[0], "DP-SGD").cells[0]->mean == Approx(0.21));
  CHECK(row(t.blocks[0], "DP-SGD+Denoise").cells[0]->mean == Approx(0.30));
  CHECK(row(t.blocks[3], "DP-SGD").cells[0]->mean == Approx(2.1));  // NIST
  CHECK(row(t.blocks[5], "DP-SGD+Denoise").cells[0]->mean == Approx(0.41));
  std::string md = report::render(t, "md");
  CHECK_THAT(md, Contains("BLEU after 50 steps"));
}

TEST_CASE("report --plot draws eval curves and Improvement(t) with gnuplot", "[report][plot]") {
  test::TempDir d;
  auto run = [&](const std::string& label, int seed, double shift) {
    FakeRun r = dp(label, 6.7, seed, 0.7);
    const fs::path dir = d.path / (label + std::to_string(seed));
    write_run(dir, r);
    json m = json::parse(read_file(dir / "metrics.json"));
    m["eval"]["base"] = {{"step", 0}, {"loss", 3.0}, {"accuracy", 0.5}};
    m["eval"]["history"] = {{{"step", 10}, {"loss", 2.5}, {"accuracy", 0.6 + shift}}};
    m["eval"]["final"] = {{"step", 20}, {"loss", 2.0}, {"accuracy", 0.7 + shift}};
    json hist = json::array();
    for (int s = 1; s <= 20; ++s)
      hist.push_back(
          {{"step", s}, {"denoise", {{"diagnostics", {{"improvement", 0.01 * s + shift}}}}}});
    if (label == "DP-SGD+Denoise") m["non_private"]["history"] = hist;
    write_json_atomic(dir / "metrics.json", m);
  };
  run("DP-SGD", 0, 0.0);
  run("DP-SGD", 1, 0.02);
  run("DP-SGD+Denoise", 0, 0.05);
  auto runs = report::load_runs({d.path}).runs;
  report::Plot p = build_report_plot("eval-accuracy", runs);
  REQUIRE(p.series.size() == 2);
  CHECK(p.series[0].name == "DP-SGD, eps 6.7, n=2");  // method, epsilon and runs
  CHECK(p.series[1].name == "DP-SGD+Denoise, eps 6.7, n=1");
  CHECK(p.title == "Next-token accuracy against steps (mean ± std over seeds)");
  CHECK(p.ylabel == "Next-token accuracy");
  CHECK(p.y_from_zero);
  CHECK(p.series[0].x == std::vector<double>{0, 10, 20});
  CHECK(p.series[0].y[2] == Approx(0.71));
  CHECK(p.series[0].y_hi[2] - p.series[0].y_lo[2] == Approx(2 * std::sqrt(0.0002)));
  CHECK(p.series[1].y_lo.empty());  // one run: no band
  report::Plot imp = build_report_plot("improvement", runs);
  REQUIRE(imp.series.size() == 1);
  CHECK(imp.series[0].x.size() == 20);
  CHECK(imp.series[0].y[19] == Approx(0.25));
  CHECK_THROWS_AS(build_report_plot("pie", runs), ConfigError);
  std::string gp = report::gnuplot_script(p, "o'ut.svg", "data.dat");
  CHECK_THAT(gp, Contains("set terminal svg"));
  CHECK_THAT(gp, Contains("set yrange [0:*]"));  // no zoom that magnifies a small gap
  CHECK_THAT(gp, Contains("'o''ut.svg'"));  // quotes escaped
  CHECK_THAT(gp, Contains("title 'DP-SGD+Denoise, eps 6.7, n=1'"));
  CHECK_THROWS_AS(report::render_plot(p, d.path / "x.jpg"), ConfigError);
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    WARN("skipped rendering: no gnuplot (apt-get install gnuplot-nox; scripts/setup.sh does)");
    return;
  }
  const fs::path png = d.path / "plots" / "fig1.png", svg = d.path / "fig3.svg";
  REQUIRE(test::cli({"report", d.path.string(), "--plot", png.string()}) == 0);
  const std::string bytes = read_file(png);
  REQUIRE(bytes.size() > 1000);
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  REQUIRE(test::cli({"report", d.path.string(), "--plot", svg.string(), "--plot-kind",
                     "improvement"}) == 0);
  const std::string text = read_file(svg);
  CHECK_THAT(text, Contains("<svg"));
  CHECK_THAT(text, Contains("DP-SGD+Denoise"));
  for (const auto& e : fs::directory_iterator(d.path / "plots"))  // no temporaries left
    CHECK(e.path().filename() == "fig1.png");
  CHECK(test::cli({"report", d.path.string()}) == 2);  // neither --table nor --plot
  CHECK(test::cli({"report", d.path.string(), "--plot", svg.string(), "--plot-kind", "pie"}) == 2);
}

TEST_CASE(
    "report ctcl-generative / -classification / -ablation / -scaling: synthetic_eval and "
    "Downstream DPFT",
    "[report][ctcl]") {
  test::TempDir d;
  // A synthetic-data run scored by eval-synthetic --run (synthetic_eval.<name>), on PubMed or
  // Yelp; values chosen so that means and stds are worked by hand below.
  auto syn = [](const fs::path& root, const std::string& label, json eps, int seed,
                const std::string& data, const json& evals) {
    FakeRun r = dp(label, eps, seed, 0.7);
    r.dataset = data;
    const fs::path dir = root / fmt::format("{}-{}-{}-{}", label, data.size(), eps.dump(), seed);
    write_run(dir, r);
    json m = json::parse(read_file(dir / "metrics.json"));
    m["synthetic_eval"] = evals;
    write_json_atomic(dir / "metrics.json", m);
    return dir;
  };
  const std::string pubmed = "../shared/data/pe_sgd_text/pubmed/dev.csv",
                    yelp = "../shared/data/yelp_augpe/dev.csv";
  auto lm = [](double acc, double ppl, double mauve) {
    return json{{"main",
                 {{"downstream_lm", {{"next_token_accuracy", acc}, {"perplexity", ppl}}},
                  {"mauve", {{"mauve", mauve}}},
                  {"fid", 1.5}}}};
  };
  syn(d.path, "Aug-PE", 4.0, 0, pubmed, lm(0.20, 300, 0.5));
  syn(d.path, "Aug-PE", 4.0, 1, pubmed, lm(0.24, 200, 0.7));
  syn(d.path, "CTCL", 4.0, 0, pubmed, lm(0.30, 100, 0.9));
  syn(d.path, "BART vanilla", 4.0, 0, pubmed, lm(0.25, 150, 0.8));
  // Downstream DPFT: the downstream LM DP fine-tuned directly; its eval.final is the score.
  FakeRun ds = dp("Downstream DPFT", 4.0, 0, 3.0);
  ds.final_acc = 0.28;
  write_run(d.path / "downstream", ds);
  write_run(d.path / "plain", dp("DP-SGD", 4.0, 0, 2.0));  // neither: skipped

  auto t = build_report_table("ctcl-generative", report::load_runs({d.path}).runs);
  REQUIRE(t.columns.size() == 1);
  CHECK(t.columns[0].dataset == "PubMed");
  REQUIRE(t.blocks.size() == 4);
  CHECK(t.blocks[0].rows[0].label == "Downstream DPFT");  // the paper's order
  CHECK(row(t.blocks[0], "Downstream DPFT").cells[0]->mean == Approx(0.28));
  const auto& aug = row(t.blocks[0], "Aug-PE");
  CHECK(aug.cells[0]->mean == Approx(0.22));
  CHECK(aug.cells[0]->std == Approx(std::sqrt(0.0008)));  // (0.02^2 + 0.02^2) / 1
  CHECK(row(t.blocks[1], "Aug-PE").cells[0]->mean == Approx(250));
  CHECK(row(t.blocks[2], "CTCL").cells[0]->mean == Approx(0.9));
  for (const auto& r : t.blocks[0].rows) CHECK(r.label != "DP-SGD");
  CHECK(t.blocks[0].rows.back().label == "CTCL");

  // A second Downstream DPFT run of seed 0, another configuration, whose eval set held
  // training rows (its eval moved to non_private): skipped with that reason before the seed
  // and pooling checks, which then find nothing to say.
  {
    test::TempDir o;
    write_run(o.path / "downstream", ds);
    write_overlap_run(o.path / "overlap", ds);
    const WarningCapture capture;
    auto ot = build_report_table("ctcl-generative", report::load_runs({o.path}).runs);
    CHECK(row(ot.blocks[0], "Downstream DPFT").cells[0]->n == 1);
    const std::vector<std::string> w = captured_warnings();
    REQUIRE(w.size() == 1);
    CHECK_THAT(w[0], Contains("overlap: ") && Contains("holds training rows"));
  }

  auto a = build_report_table("ctcl-ablation", report::load_runs({d.path}).runs);
  REQUIRE(a.blocks.size() == 1);
  CHECK(a.blocks[0].rows[0].label == "BART vanilla");
  CHECK(row(a.blocks[0], "CTCL").cells[0]->mean == Approx(100));

  // Classification: one column per Yelp label column, from the evaluations' names and from a
  // Downstream DPFT classifier's run.label_column.
  test::TempDir c;
  auto clf = [](double acc) {
    return json{
        {"downstream_classifier", {{"accuracy", acc}, {"macro_f1", acc / 2}, {"mcc", acc - 0.3}}},
        {"mauve", {{"mauve", acc + 0.1}}},
        {"fid", acc / 10}};
  };
  syn(c.path, "Aug-PE", 4.0, 0, yelp, {{"label1", clf(0.6)}, {"label2", clf(0.4)}});
  syn(c.path, "Aug-PE", 4.0, 1, yelp, {{"label1", clf(0.7)}, {"label2", clf(0.5)}});
  FakeRun dc = dp("Downstream DPFT", 4.0, 0, 1.0);
  dc.dataset = yelp;
  write_run(c.path / "dc", dc);
  json m = json::parse(read_file(c.path / "dc" / "metrics.json"));
  m["run"]["label_column"] = "label2";
  m["eval"]["final"]["classification"] = {{"accuracy", 0.55}, {"macro_f1", 0.15}, {"mcc", 0.0}};
  write_json_atomic(c.path / "dc" / "metrics.json", m);
  auto k = build_report_table("ctcl-classification", report::load_runs({c.path}).runs);
  REQUIRE(k.columns.size() == 2);
  CHECK(k.columns[0].dataset == "Yelp category");
  CHECK(k.columns[1].dataset == "Yelp stars");
  const auto& augc = row(k.blocks[0], "Aug-PE");
  CHECK(augc.cells[0]->mean == Approx(0.65));
  CHECK(augc.cells[1]->mean == Approx(0.45));
  const auto& dsc = row(k.blocks[0], "Downstream DPFT");
  CHECK_FALSE(dsc.cells[0]);
  CHECK(dsc.cells[1]->mean == Approx(0.55));
  // Macro-F1 and MCC beside the accuracy (a majority-class classifier: high accuracy, MCC 0),
  // then the synthetic sets' MAUVE and FID (none for Downstream DPFT, which makes no set).
  REQUIRE(k.blocks.size() == 5);
  CHECK(row(k.blocks[1], "Aug-PE").cells[1]->mean == Approx(0.225));
  CHECK(row(k.blocks[1], "Downstream DPFT").cells[1]->mean == Approx(0.15));
  CHECK(row(k.blocks[2], "Aug-PE").cells[0]->mean == Approx(0.35));
  CHECK(row(k.blocks[2], "Downstream DPFT").cells[1]->mean == Approx(0.0));
  CHECK(row(k.blocks[3], "Aug-PE").cells[1]->mean == Approx(0.55));
  CHECK(row(k.blocks[4], "Aug-PE").cells[0]->mean == Approx(0.065));
  for (const auto& r : k.blocks[3].rows) CHECK(r.label != "Downstream DPFT");
  // The PubMed runs hold no classifier: the table has nothing to show.
  CHECK_THROWS_AS(build_report_table("ctcl-classification", report::load_runs({d.path}).runs),
                  InputError);
  // ... nor an N_syn: no scaling point.
  CHECK_THROWS_AS(build_report_table("ctcl-scaling", report::load_runs({d.path}).runs), InputError);

  // ctcl-scaling (Fig. 3): every scored set with its N_syn, a ctcl run's subsets beside its main
  // set, Aug-PE's runs one size each; columns by N as a number (9 before 10 before 200).
  test::TempDir f;
  auto at = [](double n, double acc, bool subset) {  // perplexity 1 / acc
    json e = {{"synthetic", {{"requested", n}}},
              {"downstream_lm", {{"next_token_accuracy", acc}, {"perplexity", 1.0 / acc}}}};
    if (subset) e["synthetic"]["subset"] = true;
    return e;
  };
  syn(f.path, "CTCL", 4.0, 0, pubmed,
      {{"main", at(200, 0.30, false)}, {"n10", at(10, 0.10, true)}, {"n9", at(9, 0.08, true)}});
  syn(f.path, "CTCL", 4.0, 1, pubmed,
      {{"main", at(200, 0.34, false)}, {"n10", at(10, 0.12, true)}, {"n9", at(9, 0.06, true)}});
  syn(f.path, "Aug-PE", 4.0, 0, pubmed, {{"main", at(10, 0.20, false)}});
  syn(f.path, "Aug-PE", 4.0, 1, pubmed, {{"main", at(200, 0.22, false)}});
  json stars = {{"synthetic", {{"requested", 50}, {"subset", true}}},
                {"downstream_classifier", {{"accuracy", 0.4}, {"label_column", "label2"}}}};
  syn(f.path, "CTCL", 4.0, 0, yelp, {{"n50", stars}});
  syn(f.path, "CTCL", 4.0, 2, pubmed, {{"main", lm(0.3, 100, 0.9)["main"]}});  // no N_syn
  const auto fr = report::load_runs({f.path}).runs;
  auto sc = build_report_table("ctcl-scaling", fr);
  std::vector<std::string> cols;
  for (const auto& c : sc.columns) cols.push_back(c.dataset);
  CHECK(cols == std::vector<std::string>{"PubMed N_syn=9", "PubMed N_syn=10", "PubMed N_syn=200",
                                         "Yelp stars N_syn=50"});
  const auto& ctcl_row = row(sc.blocks[0], "CTCL");
  CHECK(ctcl_row.cells[0]->mean == Approx(0.07));
  CHECK(ctcl_row.cells[1]->mean == Approx(0.11));
  CHECK(ctcl_row.cells[2]->mean == Approx(0.32));
  CHECK(ctcl_row.cells[2]->n == 2);
  CHECK(ctcl_row.cells[3]->mean == Approx(0.4));
  const auto& aug_row = row(sc.blocks[0], "Aug-PE");
  CHECK(aug_row.cells[1]->mean == Approx(0.20));
  CHECK(aug_row.cells[1]->n == 1);
  CHECK_FALSE(aug_row.cells[0]);
  CHECK(sc.blocks[0].rows[0].label == "Aug-PE");  // the paper's order
  // The LMs' perplexities in a second block (the Yelp classifier has none).
  REQUIRE(sc.blocks.size() == 2);
  CHECK(sc.blocks[1].key == "perplexity");
  const auto& ctcl_ppl = row(sc.blocks[1], "CTCL");
  CHECK(ctcl_ppl.cells[0]->mean == Approx((1 / 0.08 + 1 / 0.06) / 2));
  CHECK(ctcl_ppl.cells[2]->mean == Approx((1 / 0.30 + 1 / 0.34) / 2));
  CHECK_FALSE(ctcl_ppl.cells[3]);
  CHECK(row(sc.blocks[1], "Aug-PE").cells[1]->mean == Approx(5.0));
  // A subset is a Fig. 3 point, not a Table 4 cell.
  CHECK_THROWS_AS(build_report_table("ctcl-classification", fr), InputError);
  report::Plot sp = build_report_plot("ctcl-scaling", fr);
  CHECK(sp.logx);
  REQUIRE(sp.series.size() == 3);  // Aug-PE PubMed, CTCL PubMed, CTCL Yelp stars
  CHECK(sp.series[1].name == "CTCL (PubMed, eps 4)");
  CHECK(sp.series[1].x == std::vector<double>{9, 10, 200});
  CHECK(sp.series[1].y[2] == Approx(0.32));
  CHECK(sp.series[0].x == std::vector<double>{10, 200});
  CHECK_THAT(report::gnuplot_script(sp, "s.svg", "d.dat"), Contains("set logscale x 2"));
  CHECK_THAT(report::gnuplot_script(report::Plot{}, "s.svg", "d.dat"), !Contains("logscale"));
  CHECK_FALSE(sp.logy);
  // The same points by the LM's perplexity (log y): the Yelp classifier's set has none.
  report::Plot spp = build_report_plot("ctcl-scaling-perplexity", fr);
  CHECK(spp.logx);
  CHECK(spp.logy);
  REQUIRE(spp.series.size() == 2);      // Aug-PE PubMed, CTCL PubMed
  CHECK(spp.series[1].name == "CTCL");  // one (data set, eps): named by label
  CHECK(spp.series[1].x == std::vector<double>{9, 10, 200});
  CHECK(spp.series[1].y[0] == Approx((1 / 0.08 + 1 / 0.06) / 2));
  CHECK(spp.series[1].y[2] == Approx((1 / 0.30 + 1 / 0.34) / 2));
  CHECK(spp.series[0].y[0] == Approx(5.0));
  CHECK_THAT(report::gnuplot_script(spp, "s.svg", "d.dat"), Contains("set logscale y 10"));
  CHECK_THAT(report::gnuplot_script(sp, "s.svg", "d.dat"), !Contains("logscale y"));
  {  // only a classifier's sets: nothing to draw by perplexity
    test::TempDir y;
    syn(y.path, "CTCL", 4.0, 0, yelp, {{"n50", stars}});
    const auto yr = report::load_runs({y.path}).runs;
    CHECK(build_report_plot("ctcl-scaling", yr).series.size() == 1);
    CHECK_THROWS_AS(build_report_plot("ctcl-scaling-perplexity", yr), InputError);
  }

  // ctcl-epsilon (Fig. 3, left): each run's own set against its finite epsilon; subsets and
  // epsilon inf stay out.
  syn(f.path, "CTCL", 1.0, 0, pubmed, {{"main", at(200, 0.12, false)}});
  syn(f.path, "CTCL", json("inf"), 0, pubmed, {{"main", at(200, 0.5, false)}});
  syn(f.path, "Aug-PE", 4.0, 0, yelp,
      {{"label2", {{"downstream_classifier", {{"accuracy", 0.3}, {"label_column", "label2"}}}}}});
  report::Plot ep = build_report_plot("ctcl-epsilon", report::load_runs({f.path}).runs);
  REQUIRE(ep.series.size() == 3);
  CHECK(ep.series[0].name == "Aug-PE (PubMed)");
  CHECK(ep.series[0].x == std::vector<double>{4});
  CHECK(ep.series[0].y[0] == Approx(0.21));
  CHECK(ep.series[1].name == "Aug-PE (Yelp stars)");
  CHECK(ep.series[2].name == "CTCL (PubMed)");
  CHECK(ep.series[2].x == std::vector<double>{1, 4});
  CHECK(ep.series[2].y[0] == Approx(0.12));
  CHECK(ep.series[2].y[1] == Approx((0.30 + 0.34 + 0.3) / 3));
  CHECK_FALSE(ep.logx);
  report::Plot epp = build_report_plot("ctcl-epsilon-perplexity", report::load_runs({f.path}).runs);
  CHECK(epp.logy);
  REQUIRE(epp.series.size() == 2);  // the Yelp classifier's set has no perplexity
  CHECK(epp.series[1].name == "CTCL");
  CHECK(epp.series[1].x == std::vector<double>{1, 4});
  CHECK(epp.series[1].y[0] == Approx(1 / 0.12));
  CHECK(epp.series[1].y[1] == Approx((1 / 0.30 + 1 / 0.34 + 100) / 3));

  // One scorer per column: sets scored by downstream models trained with different recipes
  // (here the LM's lr, or the classifier's steps) are refused, naming both runs; the same
  // recipe everywhere, or different recipes in different columns, is a table.
  test::TempDir o;
  auto scored = [](double lr, int steps) {
    return json{{"main",
                 {{"synthetic", {{"requested", 100}}},
                  {"downstream_lm",
                   {{"next_token_accuracy", 0.2},
                    {"perplexity", 50.0},
                    {"lr", lr},
                    {"steps", steps},
                    {"model", "bert mini causal LM"}}}}}};
  };
  syn(o.path, "CTCL", 4.0, 0, pubmed, scored(3e-3, 200));
  syn(o.path, "Aug-PE", 4.0, 0, pubmed, scored(3e-3, 200));
  syn(o.path, "CTCL", 4.0, 0, yelp, scored(1e-3, 200));  // another column
  for (const char* tab : {"ctcl-generative", "ctcl-ablation", "ctcl-scaling"})
    CHECK_NOTHROW(build_report_table(tab, report::load_runs({o.path}).runs));
  const fs::path odd = syn(o.path, "BART vanilla", 4.0, 0, pubmed, scored(3e-4, 200));
  for (const char* tab : {"ctcl-generative", "ctcl-ablation", "ctcl-scaling"}) {
    CAPTURE(tab);
    CHECK_THROWS_WITH(build_report_table(tab, report::load_runs({o.path}).runs),
                      Contains("scored by different downstream recipes") &&
                          Contains(odd.string()) && Contains("0.0003"));
  }
  test::TempDir oc;
  auto clf_steps = [](int steps) {
    return json{{"label2",
                 {{"downstream_classifier",
                   {{"accuracy", 0.4}, {"label_column", "label2"}, {"steps", steps}}}}}};
  };
  syn(oc.path, "CTCL", 4.0, 0, yelp, clf_steps(100));
  syn(oc.path, "Aug-PE", 4.0, 0, yelp, clf_steps(100));
  CHECK_NOTHROW(build_report_table("ctcl-classification", report::load_runs({oc.path}).runs));
  syn(oc.path, "PE", 4.0, 0, yelp, clf_steps(50));
  CHECK_THROWS_WITH(build_report_table("ctcl-classification", report::load_runs({oc.path}).runs),
                    Contains("scored by different downstream recipes"));
}

TEST_CASE("report --table summary: method x dataset x epsilon x unit, every metric, n per cell",
          "[report]") {
  test::TempDir d;
  // Two methods, 3 and 2 seeds at eps 1 on one dataset named by data.train.name.
  for (int s = 0; s < 3; ++s) {
    FakeRun r = dp("DP-SGD", 1.0, s, 2.0 + 0.1 * s);
    r.dataset_name = "notes";
    write_run(d.path / ("a" + std::to_string(s)), r);
  }
  for (int s = 0; s < 2; ++s) {
    FakeRun r = dp("PE-SGD", 1.0, s, 1.8);
    r.dataset_name = "notes";
    write_run(d.path / ("b" + std::to_string(s)), r);
  }
  // A user-level run: its own column.
  {
    FakeRun r = dp("DP-SGD", 1.0, 0, 2.5);
    r.dataset_name = "notes";
    write_run(d.path / "u0", r);
    json m = json::parse(read_file(d.path / "u0" / "metrics.json"));
    m["privacy"]["unit"] = {{"unit", "user"}, {"count", 40}};
    write_json_atomic(d.path / "u0" / "metrics.json", m);
  }
  // A run whose eval set held training rows (eval moved to non_private), with a seed that
  // repeats one of DP-SGD's and another configuration: skipped before the pooling and seed
  // checks, with that reason.
  {
    FakeRun r = dp("DP-SGD", 1.0, 0, 0.5);
    r.dataset_name = "notes";
    write_overlap_run(d.path / "overlap", r);
  }
  auto runs = report::load_runs({d.path}).runs;
  const report::Table t = build_report_table("summary", runs);
  REQUIRE(t.columns.size() == 2);
  CHECK(t.columns[0].dataset == "notes");
  CHECK(t.columns[1].dataset == "notes (per user)");
  REQUIRE(t.blocks.size() == 2);  // loss and next-token accuracy (no perplexity in these runs)
  CHECK(t.blocks[0].title == "Eval loss (↓)");
  CHECK(t.blocks[1].title == "Next-token accuracy (↑)");
  const report::Row& dps = row(t.blocks[0], "DP-SGD");
  REQUIRE(dps.cells[0]);
  CHECK(dps.cells[0]->n == 3);
  CHECK(dps.cells[0]->mean == Approx(2.1));
  CHECK(dps.cells[1]->n == 1);
  CHECK(row(t.blocks[0], "PE-SGD").cells[0]->n == 2);
  const std::string md = report::render(t, "md");
  CHECK_THAT(md, Contains("2.1000 ± 0.1000 (n=3)"));
  CHECK_THAT(md, Contains("1.8000 ± 0.0000 (n=2)"));
  CHECK_THAT(md, Contains("(n=1)"));
  CHECK(report::missing_eval_reason(report::load_runs({d.path / "overlap"}).runs[0])
            .find("holds training rows") != std::string::npos);
  // A classifier: class accuracy, macro-F1 and MCC, without a next-token accuracy.
  test::TempDir c;
  FakeRun k = dp("DP-SGD", 3.0, 0, 0.69);
  k.classification = {{"accuracy", 0.51}, {"macro_f1", 0.34}, {"mcc", 0.0}};
  write_run(c.path / "k0", k);
  json m = json::parse(read_file(c.path / "k0" / "metrics.json"));
  m["run"]["label_column"] = "label";
  write_json_atomic(c.path / "k0" / "metrics.json", m);
  const report::Table kt = build_report_table("summary", report::load_runs({c.path}).runs);
  std::vector<std::string> keys;
  for (const auto& b : kt.blocks) keys.push_back(b.key);
  CHECK(keys == std::vector<std::string>{"loss", "class_accuracy", "macro_f1", "mcc"});
}
