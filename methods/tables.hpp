// The tables of `dpft report --table NAME`: each paper's folder contributes its own (e.g.
// methods/pe_sgd/report_tables.hpp); lr-select is shared. Adding a paper's tables = one line in
// tables.cpp.
#pragma once
#include <string>
#include <vector>

#include "core/report/plot.hpp"
#include "core/report/report.hpp"

namespace dpft {

const std::vector<report::TableDef>& report_tables();
std::vector<std::string> report_table_names();
// build_table of the table named `name` (ConfigError listing the names for an unknown one).
report::Table build_report_table(const std::string& name,
                                 const std::vector<report::RunRecord>& runs);

// `dpft report --plot OUT --plot-kind NAME`: eval-accuracy, eval-loss (paper 003 Fig. 1),
// improvement (Figs. 3, 11). ConfigError listing the names for an unknown one.
std::vector<std::string> report_plot_names();
report::Plot build_report_plot(const std::string& name, const std::vector<report::RunRecord>& runs);

}  // namespace dpft
