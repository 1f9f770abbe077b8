// The CTCL paper's `dpft report` tables (paper 004, Tables 3-5; methods/tables.cpp lists them
// with the others). A synthetic-data run (ctcl, pe, aug-pe, or a DP generator whose samples were
// written into its run directory) is scored by `dpft eval-synthetic --run RUN`, which records
// `synthetic_eval.<name>` in its metrics.json; a "Downstream DPFT" run (the downstream model
// DP fine-tuned on the private data directly) is scored by its own eval.final.
#pragma once
#include <vector>

#include "core/report/report.hpp"

namespace dpft::ctcl {

// ctcl-generative: Table 3 (next-token accuracy of the downstream causal LM on the real test
// texts, with MAUVE and FID blocks); ctcl-classification: Table 4 (downstream classifier
// accuracy, one column per (dataset and label, epsilon)); ctcl-ablation: Table 5 (downstream
// perplexity of CTCL against its ablations).
std::vector<report::TableDef> report_tables();

}  // namespace dpft::ctcl
