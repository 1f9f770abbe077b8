// The gradient-denoising paper's (paper 003) `dpft report` tables (methods/tables.cpp lists
// them with the others).
#pragma once
#include <vector>

#include "core/report/plot.hpp"
#include "core/report/report.hpp"

namespace dpft::denoise {

// denoise-glue: Tables 2-3: final accuracy after T steps, steps to 90 % / 95 % of the reference
// accuracy (eval.reference_accuracy) and the speedup of DP-SGD+Denoise over DP-SGD run with
// the same seed (baseline steps / method steps - 1).
// denoise-nlg: Tables 4-5: BLEU, ROUGE-L, METEOR, NIST and CIDEr of the outputs decoded after
// each eval.nlg step (50 and 400 in the paper), baseline vs denoised.
std::vector<report::TableDef> report_tables();

// Figures 3 and 11: the whole-gradient Improvement(t) = cos(Denoise(g~), g_bar) - cos(g~, g_bar)
// per step (non_private.history[].denoise.diagnostics of runs with method.diagnostics), one line
// per (label, dataset, eps) group, mean ± std over its runs.
report::Plot improvement_plot(const std::vector<report::RunRecord>& runs);

}  // namespace dpft::denoise
