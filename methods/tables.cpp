#include "methods/tables.hpp"

#include <fmt/format.h>

#include "core/report/summary.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

#include "methods/ctcl/report_tables.hpp"
#include "methods/denoise/report_tables.hpp"
#include "methods/dp_sft/report_tables.hpp"
#include "methods/pe_sgd/report_tables.hpp"

namespace dpft {

const std::vector<report::TableDef>& report_tables() {
  static const std::vector<report::TableDef> tables = [] {
    std::vector<report::TableDef> t = {
        {"summary",
         "any runs: every final eval metric per method, dataset, epsilon and privacy unit "
         "(mean ± std over seeds, n per cell)",
         {},
         report::summary_table}};
    for (auto& d : pe_sgd::report_tables()) t.push_back(d);
    t.push_back({"lr-select",
                 "final validation loss per method and learning rate; the best lr per method",
                 pe_sgd::row_order(), report::lr_select});
    for (auto& d : dp_sft::report_tables()) t.push_back(d);
    for (auto& d : denoise::report_tables()) t.push_back(d);
    for (auto& d : ctcl::report_tables()) t.push_back(d);
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

std::vector<std::string> report_plot_names() {
  return {"eval-accuracy",
          "eval-loss",
          "improvement",
          "ctcl-scaling",
          "ctcl-scaling-perplexity",
          "ctcl-epsilon",
          "ctcl-epsilon-perplexity"};
}

report::Plot build_report_plot(const std::string& name,
                               const std::vector<report::RunRecord>& runs) {
  if (name == "eval-accuracy") return report::eval_curve_plot(runs, "accuracy");
  if (name == "eval-loss") return report::eval_curve_plot(runs, "loss");
  if (name == "improvement") return denoise::improvement_plot(runs);
  if (name == "ctcl-scaling") return ctcl::scaling_plot(runs);
  if (name == "ctcl-scaling-perplexity")
    return ctcl::scaling_plot(runs, ctcl::PlotScore::perplexity);
  if (name == "ctcl-epsilon") return ctcl::epsilon_plot(runs);
  if (name == "ctcl-epsilon-perplexity")
    return ctcl::epsilon_plot(runs, ctcl::PlotScore::perplexity);
  throw ConfigError(fmt::format("--plot-kind '{}': use {}", name, join(report_plot_names(), ", ")));
}

}  // namespace dpft
