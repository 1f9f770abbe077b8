// `dpft export RUN_DIR --out DIR`: a shareable copy of a finished DP run with only its DP
// outputs, and export_manifest.json naming what was left out and why (core/run/export.hpp).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>

#include "cli/app.hpp"
#include "core/run/export.hpp"

namespace dpft {

void register_export(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string run_dir, out;
    ExportOptions export_opts;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "export", "copy a finished DP run's shareable outputs (adapter/model, DP metrics, ledger, "
                "config) and a manifest of what was left out");
  sub->add_option("run_dir", o->run_dir, "the run directory (status ok)")->required();
  sub->add_option("--out", o->out, "new directory for the export (must not exist or be empty)")
      ->required();
  sub->add_flag("--allow-seeded-noise", o->export_opts.allow_seeded_noise,
                "export a run whose noise was seeded (privacy.noise_seed) anyway, labelled "
                "'noise seeded: not shareable': its receiver can replay and subtract the noise");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      ExportResult r = export_run(o->run_dir, o->out, o->export_opts);
      const auto& m = r.manifest;
      std::cout << "exported " << m["included"].size() << " files to " << r.out_dir.string()
                << " (epsilon " << m["privacy"]["epsilon"].dump() << ", delta "
                << m["privacy"]["delta"].dump() << "); left out:\n";
      for (const auto& e : m["left_out"])
        std::cout << "  " << e["path"].get<std::string>() << " (" << e["class"].get<std::string>()
                  << ")\n";
      std::cout << "details: " << (r.out_dir / kExportManifestFile).string() << "\n";
      return 0;
    };
  });
}

}  // namespace dpft
