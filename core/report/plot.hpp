// Line plots for `dpft report --plot` (paper 003's Figures 1, 3 and 11: eval accuracy or loss
// against steps for paired runs; Improvement(t) traces), drawn by gnuplot (Debian gnuplot-nox)
// from a generated script: PNG (pngcairo) or SVG by the output's extension.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dpft::report {

struct Series {
  std::string name;
  std::vector<double> x, y;        // same length, x ascending
  std::vector<double> y_lo, y_hi;  // optional band (mean ± std over seeds): empty or as y
};

struct Plot {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool logx = false;  // a base-2 logarithmic x axis (sizes that double)
  bool logy = false;  // a base-10 logarithmic y axis (perplexities over decades); a band's
                      // edge at or below 0 is left undrawn there
  bool y_from_zero = false;  // the y axis starts at 0 (not zoomed onto the data's range)
};

struct RunRecord;

// Eval metric against steps (base at 0, every eval.every, final), one line per (label,
// dataset, eps) group: the mean over its runs at each step with a mean ± std band, named
// "label, eps E, n=K" (the dataset too when there are several); y from 0, labelled with the
// metric's full name (classification or next-token accuracy).
// metric "accuracy": the classifier's accuracy where the eval has one, else token accuracy;
// "loss": eval loss. ConfigError for another metric.
Plot eval_curve_plot(const std::vector<RunRecord>& runs, const std::string& metric);

// One line per group from per-run series (step -> value) already extracted: the mean over
// the group's runs at each step where any has a value, with a ± std band where two or more do.
Series mean_series(const std::string& name,
                   const std::vector<std::vector<std::pair<double, double>>>& runs);

// Per-run (x, y) series grouped by (label, column, eps): a column is a dataset, or a dataset
// and what else sets a line apart.
using SeriesGroups = std::map<std::tuple<std::string, std::string, double>,
                              std::vector<std::vector<std::pair<double, double>>>>;

// One mean_series per group, named by its label, or "label (column, eps E)" when the groups
// span more than one (column, eps) ("label (column)" without `eps_in_name`: plots whose x is
// epsilon).
Plot grouped_plot(const SeriesGroups& groups, const std::string& title, const std::string& xlabel,
                  const std::string& ylabel, bool eps_in_name = true);

// The gnuplot script that draws `p` into `out` reading series data from `data` (tested: the
// script is plain text; no gnuplot needed).
std::string gnuplot_script(const Plot& p, const std::filesystem::path& out,
                           const std::filesystem::path& data);

// Writes `out` (.png or .svg) atomically. ConfigError for another extension or a plot without
// points; RuntimeError when gnuplot is missing (names the package) or fails (its stderr).
void render_plot(const Plot& p, const std::filesystem::path& out);

}  // namespace dpft::report
