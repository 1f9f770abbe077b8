// The DP-SFT paper's `dpft report` tables (methods/tables.cpp lists them with the others).
#pragma once
#include <vector>

#include "core/report/report.hpp"

namespace dpft::dp_sft {

// glue: Tables 1-2 (epsilon 4 and 1): test accuracy of Full-tuning, Full-DP, LoRA-DP,
// Adapter-DP on SST-2, IMDB, QNLI, MNLI and RTE. dp-sft: the same layout with every DP-SFT
// variant of experiments/glue/dp_sft_specs.py (Tables 1-3, 6, the k sweep). dp-sft-transfer:
// Tables 4-5 (subspace transfer between tasks).
std::vector<report::TableDef> report_tables();

}  // namespace dpft::dp_sft
