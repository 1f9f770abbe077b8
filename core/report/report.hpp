// `dpft report`: tables of finished runs in the layout of a paper's tables. Runs are
// directories holding a metrics.json (docs/outputs.md); they are grouped by (label, dataset,
// epsilon), and each cell is the mean and sample standard deviation (n-1) over the group's runs
// (normally one per seed). Rendered as Markdown, CSV or LaTeX.
//
//   load_runs   finds run directories under DIRs; skips (with a warning) those not `ok`
//   TableDef    one table: its name, row order and builder. Each paper's folder in methods/
//               contributes its tables (e.g. methods/pe_sgd/report_tables.cpp), listed by
//               methods/tables.cpp; this file knows none of them.
//   build_table labels in the table's spelling, then its builder (assemble() does the
//               grouping and aggregation)
//   render      formats a Table
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dpft::report {

namespace fs = std::filesystem;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A run kept as one file (results pages: docs/results/), in place of a run directory:
// {"metrics": <metrics.json>, "per_sample": <per_sample.jsonl> (optional)}, per_sample either
// the lines (an array) or, as experiments/run_files.py writes it, by columns:
// {"layout": "columns/1", "float32": [FIELD...], "models": {TAG: {FIELD: [numbers]}}}, one list
// per field of the lines with model TAG, in line order; FIELDs named in "float32" are rounded
// to float32 on reading (their values were float32; the file holds the shortest decimal).
inline const std::string kRunFileSuffix = ".run.json";

// Many run files packed into one file (docs/results/*_runs.jsonl, experiments/run_files.py
// --pack): one run per line, the run file's object with its relative path added,
// {"path": "pubmed-pe_sgd/eps1/s0.run.json", "metrics": {...}, "per_sample": {...}}.
// `PACK/SUB` selects the runs whose path starts with the components of SUB; SUB's components
// may hold globs (fnmatch: *, ?, [...]), e.g. `X_runs.jsonl/size-*` or `X_runs.jsonl/*/eps1`.
inline const std::string kRunPackSuffix = ".jsonl";

// One finished run, as the report needs it.
struct RunRecord {
  fs::path dir;
  std::string label;    // run.label, else run.method (build_table spells it as its table does)
  std::string dataset;  // run.dataset_name, else the name of the directory of run.dataset
  double eps = kInf;    // the column: privacy.target_epsilon (inf when null, absent or when the
                        // run spent epsilon inf, i.e. released without noise)
  int64_t seed = 0;
  std::string config_hash;
  nlohmann::json metrics;     // the whole metrics.json
  nlohmann::json per_sample;  // a run file's per_sample (lines or columns); null: per_sample.jsonl
};

struct Skipped {
  fs::path dir;
  std::string reason;
};

struct LoadedRuns {
  std::vector<RunRecord> runs;   // sorted by directory
  std::vector<Skipped> skipped;  // each also logged as a warning
};

// Every directory under `dirs` (recursively, a DIR itself included) that holds a metrics.json,
// every run file (*.run.json) under them or named among them, and the runs of a run pack
// (*.jsonl) named among them, whole or by `PACK/SUB` (see kRunPackSuffix). A run found twice
// (two DIRs that overlap) is read once. Runs whose status is not "ok", or whose metrics.json
// does not parse or is not dpft's, are skipped with a warning. InputError if a DIR does not
// exist, if a pack is malformed or a PACK/SUB selects nothing, or if no run is left (the
// message names the DIRs).
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
  int digits = 4;  // decimals of the cells (0 for counts such as steps)
};
struct Table {
  std::string caption;
  std::vector<Column> columns;  // datasets alphabetically, eps ascending with inf last
  std::vector<Block> blocks;
  bool n_in_cells = false;  // md / latex cells say how many runs each is over: "m ± s (n=3)"
};

