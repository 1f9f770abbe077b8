// `dpft config validate SPEC [--set ...]` and `dpft config dump [SPEC] [--set ...]`
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/config/spec.hpp"
#include "core/run/runner.hpp"
#include "core/util/error.hpp"
#include "methods/registry.hpp"

namespace dpft {

void register_config(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string spec;
    std::vector<std::string> sets;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cfg = app.add_subcommand("config", "check or print experiment specs");
  cfg->require_subcommand(1);

  CLI::App* validate =
      cfg->add_subcommand("validate", "parse and validate a spec; exit 0 if valid");
  validate->add_option("spec", o->spec, "experiment spec (YAML)")->required();
  validate->add_option("--set", o->sets, "override: key.path=value (repeatable)")->take_all();
  validate->callback([o, &ctx] {
    ctx.action = [o] {
      Spec s = load_spec(o->spec, o->sets);
      try {
        check_executable(s);
      } catch (const ConfigError& e) {  // valid, but `dpft run` will refuse it on this build
        spdlog::warn("{}", e.what());
      }
      std::cout << "ok: " << o->spec << " (method " << s.method.name << ", config hash "
                << config_hash(s) << ")\n";
      return 0;
    };
  });

  CLI::App* dump =
      cfg->add_subcommand("dump", "print the fully resolved spec (defaults < file < --set)");
  dump->add_option("spec", o->spec, "experiment spec (YAML); omitted = defaults only");
  dump->add_option("--set", o->sets, "override: key.path=value (repeatable)")->take_all();
  dump->callback([o, &ctx] {
    ctx.action = [o] {
      std::cout << spec_to_yaml_string(load_spec(o->spec, o->sets));
      return 0;
    };
  });
}

}  // namespace dpft
