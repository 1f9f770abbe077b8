// The CTCL paper's `dpft report` tables (paper 004, Tables 3-5; methods/tables.cpp lists them
// with the others). A synthetic-data run (ctcl, pe, aug-pe, or a DP generator whose samples were
// written into its run directory) is scored by `dpft eval-synthetic --run RUN`, which records
// `synthetic_eval.<name>` in its metrics.json; a "Downstream DPFT" run (the downstream model
// DP fine-tuned on the private data directly) is scored by its own eval.final.
#pragma once
#include <vector>

#include "core/report/plot.hpp"
#include "core/report/report.hpp"

namespace dpft::ctcl {

// ctcl-generative: Table 3 (next-token accuracy of the downstream causal LM on the real test
// texts, with MAUVE and FID blocks); ctcl-classification: Table 4 (downstream classifier
// accuracy, one column per (dataset and label, epsilon)); ctcl-ablation: Table 5 (downstream
// perplexity of CTCL against its ablations); ctcl-scaling: Fig. 3's scaling in N_syn as a table
// (columns "<data set> N_syn=<N>", every scored set with a known N_syn: ctcl's subsets, the
// main sets of ctcl and aug-pe runs; subsets stay out of the other tables).
std::vector<report::TableDef> report_tables();

// What a Fig. 3 plot draws on its y axis: the downstream accuracy (the paper's), or the
// downstream LM's perplexity (generative sets only; log y axis), which still orders sets whose
// LMs answer one token everywhere.
enum class PlotScore { accuracy, perplexity };

// `dpft report --plot-kind ctcl-scaling` (`ctcl-scaling-perplexity`): the same points as lines
// over N_syn (log scale), one per (label, data set, eps), mean ± std over the runs. InputError
// when no run has a point.
report::Plot scaling_plot(const std::vector<report::RunRecord>& runs,
                          PlotScore score = PlotScore::accuracy);

// `--plot-kind ctcl-epsilon` (`ctcl-epsilon-perplexity`; Fig. 3, left): each run's own scored
// set (not its subsets) against its epsilon (finite ones), one line per (label, data set), mean ±
// std over seeds.
report::Plot epsilon_plot(const std::vector<report::RunRecord>& runs,
                          PlotScore score = PlotScore::accuracy);

}  // namespace dpft::ctcl