// One table of `dpft report --table NAME`.
struct TableDef {
  std::string name;                    // e.g. pe-sgd-table1
  std::string summary;                 // one line for --help and docs
  std::vector<std::string> row_order;  // labels in the paper's row order, canonical spelling;
                                       // other labels follow alphabetically
  // Builds the table from the runs (labels already canonical). InputError when no run has what
  // the table needs; runs lacking it are skipped with a warning.
  std::function<Table(const std::vector<RunRecord>& runs, const TableDef& def)> build;
};

// The table named `name`; ConfigError listing the registered names otherwise.
const TableDef& find_table(const std::vector<TableDef>& tables, const std::string& name);
// "dp-sgd" -> "DP-SGD": a label of `order` in its spelling there (case-insensitive); others
// unchanged.
std::string canonical_label(const std::string& label, const std::vector<std::string>& order);
// The runs' labels canonical for def.row_order, then def.build.
Table build_table(const TableDef& def, std::vector<RunRecord> runs);

// md, csv, latex.
const std::vector<std::string>& format_names();
// ConfigError naming --format and the valid values for an unknown format.
void check_format(const std::string& format);

// --- Building blocks of table builders ---------------------------------------------------

// j[k0][k1]..., or nullptr where a key is missing or a level is not an object.
const nlohmann::json* find(const nlohmann::json& j, std::initializer_list<const char*> path);
std::optional<std::string> string_at(const nlohmann::json& j,
                                     std::initializer_list<const char*> path);
std::optional<double> number_at(const nlohmann::json& j, std::initializer_list<const char*> path);

using ColKey = std::pair<std::string, double>;  // (dataset, eps)

// The raw values of one block: label -> column -> one value per run.
struct Collected {
  std::string key, title;
  std::map<std::string, std::map<ColKey, std::vector<double>>> by_label;
  std::map<std::string, std::vector<double>> base_by_dataset;  // a "Base Model" row (mean only)
  int digits = 4;                                              // decimals of its cells
};

// Columns: every (dataset, eps) of the blocks, datasets alphabetically, eps ascending (inf
// last); rows: the base row first, then labels in row_order, then the others alphabetically.
Table assemble(const std::string& caption, const std::vector<Collected>& blocks,
               const std::vector<std::string>& row_order);

// "report <table>: no run has <what>" (the InputError text of a table without data).
std::string no_runs_error(const std::string& table, const std::string& what);

// Warns about groups that pool different configurations (config_hash) or repeat a seed: their
// std would not be a spread over seeds of one configuration.
void check_groups(const std::vector<RunRecord>& runs);

// Learning-rate selection: final eval loss per label and (dataset, lr, eps), columns
// "<dataset> lr=<lr>"; the caption names the lr with the lowest mean loss for each (label,
// dataset, eps). Meant for runs evaluated on a held-out validation set, never the test set.
Table lr_select(std::vector<RunRecord> runs, const TableDef& def);

// Mean over the ceil(10%) samples with the highest base loss of (final loss - base loss), from
// the run's per_sample.jsonl (the last line wins for a repeated (model, index)); ties in base
// loss go to the lower index. InputError when the file is missing or lacks a final loss for a
// chosen sample.
double longtail_delta(const fs::path& run_dir);
// The same from a run file's per-sample lines when it has them, else from r.dir.
double longtail_delta(const RunRecord& r);
// A run file's per_sample (either layout, see kRunFileSuffix) as per_sample.jsonl's lines
// ({"model": TAG, FIELD: value...}); lines of one model keep their order. InputError (naming
// `source`) for anything else.
std::vector<nlohmann::json> per_sample_lines(const nlohmann::json& per_sample,
                                             const std::string& source);
// The same from per-sample lines ({model, index, loss}); `source` names them in errors.
double longtail_delta(const std::vector<nlohmann::json>& lines, const std::string& source);

// An eps column heading: "1", "0.5"; inf as "∞" (md), "inf" (csv) or "$\infty$" (latex).
std::string format_eps(double eps, const std::string& format);

// md (GitHub Markdown), csv (one header row; mean, std and n in separate columns), latex
// (tabular). ConfigError for another format.
std::string render(const Table& table, const std::string& format);

}  // namespace dpft::report
