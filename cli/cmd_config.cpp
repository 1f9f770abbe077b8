// `dpft config validate SPEC... [--set ...]` and `dpft config dump [SPEC] [--set ...]`
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
    std::vector<std::string> specs, sets;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cfg = app.add_subcommand("config", "check or print experiment specs");
  cfg->require_subcommand(1);

  CLI::App* validate =
      cfg->add_subcommand("validate", "parse and validate specs; exit 0 if every one is valid");
  validate
      ->add_option("spec", o->specs,
                   "experiment specs (YAML); each is reported (`ok: SPEC ...` or an error "
                   "naming it) and the exit status is the largest")
      ->required();
  validate->add_option("--set", o->sets, "override: key.path=value (repeatable)")->take_all();
  validate->callback([o, &ctx] {
    ctx.action = [o] {
      int worst = 0;
      for (const std::string& f : o->specs) {
        try {
          Spec s = load_spec(f, o->sets);
          try {
            check_executable(s);
          } catch (const ConfigError& e) {  // valid, but `dpft run` will refuse it on this build
            spdlog::warn("{}", e.what());
          }
          std::cout << "ok: " << f << " (method " << s.method.name << ", config hash "
                    << config_hash(s) << ")" << std::endl;  // whole lines beside stderr's
        } catch (const Error& e) {
          if (o->specs.size() == 1) throw;  // one spec: the usual error and exit status
          worst = std::max(worst, e.exit_code());
          spdlog::error("{}: {}", f, e.what());
        }
      }
      return worst;
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
