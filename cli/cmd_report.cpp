// `dpft report DIR... --table NAME [--format md|csv|latex] [--out FILE]`: tables of finished
// runs (run directories, run files, run packs) in the layout of a paper's table
// (core/report/report.hpp; tables: methods/tables.hpp).
// `--plot OUT.png|.svg [--plot-kind K]` draws them instead (or as well): eval curves or
// Improvement(t) traces (core/report/plot.hpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "cli/app.hpp"
#include "core/report/report.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"
#include "methods/tables.hpp"

namespace dpft {

void register_report(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::vector<std::string> dirs;
    std::string table, format = "md", out, plot, plot_kind = "eval-accuracy";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("report", "tables of finished runs in a paper's layout");
  sub->add_option("dirs", o->dirs,
                  "directories searched recursively for runs (metrics.json, *.run.json), run "
                  "files, run packs (*.jsonl) or PACK.jsonl/SUB (SUB's components are globs)")
      ->required();
  sub->add_option("--table", o->table, join(report_table_names(), " | "));
  sub->add_option("--plot", o->plot, "draw a plot of the runs into this .png or .svg file");
  sub->add_option("--plot-kind", o->plot_kind, join(report_plot_names(), " | "))
      ->capture_default_str();
  sub->add_option("--format", o->format, "md | csv | latex")->capture_default_str();
  sub->add_option("--out", o->out, "write the table to this file (atomically) instead of stdout");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      if (o->table.empty() && o->plot.empty())
        throw ConfigError("give --table NAME (" + join(report_table_names(), ", ") +
                          ") or --plot OUT.png|.svg");
      // Names checked before reading any run.
      const report::TableDef* table =
          o->table.empty() ? nullptr : &report::find_table(report_tables(), o->table);
      report::check_format(o->format);
      const auto kinds = report_plot_names();
      if (!o->plot.empty() && std::find(kinds.begin(), kinds.end(), o->plot_kind) == kinds.end())
        throw ConfigError("--plot-kind '" + o->plot_kind + "': use " + join(kinds, ", "));
      if (!o->plot.empty()) {
        const std::string ext = std::filesystem::path(o->plot).extension().string();
        if (ext != ".png" && ext != ".svg")
          throw ConfigError("--plot " + o->plot + ": use a .png or .svg file name");
      }
      std::vector<std::filesystem::path> dirs(o->dirs.begin(), o->dirs.end());
      report::LoadedRuns loaded = report::load_runs(dirs);
      if (table) {
        std::string text = report::render(report::build_table(*table, loaded.runs), o->format);
        if (o->out.empty())
          std::cout << text;
        else
          write_file_atomic(o->out, text);
      }
      if (!o->plot.empty()) {
        report::render_plot(build_report_plot(o->plot_kind, loaded.runs), o->plot);
        std::cerr << "plot: " << o->plot << "\n";
      }
      return 0;
    };
  });
}

}  // namespace dpft
