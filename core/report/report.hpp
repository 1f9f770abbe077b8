// `dpft report`: tables of finished runs in the layout of the PE-SGD paper (Table 1: loss and
// accuracy; Table 2: loss change of the 10% hardest eval samples; Tables 5 and 13: projection
// diagnostics). Runs are directories holding a metrics.json (docs/outputs.md); they are grouped
// by (label, dataset, epsilon), and each cell is the mean and sample standard deviation (n-1)
// over the group's runs (normally one per seed). Rendered as Markdown, CSV or LaTeX.
//
//   load_runs   finds run directories under DIRs; skips (with a warning) those not `ok`
//   build_table groups and aggregates the runs into a Table
//   render      formats a Table
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dpft::report {

namespace fs = std::filesystem;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// One finished run, as the report needs it.
struct RunRecord {
  fs::path dir;
  std::string label;    // run.label, else run.method; known labels in their canonical spelling
  std::string dataset;  // run.dataset_name, else the name of the directory of run.dataset
  double eps = kInf;    // the column: privacy.target_epsilon (inf when null, absent or when the
                        // run spent epsilon inf, i.e. released without noise)
  int64_t seed = 0;
  std::string config_hash;
  nlohmann::json metrics;  // the whole metrics.json
};

struct Skipped {
  fs::path dir;
  std::string reason;
};

struct LoadedRuns {
  std::vector<RunRecord> runs;   // sorted by directory
  std::vector<Skipped> skipped;  // each also logged as a warning
};

// Every directory under `dirs` (recursively, a DIR itself included) that holds a metrics.json.
// Runs whose status is not "ok", or whose metrics.json does not parse or is not dpft's, are
// skipped with a warning. InputError if a DIR does not exist or if no run is left (the message
// names the DIRs).
LoadedRuns load_runs(const std::vector<fs::path>& dirs);

// mean and sample standard deviation (n-1; NaN when n < 2).
struct Stat {
  int n = 0;
  double mean = 0, std = 0;
};
Stat summarize(const std::vector<double>& xs);

// Columns are (dataset, eps); rows are labels; one block per metric.
struct Column {
  std::string dataset;
  double eps = kInf;
};
struct Row {
  std::string label;
  std::vector<std::optional<Stat>> cells;  // one per column; nullopt: no run
  bool mean_only = false;                  // the base-model row: print the mean alone
};
struct Block {
  std::string key;    // short metric name (the csv `metric` column): loss, accuracy, ...
  std::string title;  // as in the paper, with the better direction: "... Loss (↓)"
  std::vector<Row> rows;
};
struct Table {
  std::string caption;
  std::vector<Column> columns;  // datasets alphabetically, eps ascending with inf last
  std::vector<Block> blocks;
};

// pe-sgd-table1, pe-sgd-longtail, pe-sgd-diagnostics, lr-select (final eval loss per label
// and learning rate, columns "<dataset> lr=<lr>"; the caption names each row's best lr).
const std::vector<std::string>& table_names();
// md, csv, latex.
const std::vector<std::string>& format_names();
// ConfigError naming the flag and the valid values for an unknown table or format.
void check_names(const std::string& table, const std::string& format);
// ConfigError listing the valid names for an unknown one; InputError when no run has what the
// table needs (eval results, per_sample.jsonl, a diagnostics block). Runs lacking it are
// skipped with a warning (diagnostics: silently, as only projection methods have it).
Table build_table(const std::string& name, const std::vector<RunRecord>& runs);

// Mean over the ceil(10%) samples with the highest base loss of (final loss - base loss), from
// the run's per_sample.jsonl (the last line wins for a repeated (model, index)); ties in base
// loss go to the lower index. InputError when the file is missing or lacks a final loss for a
// chosen sample.
double longtail_delta(const fs::path& run_dir);

// An eps column heading: "1", "0.5"; inf as "∞" (md), "inf" (csv) or "$\infty$" (latex).
std::string format_eps(double eps, const std::string& format);

// md (GitHub Markdown), csv (one header row; mean, std and n in separate columns), latex
// (tabular). ConfigError for another format.
std::string render(const Table& table, const std::string& format);

}  // namespace dpft::report
