#include "methods/tables.hpp"

#include "methods/dp_sft/report_tables.hpp"
#include "methods/pe_sgd/report_tables.hpp"

namespace dpft {

const std::vector<report::TableDef>& report_tables() {
  static const std::vector<report::TableDef> tables = [] {
    std::vector<report::TableDef> t = pe_sgd::report_tables();
    t.push_back({"lr-select",
                 "final validation loss per method and learning rate; the best lr per method",
                 pe_sgd::row_order(), report::lr_select});
    for (auto& d : dp_sft::report_tables()) t.push_back(d);
    return t;
  }();
  return tables;
}

std::vector<std::string> report_table_names() {
  std::vector<std::string> names;
  for (const auto& t : report_tables()) names.push_back(t.name);
  return names;
}

report::Table build_report_table(const std::string& name,
                                 const std::vector<report::RunRecord>& runs) {
  return report::build_table(report::find_table(report_tables(), name), runs);
}

}  // namespace dpft
