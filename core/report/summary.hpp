// `dpft report --table summary`: the generic comparison of any runs, paper or not: one row per
// method (run label), one column per (dataset, epsilon, privacy unit), one block per metric of
// eval.final that the runs have (loss, next-token or class accuracy, perplexity; a classifier's
// macro-F1 and MCC; each named eval set's loss and accuracy), each cell mean ± std over the
// group's runs with their count n. Runs without a usable eval.final are skipped with the
// reason (no eval set, an eval set that holds training rows, NaN); the pooling and seed checks
// (check_groups) look only at the runs kept.
#pragma once
#include <string>
#include <vector>

#include "core/report/report.hpp"

namespace dpft::report {

Table summary_table(const std::vector<RunRecord>& runs, const TableDef& def);

// Why a run has no eval.final.loss, for the skip warning: its eval set holds training rows
// (the results are non-private, in non_private.eval), it had no eval set, or the loss is not a
// number.
std::string missing_eval_reason(const RunRecord& r);

}  // namespace dpft::report
