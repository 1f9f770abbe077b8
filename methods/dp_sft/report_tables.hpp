// The DP-SFT paper's `dpft report` tables (methods/tables.cpp lists them with the others).
#pragma once
#include <vector>

#include "core/report/report.hpp"

namespace dpft::dp_sft {

// glue: Tables 1-2 (epsilon 4 and 1): test accuracy of Full-tuning, Full-DP, LoRA-DP,
// Adapter-DP (and DP-SFT once it lands) on SST-2, IMDB, QNLI, MNLI and RTE.
std::vector<report::TableDef> report_tables();

}  // namespace dpft::dp_sft
