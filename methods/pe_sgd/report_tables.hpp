// The PE-SGD paper's `dpft report` tables (methods/tables.cpp lists them with the others).
#pragma once
#include <string>
#include <vector>

#include "core/report/report.hpp"

namespace dpft::pe_sgd {

// pe-sgd-table1, pe-sgd-longtail, pe-sgd-diagnostics.
std::vector<report::TableDef> report_tables();
// The paper's row order: SGD, SFT, DP-SGD, SFT+DP-SGD, PDP-SGD, GEP, ..., PE-SGD.
const std::vector<std::string>& row_order();

}  // namespace dpft::pe_sgd
