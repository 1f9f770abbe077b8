// `dpft run SPEC.yaml [--set k=v ...] [--out DIR] [--dry-run]`, `dpft run --resume RUN_DIR`
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "cli/app.hpp"
#include "core/config/spec.hpp"
#include "core/run/runner.hpp"
#include "core/util/error.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft {

void register_run(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string spec, out, resume;
    std::vector<std::string> sets;
    bool dry_run = false;
    int64_t stop_after = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("run", "run an experiment spec");
  sub->add_option("spec", o->spec, "experiment spec (YAML)");
  sub->add_option("--resume", o->resume,
                  "continue the run in this directory from its last checkpoint (its "
                  "config.resolved.yaml is the spec)");
  sub->add_option("--set", o->sets, "override a spec value: key.path=value (repeatable)")
      ->take_all();
  sub->add_option("--out", o->out, "output root (overrides output.dir)");
  sub->add_option("--stop-after", o->stop_after,
                  "stop after this many steps (writing a checkpoint; continue with --resume), e.g. "
                  "for time-limited jobs")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--dry-run", o->dry_run, "validate and print the resolved spec; write nothing");
  sub->callback([o, &ctx] {
    ctx.action = [o, &ctx] {
      if (!o->resume.empty()) {
        if (!o->spec.empty() || !o->sets.empty())
          throw ConfigError(
              "--resume takes the run's own config.resolved.yaml; give no spec and no --set");
        o->spec = (std::filesystem::path(o->resume) / "config.resolved.yaml").string();
        if (!std::filesystem::exists(o->spec))
          throw InputError(o->resume + " is not a dpft run directory (no config.resolved.yaml)");
      } else if (o->spec.empty()) {
        throw ConfigError("dpft run: give a spec file (dpft run SPEC.yaml) or --resume RUN_DIR");
      }
      Spec spec = load_spec(o->spec, o->sets);
      if (o->resume.empty())
        check_executable(spec);
      else
        spec = resumable_here(spec);
      if (o->dry_run) {
        std::cout << spec_to_yaml_string(spec);
        std::cout << "# dry run: method " << spec.method.name << ", config hash "
                  << config_hash(spec) << "; nothing written\n";
        return 0;
      }
      RunOptions ro;
      ro.out_dir = o->out;
      ro.command_line = ctx.command_line;
      ro.resume_dir = o->resume;
      ro.stop_after = o->stop_after;
      RunResult r = run_method(spec, ro);
      std::cout << r.run_dir << "\n";
      return r.exit_code;
    };
  });
}

}  // namespace dpft
