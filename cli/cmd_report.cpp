// `dpft report DIR... --table NAME [--format md|csv|latex] [--out FILE]`: tables of finished
// runs in the layout of a paper's table (core/report/report.hpp; tables: methods/tables.hpp).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "cli/app.hpp"
#include "core/report/report.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/strings.hpp"
#include "methods/tables.hpp"

namespace dpft {

void register_report(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::vector<std::string> dirs;
    std::string table, format = "md", out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("report", "tables of finished runs in a paper's layout");
  sub->add_option("dirs", o->dirs, "directories searched recursively for runs (metrics.json)")
      ->required();
  sub->add_option("--table", o->table, join(report_table_names(), " | "))->required();
  sub->add_option("--format", o->format, "md | csv | latex")->capture_default_str();
  sub->add_option("--out", o->out, "write the table to this file (atomically) instead of stdout");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      // Both names checked before reading any run.
      const report::TableDef& table = report::find_table(report_tables(), o->table);
      report::check_format(o->format);
      std::vector<std::filesystem::path> dirs(o->dirs.begin(), o->dirs.end());
      report::LoadedRuns loaded = report::load_runs(dirs);
      std::string text = report::render(report::build_table(table, loaded.runs), o->format);
      if (o->out.empty())
        std::cout << text;
      else
        write_file_atomic(o->out, text);
      return 0;
    };
  });
}

}  // namespace dpft
